"""Static membership (KIP-345): replacement, fencing, persistence failure, kept members."""

from __future__ import annotations

import pytest

from coordinator.group.messages import WriteStaticReplacement
from coordinator.wire import error_codes as E
from tests.unit.coordinator.test_group_driver import Driver


def P(*names: str, md: bytes = b"m") -> list[dict]:
    return [{"name": n, "metadata": md + n.encode()} for n in names]


def static_stable(d: Driver, instances=("i0", "i1"), protocols=None) -> tuple[dict[str, str], int]:
    """A Stable group of static members; returns ({instance: member id}, generation)."""
    tokens = {i: d.join(instance=i, client_id=f"client-{i}", protocols=protocols) for i in instances}
    while not all(t in d.responses for t in tokens.values()):
        d.advance(51)
    ids = {i: d.responses[t]["member_id"] for i, t in tokens.items()}
    gen = d.responses[tokens[instances[0]]]["generation_id"]
    leader = d.responses[tokens[instances[0]]]["leader"]
    for i, mid in ids.items():
        d.sync(mid, gen, {m: f"a-{m}".encode() for m in ids.values()} if mid == leader else None, instance=i)
    assert d.state() == "Stable"
    return ids, gen


def test_replacement_in_stable_with_same_protocol_persists_without_rebalance():
    d = Driver()
    ids, gen = static_stable(d)
    old = ids["i1"]
    writes = len(d.all_writes)
    r = d.call_join(instance="i1")
    new = r["member_id"]
    assert new != old and new.startswith("i1-")
    assert r == {
        "error_code": E.NONE,
        "generation_id": gen,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "leader": ids["i0"],
        "member_id": new,
        "members": [],
    }
    assert d.state() == "Stable" and d.group().generation_id == gen
    w = d.all_writes[writes]
    assert isinstance(w, WriteStaticReplacement) and (w.old_member_id, w.new_member_id) == (ids["i1"], new)
    assert [m.member_id for m in w.record.members] == [ids["i0"], new]
    g = d.group()
    assert g.static_members["i1"] == new and list(g.members) == [ids["i0"], new]  # position kept
    assert g.members[new].assignment == f"a-{old}".encode()  # assignment kept
    # the new id works, the old one is gone / fenced
    assert d.heartbeat(new, gen, instance="i1") == E.NONE
    assert d.heartbeat(old, gen, instance="i1") == E.FENCED_INSTANCE_ID
    assert d.heartbeat(old, gen) == E.UNKNOWN_MEMBER_ID
    assert d.responses[d.sync(new, gen, instance="i1")]["assignment"] == f"a-{old}".encode()


def test_replaced_static_leader_v8_sees_the_old_leader_id():
    d = Driver()
    ids, gen = static_stable(d)
    r = d.call_join(instance="i0")
    assert r["leader"] == ids["i0"] != r["member_id"]  # so it does not run the assignor
    assert r["members"] == []
    assert d.group().leader_id == r["member_id"]  # the new id is the leader


@pytest.mark.parametrize("instance,is_leader", [("i0", True), ("i1", False)])
def test_replacement_v9_skip_assignment(instance, is_leader):
    d = Driver(supports_skip_assignment=True)
    ids, gen = static_stable(d)
    r = d.call_join(instance=instance)
    new = r["member_id"]
    assert r["skip_assignment"] is is_leader
    if is_leader:
        assert r["leader"] == new
        assert [m["member_id"] for m in r["members"]] == [new, ids["i1"]]
    else:
        assert r["leader"] == ids["i0"] and r["members"] == []


def test_replacement_in_stable_that_changes_the_protocol_rebalances():
    d = Driver()
    ids, gen = static_stable(d, instances=("i0",), protocols=P("range", "rr"))
    t = d.join(instance="i0", protocols=P("rr"))
    # the only member has (re)joined: the join phase completes at once with the new protocol
    r = d.responses[t]
    assert (r["error_code"], r["generation_id"], r["protocol_name"]) == (E.NONE, gen + 1, "rr")


def test_replacement_in_completing_rebalance_always_rebalances_and_fences_the_parked_sync():
    d = Driver()
    tokens = {i: d.join(instance=i) for i in ("i0", "i1")}
    d.advance(51)
    d.advance(51)
    assert d.state() == "CompletingRebalance"
    ids = {i: d.responses[t]["member_id"] for i, t in tokens.items()}
    follower_sync = d.sync(ids["i1"], 1, instance="i1")
    assert follower_sync not in d.responses
    t = d.join(instance="i1")
    assert d.responses[follower_sync] == {
        "error_code": E.FENCED_INSTANCE_ID,
        "protocol_type": None,
        "protocol_name": None,
        "assignment": b"",
    }
    assert t not in d.responses and d.state() == "PreparingRebalance"


def test_replacement_in_preparing_rebalance_fences_the_parked_join():
    d = Driver()
    ids, gen = static_stable(d)
    old = ids["i1"]
    t_old = d.join(old, instance="i1", protocols=P("range", md=b"x"))
    assert d.state() == "PreparingRebalance"
    t_new = d.join(instance="i1")
    assert d.responses[t_old] == {
        "error_code": E.FENCED_INSTANCE_ID,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "member_id": old,
        "members": [],
    }
    assert t_new not in d.responses and d.state() == "PreparingRebalance"
    d.join(ids["i0"], instance="i0")
    r = d.responses[t_new]
    assert r["error_code"] == E.NONE and r["member_id"].startswith("i1-") and r["generation_id"] == gen + 1


