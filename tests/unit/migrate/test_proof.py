"""migrate.migration.proof: what the source must show before the switch, what the copy reads back."""

from __future__ import annotations

import pytest
from kazoo.protocol.states import ZnodeStat

from core.types import TopicPartition as TP
from migrate.migration import proof
from migrate.schemes import zkio
from migrate.schemes.model import Committed

A0, A1, B0 = TP("a", 0), TP("a", 1), TP("b", 0)
READ = {A0: Committed(10, 0, 100), A1: Committed(20, 0, 101)}


@pytest.mark.parametrize(
    "now, moved, shown",
    [
        pytest.param(dict(READ), [], None, id="unchanged"),
        pytest.param({**READ, A1: Committed(21, 5, 140)}, [A1], "a-1: 20 -> 21", id="committed"),
        pytest.param(
            {**READ, A0: Committed(10, 5, 140)},
            [A0],
            "a-0: 10 -> 10 (committed again)",
            id="same-offset-again",
        ),
        pytest.param({**READ, B0: Committed(1, 5, 140)}, [B0], "b-0: None -> 1", id="partition-added"),
        pytest.param({A1: READ[A1]}, [A0], "a-0: 10 -> None", id="partition-removed"),
    ],
)
def test_a_source_written_since_it_was_read_is_refused(now, moved, shown):
    assert proof.moved(READ, now) == moved
    err = proof.source_moved("billing", "zk", READ, now)
    if shown is None:
        assert err is None
    else:
        assert shown in str(err) and "changed since it was frozen" in str(err) and "roll back" in str(err)


def test_the_recorded_snapshot_compares_offsets_only():
    snap = {A0: 10, A1: 20}
    assert proof.snapshot_moved("g", "zk", snap, {A0: 10, A1: 20}) is None
    assert "a-1: 20 -> 7" in str(proof.snapshot_moved("g", "zk", snap, {A0: 10, A1: 7}))
    assert "b-0: None -> 3" in str(proof.snapshot_moved("g", "zk", snap, {**snap, B0: 3}))


@pytest.mark.parametrize(
    "todo, batch, back",
    [
        pytest.param([A0, A1, B0], 1000, [], id="one-transaction-proves-all"),
        pytest.param([A0, A1, B0], 2, [A0, A1], id="earlier-transactions-read-back"),
        pytest.param([A0, A1, B0], 1, [A0, A1], id="one-each"),
        pytest.param([A1], 1000, [A0, B0], id="held-before-read-back"),
        pytest.param([], 1000, [A0, A1, B0], id="nothing-copied"),
    ],
)
def test_what_the_last_copy_transaction_did_not_write_is_read_back(todo, batch, back):
    assert proof.read_back([A0, A1, B0], todo, batch) == back


def _read(**mzxids: int) -> zkio.Leaves:
    """Offset znodes `t/<p>` as read, each with its mzxid."""
    return zkio.Leaves(
        frozenset(),
        {("t", p.lstrip("p")): (b"5", ZnodeStat(0, z, 0, 0, 0, 0, 0, 0, 1, 0, 0)) for p, z in mzxids.items()},
    )


@pytest.mark.parametrize(
    "now, changed",
    [
        pytest.param(_read(p0=7, p1=8), False, id="as-read"),
        pytest.param(_read(p0=7, p1=9), True, id="written-again"),
        pytest.param(_read(p0=7), True, id="removed"),
        pytest.param(_read(p0=7, p1=8, p2=3), True, id="added"),
    ],
)
def test_the_source_read_again_is_compared_znode_by_znode(now, changed):
    assert proof.rewritten(_read(p0=7, p1=8), now) is changed
