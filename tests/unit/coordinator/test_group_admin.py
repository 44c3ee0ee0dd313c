"""Admin calls (DescribeGroups, ListGroups, DeleteGroups, OffsetDelete) and shard hand-over
(snapshot, load after failover, unload)."""

from __future__ import annotations

import msgspec
import pytest

from coordinator.group.messages import DeleteGroup, GroupSnapshot, WriteGroupMetadata
from coordinator.group.state import DEAD, EMPTY, PREPARING_REBALANCE
from coordinator.wire import error_codes as E
from tests.unit.coordinator.test_group_driver import Driver

T0 = ("t", 0)


def sub(*topics: str) -> list[dict]:
    return [{"name": "range", "metadata": msgspec.msgpack.encode({"version": 0, "topics": list(topics)})}]


# ----------------------------------------------------------------------------- DescribeGroups


def test_describe_absent_group_is_dead():
    assert Driver().describe("nope") == [
        {
            "error_code": 0,
            "group_id": "nope",
            "group_state": "Dead",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        }
    ]


def test_describe_stable_group():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    (g,) = d.describe()
    assert (g["group_state"], g["protocol_type"], g["protocol_data"]) == ("Stable", "consumer", "range")
    assert g["members"] == [
        {
            "member_id": m,
            "group_instance_id": None,
            "client_id": "client",  # from the JoinGroup that added the member
            "client_host": "/127.0.0.1",
            "member_metadata": b"m",
            "member_assignment": m.encode(),
        }
        for m in (a, b)
    ]


def test_describe_other_states_have_no_protocol_or_member_data():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    d.join(a)
    (g,) = d.describe()
    assert (g["group_state"], g["protocol_type"], g["protocol_data"]) == (
        "PreparingRebalance",
        "consumer",
        "",
    )
    assert [(m["member_metadata"], m["member_assignment"]) for m in g["members"]] == [(b"", b""), (b"", b"")]


def test_describe_simple_group():
    d = Driver()
    d.call_commit({T0: 1})
    (g,) = d.describe()
    assert (g["group_state"], g["protocol_type"], g["protocol_data"], g["members"]) == ("Empty", "", "", [])


# ----------------------------------------------------------------------------- ListGroups


def test_list_groups_and_state_filter():
    d = Driver()
    d.stable_group(1, group="s")
    d.call_commit({T0: 1}, group="simple")
    assert d.list_groups() == {
        "error_code": 0,
        "groups": [
            {"group_id": "s", "protocol_type": "consumer", "group_state": "Stable"},
            {"group_id": "simple", "protocol_type": "", "group_state": "Empty"},
        ],
    }
    assert [g["group_id"] for g in d.list_groups(["stable"])["groups"]] == ["s"]
    assert [g["group_id"] for g in d.list_groups(["EMPTY", "Stable"])["groups"]] == ["s", "simple"]
    assert d.list_groups(["Dead"])["groups"] == []


@pytest.mark.parametrize("types,n", [([], 2), (["classic"], 2), (["Classic"], 2), (["consumer"], 0)])
def test_list_groups_type_filter(types, n):
    d = Driver()
    d.stable_group(1, group="s")
    d.call_commit({T0: 1}, group="simple")
    assert len(d.list_groups(types_filter=types)["groups"]) == n


# ----------------------------------------------------------------------------- DeleteGroups


def test_delete_groups():
    d = Driver()
    d.stable_group(1, group="busy")
    d.call_commit({T0: 1}, group="idle")
    d.call_commit({T0: 1}, group="dead")
    d.group("dead").state = DEAD
    assert d.delete_groups("idle", "busy", "absent", "dead") == {
        "idle": E.NONE,
        "busy": E.NON_EMPTY_GROUP,
        "absent": E.GROUP_ID_NOT_FOUND,
        "dead": E.GROUP_ID_NOT_FOUND,
    }
    assert "idle" not in d.core.group_ids()
    assert d.fetched([T0], group="idle") == {T0: (-1, "", 0)}
    assert any(isinstance(w, DeleteGroup) and w.group_id == "idle" for w in d.all_writes)
    assert (EMPTY, DEAD) in [(s.old, s.new) for s in d.states if s.group_id == "idle"]


@pytest.mark.parametrize("state", ["PreparingRebalance", "CompletingRebalance"])
def test_delete_rebalancing_group_is_non_empty(state):
    d = Driver()
    (a, b), gen = d.stable_group(2)
    d.join(a)
    if state == "CompletingRebalance":
        d.join(b)
    assert d.state() == state
    assert d.delete_groups("group") == {"group": E.NON_EMPTY_GROUP}


def test_deleted_group_is_recreated_from_generation_zero():
    d = Driver()
    (a,), gen = d.stable_group(1)
    d.leave((a, None))
    d.delete_groups("group")
    d.join_new()
    assert d.group().generation_id == 0


# ----------------------------------------------------------------------------- OffsetDelete


def test_offset_delete_absent_or_dead():
    d = Driver()
    assert d.offset_delete([T0]) == {"error_code": E.GROUP_ID_NOT_FOUND, "topics": []}
    d.call_commit({T0: 1})
    d.group().state = DEAD
    assert d.offset_delete([T0]) == {"error_code": E.GROUP_ID_NOT_FOUND, "topics": []}


def test_offset_delete_empty_group():
    d = Driver()
    d.call_commit({T0: 1, ("t", 1): 2})
    r = d.offset_delete([T0, ("x", 5)])
    assert r == {
        "error_code": 0,
        "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]},
            {"name": "x", "partitions": [{"partition_index": 5, "error_code": 0}]},
        ],
    }
    assert d.fetched([T0, ("t", 1)]) == {T0: (-1, "", 0), ("t", 1): (2, "", 0)}
    d.offset_delete([("t", 1)])
    assert d.core.group_ids() == []  # Empty with no offsets left: gone