def test_replacement_persistence_failure_reverts_id_timeouts_and_protocols():
    d = Driver(auto_persist=False)
    d.auto_persist = True
    ids, gen = static_stable(d)
    d.auto_persist = False
    old = ids["i1"]
    t = d.join(instance="i1", session=700, rebalance=800, protocols=P("range", md=b"new"))
    assert t not in d.responses  # waiting for the write
    (w,) = d.writes
    d.complete(w.token, ok=False, error=E.MESSAGE_TOO_LARGE)
    assert d.responses[t] == {
        "error_code": E.UNKNOWN_SERVER_ERROR,
        "generation_id": gen,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "leader": ids["i0"],
        "member_id": "",
        "members": [],
    }
    g = d.group()
    m = g.members[old]
    assert g.static_members["i1"] == old and list(g.members) == [ids["i0"], old]
    assert (m.session_timeout_ms, m.rebalance_timeout_ms) == (500, 500)
    assert m.protocols == [("range", b"m")]  # docs/protocol.md: previous protocols restored
    assert d.heartbeat(old, gen, instance="i1") == E.NONE
    # With the protocols restored, the old id rejoining with the new ones rebalances
    t2 = d.join(old, instance="i1", protocols=P("range", md=b"new"))
    assert t2 not in d.responses and d.state() == "PreparingRebalance"


def test_replacement_persist_success_answers_once():
    d = Driver(auto_persist=False)
    d.auto_persist = True
    ids, gen = static_stable(d)
    d.auto_persist = False
    t = d.join(instance="i1")
    (w,) = d.writes
    assert d.heartbeat(ids["i0"], gen) == E.NONE
    d.complete(w.token, ok=True)
    assert d.responses[t]["error_code"] == E.NONE
    d.complete(w.token, ok=True)  # a duplicate report is ignored


def test_static_members_that_did_not_rejoin_are_kept_dynamic_ones_dropped():
    d = Driver()
    ids, gen = static_stable(d)
    dyn = d.join_new(client_id="dyn")
    t_dyn = d.join(dyn)
    d.responses.pop(d.sync(ids["i0"], gen, instance="i0"), None)
    # a new dynamic member: PreparingRebalance; i1 keeps heartbeating but never rejoins
    t0 = d.join(ids["i0"], instance="i0")
    d.advance(400)
    assert d.heartbeat(ids["i1"], gen, instance="i1") == E.REBALANCE_IN_PROGRESS
    d.advance(101)  # DelayedJoin (500) times out
    r = d.responses[t0]
    assert r["generation_id"] == gen + 1
    assert ids["i1"] in d.group().members  # kept
    assert [m["member_id"] for m in r["members"]] == [ids["i0"], ids["i1"], dyn]  # in the leader's list
    assert d.responses[t_dyn]["generation_id"] == gen + 1
    # the kept member missed the rebalance: its generation is stale
    assert d.heartbeat(ids["i1"], gen, instance="i1") == E.ILLEGAL_GENERATION


def test_dynamic_member_not_rejoining_is_removed():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    ta = d.join(a)
    d.advance(501)
    assert d.responses[ta]["generation_id"] == gen + 1
    assert list(d.group().members) == [a]


def test_kept_static_member_votes_with_its_old_protocols():
    d = Driver()
    ids, gen = static_stable(d, protocols=P("range", "rr"))
    t = d.join(ids["i0"], instance="i0", protocols=P("rr", "range"))
    d.advance(400)
    assert d.heartbeat(ids["i1"], gen, instance="i1") == E.REBALANCE_IN_PROGRESS
    d.advance(101)
    # i0 votes rr, the kept i1 votes range: a tie, broken by join order (i0 first)
    assert d.responses[t]["protocol_name"] == "rr"
    assert d.group().members[ids["i1"]].protocols == [("range", b"mrange"), ("rr", b"mrr")]


def test_static_member_removed_by_leave_with_instance_id_only():
    d = Driver()
    ids, gen = static_stable(d)
    r = d.leave(("", "i1"))
    assert r == {
        "error_code": E.NONE,
        "members": [{"member_id": "", "group_instance_id": "i1", "error_code": E.NONE}],
    }
    assert ids["i1"] not in d.group().members and "i1" not in d.group().static_members
    assert d.leave(("", "i1"))["members"][0]["error_code"] == E.UNKNOWN_MEMBER_ID
    assert d.leave(("", None))["members"][0]["error_code"] == E.UNKNOWN_MEMBER_ID


def test_static_member_removed_by_session_expiry():
    d = Driver()
    ids, gen = static_stable(d)
    for _ in range(3):
        d.advance(200)
        d.heartbeat(ids["i0"], gen, instance="i0")
    assert ids["i1"] not in d.group().members and d.state() == "PreparingRebalance"


def test_pending_member_id_with_an_instance_id_is_checked_as_a_known_member():
    # Kafka throws here (a pending member is never static); the core answers instead.
    d = Driver()
    ids, gen = static_stable(d)
    p = d.join_new(client_id="dyn")
    assert d.call_join(p, instance="i-new")["error_code"] == E.UNKNOWN_MEMBER_ID
    assert d.call_join(p, instance="i0")["error_code"] == E.FENCED_INSTANCE_ID
