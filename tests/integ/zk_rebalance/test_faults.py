"""Scheme one under faults on real ZooKeeper: session expiry, a zombie member, split brain on an ensemble."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from core.errors import CommitFailed
from core.types import TopicPartition
from core.zk import connect
from experiments.split_brain import split_brains, until
from topics.registry import create_topic
from zk_rebalance.events import read_events
from zk_rebalance.member import ZkGroupMember
from zk_rebalance.metrics import (
    offset_regressions,
    zombie_lifetime,
)

REPO = Path(__file__).resolve().parents[3]


def dump_inside(server) -> str:
    """The server's `dump` (sessions and their ephemeral znodes), asked from inside its network
    namespace, so it works while client traffic from outside is cut."""
    code = (
        "import sys; from core.four_letter import four_letter; print(four_letter('127.0.0.1', 2181, 'dump'))"
    )
    out = subprocess.run(
        ["nsenter", "-t", str(server.pid()), "-n", sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, f"dump from inside the container failed: {out.stderr}"
    return out.stdout


@pytest.mark.faults
def test_paused_server_past_session_timeout_re_registers_and_rejoins(zk_server, zk_connect, tmp_path):
    admin = connect(zk_connect)
    create_topic(admin, "t", 4)
    admin.stop()
    admin.close()
    ms = [
        ZkGroupMember(
            zk_connect,
            "g",
            ["t"],
            consumer_id=c,
            session_timeout_ms=2000,
            rebalance_backoff_ms=200,
            event_log=str(tmp_path / f"{c}.jsonl"),
        ).start()
        for c in ("a", "b")
    ]
    try:
        until(lambda: all(m.is_stable() for m in ms) and len(ms[0].assignment()) == 2, 15, "initial balance")
        zk_server.pause()
        time.sleep(3.0)  # > 2 s session timeout: the server expires both sessions once it runs again
        # Keep the members away until the unpaused server's session expirer has run (it runs within
        # a tick, 500 ms): a reconnect that wins that race revalidates the overdue session, which
        # ZooKeeper rightly keeps, and the expiry path under test would not happen.
        zk_server.cut_clients()
        zk_server.unpause()
        chroot = "/" + zk_connect.partition("/")[2]
        until(lambda: f"{chroot}/consumers/g/ids/" not in dump_inside(zk_server), 30, "the sessions expired")
        zk_server.restore_clients()
        until(lambda: all(m.events.counters["registered"] == 2 for m in ms), 30, "re-registration")
        until(
            lambda: (
                all(m.is_stable() for m in ms)
                and [sorted(m.assignment()) for m in ms]
                == [
                    [TopicPartition("t", 0), TopicPartition("t", 1)],
                    [TopicPartition("t", 2), TopicPartition("t", 3)],
                ]
            ),
            30,
            "rejoined and balanced",
        )
        for m in ms:
            assert m.events.counters["session_expired"] == 1
    finally:
        for m in ms:
            m.close()
    events = read_events(tmp_path.glob("*.jsonl"))
    for m in ms:
        mine = [e for e in events if e["member"] == m.consumer_id]
        expired_at = next(e["t"] for e in mine if e["ev"] == "session_expired")
        after = [e for e in mine if e["t"] >= expired_at]
        # handleNewSession: registered again, every watch armed again, one rebalance (0.8 ran a second
        # one when zkclient re-fired every watch); any other was for a change a watch reported (the
        # other member registering again), never for a watch re-fired with nothing changed.
        triggers = [e["trigger"] for e in after if e["ev"] == "rebalance_begin"]
        assert triggers[0] == "new_session" and triggers.count("new_session") == 1, triggers
        watches = [e for e in after if e["ev"] == "watch"]
        timeline = "\n".join(str({k: v for k, v in e.items() if k not in ("wall", "member")}) for e in after)
        assert all(e["kind"] == "ids" and (e["joined"] or e["left"]) for e in watches), timeline
        assert len(triggers) <= 1 + len(watches), (triggers, watches)


def _zombie(ensemble, tmp_path, fixed: bool) -> dict:
    """Member a (on a follower) is cut off from ZooKeeper while it owns t-0; b (on the leader) takes
    t-0 over after a's session expires and commits 100; a, still believing it owns t-0, commits 50."""
    chroot = f"/t-zombie-{uuid.uuid4().hex[:8]}"
    leader, follower = ensemble.leader(), ensemble.followers()[0]
    admin = connect(leader.connect_string + chroot)
    create_topic(admin, "t", 1)
    tp = TopicPartition("t", 0)
    opts = dict(
        session_timeout_ms=2000,
        rebalance_backoff_ms=100,
        auto_commit=False,
        fence_commits=fixed,
        stop_fetch_on_disconnect=fixed,
    )
    a = ZkGroupMember(
        follower.connect_string + chroot,
        "g",
        ["t"],
        consumer_id="a",
        event_log=str(tmp_path / "a.jsonl"),
        **opts,
    ).start()
    b = ZkGroupMember(
        leader.connect_string + chroot,
        "g",
        ["t"],
        consumer_id="b",
        event_log=str(tmp_path / "b.jsonl"),
        **opts,
    )
    result: dict = {}
    try:
        until(a.is_stable, 15, "a owns t-0")
        a.commit({tp: 10}, a.generation)
        b.start()
        until(lambda: b.is_stable() and a.is_stable(), 15, "b joined (with nothing: a sorts first)")
        assert a.assignment() == {tp} and b.assignment() == set()
        follower.cut_clients()

        def zombie_commit():
            try:
                a.commit({tp: 50}, a.generation)
                result["committed"] = True
            except CommitFailed as exc:
                result["refused"] = str(exc)

        th = threading.Thread(target=zombie_commit)
        th.start()
        until(lambda: b.assignment() == {tp}, 20, "b takes t-0 over after a's session expired")
        b.commit({tp: 100}, b.generation)
        time.sleep(3.0)  # a is cut off: > SUSPENDED (~1.3 s) + lease (2 s)
        result["a_fetching_while_cut"] = a.assignment()
        follower.restore_clients()
        th.join(30)
        assert not th.is_alive()
        until(
            lambda: a.events.counters["session_expired"] >= 1 and a.is_stable() and b.is_stable(),
            30,
            "a re-registered",
        )
        result["offset"] = int(admin.get("/consumers/g/offsets/t/0")[0])
    finally:
        a.close()
        b.close()
        admin.stop()
        admin.close()
    events = read_events(tmp_path.glob("*.jsonl"))
    result["regressions"] = offset_regressions(events)
    result["zombie_lifetime"] = zombie_lifetime(events, a.consumer_id)
    return result