def test_offset_delete_consumer_group_subscribed_topics():
    d = Driver()
    (a,), gen = d.stable_group(1, protocols=sub("t"))
    d.call_commit({T0: 1, ("u", 0): 1}, generation=gen, member_id=a)
    r = d.offset_delete([T0, ("u", 0)])
    assert r["error_code"] == 0
    assert [(t["name"], t["partitions"][0]["error_code"]) for t in r["topics"]] == [
        ("t", E.GROUP_SUBSCRIBED_TO_TOPIC),
        ("u", E.NONE),
    ]
    assert d.fetched([T0, ("u", 0)]) == {T0: (1, "", 0), ("u", 0): (-1, "", 0)}


def test_offset_delete_unparseable_subscriptions_count_as_everything():
    d = Driver()
    (a,), gen = d.stable_group(1, protocols=[{"name": "range", "metadata": b"\xc1"}])
    d.call_commit({("u", 0): 1}, generation=gen, member_id=a)
    r = d.offset_delete([("u", 0)])
    assert r["topics"][0]["partitions"][0]["error_code"] == E.GROUP_SUBSCRIBED_TO_TOPIC


def test_offset_delete_non_empty_non_consumer_group():
    d = Driver()
    mid = d.join_new(protocol_type="connect")
    d.join(mid, protocol_type="connect")
    assert d.offset_delete([T0]) == {"error_code": E.NON_EMPTY_GROUP, "topics": []}


# ----------------------------------------------------------------------------- snapshot / load / unload


def test_snapshot_load_roundtrip_keeps_the_generation():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    d.call_commit({T0: 42}, generation=gen, member_id=a, metadata="x")
    snap = d.core.snapshot("group")
    wire = msgspec.msgpack.encode(snap)  # plain, encodable data
    loaded = msgspec.msgpack.decode(wire, type=GroupSnapshot)
    assert loaded == snap

    other = Driver()
    other.now = d.now + 100
    other.absorb(other.core.load_group(loaded, other.now))
    assert other.state() == "Stable"
    g = other.group()
    assert (g.generation_id, g.leader_id, g.protocol_name, list(g.members)) == (gen, a, "range", [a, b])
    assert other.heartbeat(b, gen) == E.NONE
    assert other.call_commit({T0: 43}, generation=gen, member_id=b) == {T0: 0}
    assert other.responses[other.sync(b, gen)]["assignment"] == b.encode()
    assert other.fetched([T0]) == {T0: (43, "", 0)}
    # the leader forces a rebalance as usual; the generation moves on from the loaded one
    t = other.join(a)
    other.join(b)
    assert other.responses[t]["generation_id"] == gen + 1


def test_load_empty_and_simple_groups():
    d = Driver()
    (a,), gen = d.stable_group(1)
    d.call_commit({T0: 1}, generation=gen, member_id=a)
    d.leave((a, None))
    d.call_commit({T0: 2}, group="simple")
    other = Driver()
    other.absorb(other.core.load_group(d.core.snapshot("group"), 0))
    other.absorb(other.core.load_group(GroupSnapshot("simple", None, d.core.snapshot("simple").offsets), 0))
    assert other.state() == "Empty" and other.group().generation_id == gen + 1
    assert other.group().protocol_type == "consumer"
    assert other.state("simple") == "Empty" and other.group("simple").protocol_type is None
    assert other.fetched([T0], group="simple") == {T0: (2, "", 0)}


def test_group_write_payload_is_loadable():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    rec = [w for w in d.all_writes if isinstance(w, WriteGroupMetadata)][-1].record
    other = Driver()
    other.absorb(other.core.load_group(GroupSnapshot("group", rec, []), 0))
    assert other.heartbeat(a, gen) == E.NONE
    assert other.group().members[b].assignment == b.encode()


def test_unload_answers_parked_requests_with_not_coordinator():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    ta = d.join(a)
    d.absorb(d.core.unload_group("group", d.now))
    assert (d.responses[ta]["error_code"], d.responses[ta]["member_id"]) == (E.NOT_COORDINATOR, a)
    assert d.core.group_ids() == []
    assert (d.states[-1].old, d.states[-1].new) == (PREPARING_REBALANCE, DEAD)
    # timers of the unloaded group do nothing
    d.advance(10_000)

    d2 = Driver()
    ids = [d2.join_new(client_id=f"c{i}") for i in range(2)]
    tokens = [d2.join(m) for m in ids]
    d2.advance(51)
    d2.advance(51)
    follower = next(m for m in ids if m != d2.responses[tokens[0]]["leader"])
    ts = d2.sync(follower, 1)
    d2.absorb(d2.core.unload_group("group", d2.now))
    assert d2.responses[ts]["error_code"] == E.NOT_COORDINATOR


def test_load_replaces_a_group_already_held():
    d = Driver()
    (a,), gen = d.stable_group(1)
    snap = d.core.snapshot("group")
    t = d.join(a, protocols=[{"name": "range", "metadata": b"x"}])
    assert t in d.responses  # single member: completes at once
    d.absorb(d.core.load_group(snap, d.now))
    assert d.group().generation_id == gen and d.state() == "Stable"


def test_stats_reports_state_and_member_count_per_group():
    d = Driver()
    d.stable_group(3, group="g-a")
    d.stable_group(1, group="g-b")
    stats = {gid: (state.value, n) for gid, (state, n) in d.core.stats().items()}
    assert stats == {"g-a": ("Stable", 3), "g-b": ("Stable", 1)}