@pytest.mark.ensemble
def test_zombie_overwrites_offsets_without_fencing_and_is_refused_with_it(ensemble, tmp_path):
    faithful = _zombie(ensemble, tmp_path / "faithful", fixed=False)
    assert faithful.get("committed") is True
    assert faithful["a_fetching_while_cut"] == {TopicPartition("t", 0)}  # no stop on disconnect (0.8)
    assert faithful["offset"] == 50  # the parked write ran in the new session: b's 100 is lost (S5)
    assert [(r["from"], r["to"]) for r in faithful["regressions"]] == [(100, 50)]
    assert faithful["zombie_lifetime"] > 2.5  # a kept fetching until it could reach ZooKeeper again (S6)

    fixed = _zombie(ensemble, tmp_path / "fixed", fixed=True)
    assert "refused" in fixed and "committed" not in fixed
    assert fixed["offset"] == 100 and fixed["regressions"] == []
    assert fixed["a_fetching_while_cut"] == set()  # SUSPENDED past the session timeout: ownership lost
    assert fixed["zombie_lifetime"] < faithful["zombie_lifetime"]


@pytest.mark.ensemble
def test_split_brain_from_a_stale_follower_and_sync_before_read_prevents_it(ensemble, tmp_path):
    # both groups through one partition of the follower, each in its own chroot
    runs = split_brains(
        ensemble, {"faithful": (tmp_path / "faithful", False), "synced": (tmp_path / "synced", True)}
    )
    faithful, synced = runs["faithful"], runs["synced"]
    # a decided from a stale view (only itself) and claimed what b and c own: NodeExists, rollback (S1).
    assert ["g_a"] in faithful["a_views"][1:]
    assert {e["partition"] for e in faithful["conflicts"]} >= {"t-2", "t-3"}
    assert faithful["s1"]["failed_attempts"] >= 1
    # Decisions disagree (S2): a claims all four, b and c claim t-2 and t-3 from the fresh view.
    assert faithful["s2"]["views"] >= 2 and faithful["s2"]["double_claimed"] == ["t-2", "t-3"]
    assert faithful["s3"] > 0  # t-0 and t-1 had no owner while a was stuck (S3)

    assert synced["conflicts"] == []
    assert all(v == ["g_a", "g_b", "g_c"] for v in synced["a_views"][1:])
    assert synced["s2"]["double_claimed"] == []
