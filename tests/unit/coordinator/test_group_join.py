"""JoinGroup, pending members, leader selection, the protocol vote, generations."""

from __future__ import annotations

import re

import msgspec
import pytest

from coordinator.group.coordinator import GroupCoordinator
from coordinator.group.messages import (
    GroupRecord,
    GroupSnapshot,
    MemberRecord,
    ProtocolRecord,
    WriteGroupMetadata,
)
from coordinator.group.state import DEAD, EMPTY
from coordinator.wire import error_codes as E
from coordinator.wire.schema import JOIN_GROUP, JoinGroupRequest
from tests.unit.coordinator.test_group_driver import Driver


def P(*names: str, md: bytes = b"m") -> list[dict]:
    return [{"name": n, "metadata": md + n.encode()} for n in names]


def join_all(d: Driver, ids: list[str], protocols: dict[str, list] | None = None) -> dict[str, dict]:
    """Rejoin every id and run the clock until all JoinGroups are answered."""
    tokens = {m: d.join(m, protocols=(protocols or {}).get(m)) for m in ids}
    for _ in range(100):
        if all(t in d.responses for t in tokens.values()):
            break
        d.advance(51)
    return {m: d.responses[t] for m, t in tokens.items()}


# ----------------------------------------------------------------------------- 3.1 / 3.2


def test_known_member_id_for_absent_group_is_unknown_member():
    d = Driver()
    r = d.call_join("m-1")
    assert (r["error_code"], r["member_id"], r["generation_id"]) == (E.UNKNOWN_MEMBER_ID, "m-1", -1)
    assert d.core.group_ids() == []


def test_member_id_required_hands_out_an_id_and_changes_nothing():
    d = Driver()
    r = d.call_join(client_id="consumer-1")
    assert r == {
        "error_code": E.MEMBER_ID_REQUIRED,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "member_id": "consumer-1-1",
        "members": [],
    }
    g = d.group()
    assert (g.state, g.generation_id, g.members, set(g.pending_members)) == (EMPTY, 0, {}, {"consumer-1-1"})


def _join_request(body):
    return msgspec.convert(body, JoinGroupRequest, builtin_types=(bytes,))


def test_generated_member_ids_are_client_or_instance_id_plus_uuid4():
    core = GroupCoordinator()
    body = {
        "group_id": "g",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": P("range"),
    }
    out = core.handle(JOIN_GROUP, _join_request(body), 0, client_id="my-client", request_token=1)
    uuid4 = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
    assert re.fullmatch("my-client-" + uuid4, out[-1].body.member_id)
    out = core.handle(
        JOIN_GROUP,
        _join_request({**body, "group_instance_id": "inst"}),
        0,
        client_id="my-client",
        request_token=2,
    )
    assert re.fullmatch("inst-" + uuid4, core._groups["g"].static_members["inst"])


def test_old_clients_without_member_id_required_are_added_at_once():
    d = Driver(require_known_member_id=False)
    t = d.join()
    assert t not in d.responses and d.state() == "PreparingRebalance"
    d.advance(51)
    r = d.responses[t]
    assert (r["error_code"], r["generation_id"], r["leader"]) == (E.NONE, 1, r["member_id"])


def test_static_member_never_gets_member_id_required():
    d = Driver()
    t = d.join(instance="i1")
    assert t not in d.responses and d.state() == "PreparingRebalance"
    d.advance(51)
    assert d.responses[t]["error_code"] == E.NONE
    assert d.responses[t]["member_id"].startswith("i1-")


@pytest.mark.parametrize(
    "ptype,protocols",
    [("", P("range")), ("consumer", [])],
)
def test_empty_group_needs_a_protocol_type_and_protocols(ptype, protocols):
    d = Driver()
    r = d.call_join(protocol_type=ptype, protocols=protocols)
    assert (r["error_code"], r["member_id"]) == (E.INCONSISTENT_GROUP_PROTOCOL, "")


def test_empty_group_does_not_compare_previous_protocol_type():
    d = Driver()
    (leader,), _ = d.stable_group(1)
    d.leave((leader, None))
    assert d.state() == "Empty" and d.group().protocol_type == "consumer"
    assert d.call_join(protocol_type="connect")["error_code"] == E.MEMBER_ID_REQUIRED
    mid = d.join_new(protocol_type="connect")
    d.join(mid, protocol_type="connect")
    assert d.group().protocol_type == "connect"


@pytest.mark.parametrize(
    "ptype,protocols,ok",
    [
        ("consumer", P("range"), True),
        ("consumer", P("blah", "range"), True),
        ("connect", P("range"), False),
        ("consumer", P("roundrobin"), False),
    ],
)
def test_new_member_protocol_compatibility_with_a_non_empty_group(ptype, protocols, ok):
    d = Driver()
    d.stable_group(1, protocols=P("range"))
    r = d.call_join(protocol_type=ptype, protocols=protocols)
    assert r["error_code"] == (E.MEMBER_ID_REQUIRED if ok else E.INCONSISTENT_GROUP_PROTOCOL)
    if not ok:
        assert r["member_id"] == ""


def test_common_protocol_must_be_supported_by_every_member():
    d = Driver()
    ids = [d.join_new(client_id=f"c{i}") for i in range(2)]
    join_all(d, ids, {ids[0]: P("range", "rr"), ids[1]: P("rr")})
    assert d.call_join(protocols=P("range"))["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    assert d.call_join(protocols=P("rr"))["error_code"] == E.MEMBER_ID_REQUIRED


def test_lone_member_cannot_switch_to_a_disjoint_protocol_list():
    d = Driver()
    (leader,), gen = d.stable_group(1, protocols=P("range"))
    r = d.call_join(leader, protocols=P("roundrobin"))
    assert (r["error_code"], r["member_id"]) == (E.INCONSISTENT_GROUP_PROTOCOL, leader)
    assert d.state() == "Stable"


def test_join_on_dead_group_is_coordinator_not_available():
    d = Driver()
    (leader,), _ = d.stable_group(1)
    d.group().state = DEAD
    for mid, echoed in (("", ""), (leader, leader)):
        r = d.call_join(mid)
        assert (r["error_code"], r["member_id"]) == (E.COORDINATOR_NOT_AVAILABLE, echoed)


# ----------------------------------------------------------------------------- 3.1.4 capacity


def test_capacity_stable_rejects_new_members_beyond_max_size():
    d = Driver()
    ids, gen = d.stable_group(4)
    r = d.call_join()
    assert (r["error_code"], r["member_id"]) == (E.GROUP_MAX_SIZE_REACHED, "")
    assert d.state() == "Stable" and len(d.group().members) == 4
    # existing members are always accepted
    assert d.call_join(ids[1])["error_code"] == E.NONE


def test_capacity_pending_member_counts_as_new_and_is_dropped():
    d = Driver()
    ids, gen = d.stable_group(3)
    p1, p2 = d.join_new(client_id="p1"), d.join_new(client_id="p2")
    t1 = d.join(p1)  # 4 members now: PreparingRebalance
    assert d.state() == "PreparingRebalance"
    tokens = [d.join(m) for m in ids]
    assert d.state() == "PreparingRebalance"  # p2 is still pending: blocks completion
    r = d.call_join(p2)  # num_awaiting_join == 4 == max size
    assert (r["error_code"], r["member_id"]) == (E.GROUP_MAX_SIZE_REACHED, "")
    assert p2 not in d.group().pending_members
    assert d.state() == "CompletingRebalance"  # step 6: the join phase completes
    assert all(d.responses[t]["generation_id"] == gen + 1 for t in tokens + [t1])


def test_capacity_over_limit_after_load_kicks_out_the_last_rejoiners():
    d = Driver()
    members = [
        MemberRecord(f"m{i}", None, "c", "h", 500, 500, "consumer", [ProtocolRecord("range", b"m")], b"")
        for i in range(6)
    ]
    rec = GroupRecord("group", "consumer", "range", 3, "m0", 0, members)
    d.absorb(d.core.load_group(GroupSnapshot("group", rec, []), d.now))
    assert d.state() == "PreparingRebalance"  # loaded over group.max.size
    tokens = {f"m{i}": d.join(f"m{i}") for i in range(6)}
    for i in (4, 5):
        r = d.responses[tokens[f"m{i}"]]
        assert (r["error_code"], r["member_id"]) == (E.GROUP_MAX_SIZE_REACHED, "")
        assert f"m{i}" not in d.group().members
    assert d.state() == "CompletingRebalance"
    assert {d.responses[tokens[f"m{i}"]]["generation_id"] for i in range(4)} == {4}
    assert len(d.group().members) == 4


# ----------------------------------------------------------------------------- 3.3 known members


def test_preparing_rebalance_rejoin_is_parked_and_a_repeat_replaces_it():
    d = Driver()
    a, b = d.stable_group(2)[0]
    t1 = d.join(a)
    assert d.state() == "PreparingRebalance"
    t2 = d.join(a, session=600, protocols=P("range", md=b"x"))
    assert d.discarded == [t1]
    m = d.group().members[a]
    assert m.session_timeout_ms == 600 and m.protocols == [("range", b"xrange")]
    d.join(b)
    assert d.responses[t2]["error_code"] == E.NONE and t1 not in d.responses


def test_completing_rebalance_identical_protocols_answer_immediately():
    d = Driver()
    ids = [d.join_new(client_id=f"c{i}") for i in range(2)]
    first = join_all(d, ids)
    leader = first[ids[0]]["leader"]
    follower = ids[1] if leader == ids[0] else ids[0]
    r = d.call_join(follower)
    assert (r["error_code"], r["generation_id"], r["leader"], r["members"]) == (E.NONE, 1, leader, [])
    assert (r["protocol_type"], r["protocol_name"]) == ("consumer", "range")
    r = d.call_join(leader)
    assert {m["member_id"] for m in r["members"]} == set(ids)
    assert d.state() == "CompletingRebalance"


def test_completing_rebalance_changed_protocols_rebalance():
    d = Driver()
    ids = [d.join_new(client_id=f"c{i}") for i in range(2)]
    join_all(d, ids)
    t = d.join(ids[0], protocols=P("range", md=b"new"))
    assert t not in d.responses and d.state() == "PreparingRebalance"


@pytest.mark.parametrize(
    "who,protocols,rebalance",
    [
        ("leader", None, True),  # the leader always forces a rebalance
        ("follower", None, False),
        ("follower", P("range", md=b"changed"), True),
        ("follower", P("range", "rr"), True),
    ],
)
def test_stable_rejoin(who, protocols, rebalance):
    d = Driver()
    (leader, follower), gen = d.stable_group(2)
    mid = leader if who == "leader" else follower
    t = d.join(mid, protocols=protocols)
    if rebalance:
        assert t not in d.responses and d.state() == "PreparingRebalance"
    else:
        r = d.responses[t]
        assert (r["error_code"], r["generation_id"], r["leader"], r["members"]) == (E.NONE, gen, leader, [])
        assert d.state() == "Stable"


def test_identical_protocols_comparison_is_order_sensitive():
    d = Driver()
    (leader, follower), gen = d.stable_group(2, protocols=P("range", "rr"))
    t = d.join(follower, protocols=P("rr", "range"))
    assert t not in d.responses and d.state() == "PreparingRebalance"


def test_single_member_leader_rejoin_completes_synchronously():
    d = Driver()
    (leader,), gen = d.stable_group(1)
    r = d.call_join(leader)
    assert (r["error_code"], r["generation_id"], r["leader"]) == (E.NONE, gen + 1, leader)
    assert d.state() == "CompletingRebalance"


def test_known_member_on_empty_group_with_members_is_unknown_member():
    d = Driver()
    (leader,), gen = d.stable_group(1)
    d.group().state = EMPTY  # not produced by normal operation
    assert d.call_join(leader)["error_code"] == E.UNKNOWN_MEMBER_ID


def test_join_response_contents():
    d = Driver()
    ids = [d.join_new(client_id=f"c{i}") for i in range(3)]
    res = join_all(d, ids, {m: P("range", "rr", md=m.encode()) for m in ids})
    leader = res[ids[0]]["leader"]
    for mid, r in res.items():
        assert r["member_id"] == mid
        assert (r["generation_id"], r["protocol_type"], r["protocol_name"], r["leader"]) == (
            1,
            "consumer",
            "range",
            leader,
        )
        if mid == leader:
            assert r["members"] == [
                {"member_id": m, "group_instance_id": None, "metadata": m.encode() + b"range"} for m in ids
            ]
        else:
            assert r["members"] == []
    assert "skip_assignment" not in res[ids[0]]


# ----------------------------------------------------------------------------- 5.1 pending members


def test_pending_member_rejoins_and_is_added():
    d = Driver()
    mid = d.join_new()
    assert d.state() == "Empty"
    t = d.join(mid)
    assert d.state() == "PreparingRebalance" and mid in d.group().members
    assert mid not in d.group().pending_members
    d.advance(51)
    assert d.responses[t]["member_id"] == mid


def test_pending_members_block_normal_join_completion_until_they_join():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    p = d.join_new(client_id="late")
    ta, tb = d.join(a), d.join(b)
    assert d.state() == "PreparingRebalance"
    tp = d.join(p)
    assert d.state() == "CompletingRebalance"
    assert {d.responses[t]["generation_id"] for t in (ta, tb, tp)} == {gen + 1}


def test_pending_member_expiry_unblocks_the_join_phase():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    d.join_new(client_id="late", session=100)
    ta, _ = d.join(a), d.join(b)
    d.advance(100)
    assert d.state() == "PreparingRebalance"
    d.advance(1)  # now > deadline: the pending id expires and the join completes
    assert d.state() == "CompletingRebalance" and not d.group().pending_members
    assert d.responses[ta]["generation_id"] == gen + 1


def test_pending_member_leaving_unblocks_the_join_phase():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    p = d.join_new(client_id="late")
    d.join(a), d.join(b)
    assert d.leave((p, None))["members"] == [
        {"member_id": p, "group_instance_id": None, "error_code": E.NONE}
    ]
    assert d.state() == "CompletingRebalance"


def test_pending_members_do_not_block_the_initial_delay():
    d = Driver()
    a = d.join_new(client_id="a")
    d.join_new(client_id="b")  # stays pending
    t = d.join(a)
    d.advance(51)
    assert d.responses[t]["error_code"] == E.NONE and d.state() == "CompletingRebalance"


# ----------------------------------------------------------------------------- 5.3 leader


def test_first_member_is_leader():
    d = Driver()
    (leader, *_), _ = d.stable_group(3)
    assert d.group().leader_id == leader
    assert leader.startswith("c0-")  # first to join (join order)


def test_leader_leaving_hands_leadership_to_a_remaining_member_at_once():
    d = Driver()
    (leader, b, c), _ = d.stable_group(3)
    d.leave((leader, None))
    assert d.group().leader_id == b  # first in join order


def test_leader_not_rejoining_is_replaced_by_a_rejoined_member():
    d = Driver()
    (leader, b, c), gen = d.stable_group(3)
    tb = d.join(b)  # follower changes nothing -> answered at once; force a rebalance via c
    assert d.responses[tb]["error_code"] == E.NONE
    tc = d.join(c, protocols=P("range", md=b"new"))
    tb = d.join(b)
    d.advance(501)  # the leader never rejoins: DelayedJoin times out, the leader is dropped
    r = d.responses[tc]
    assert r["generation_id"] == gen + 1 and r["leader"] in (b, c)
    assert leader not in d.group().members
    assert d.responses[tb]["leader"] == r["leader"]


def test_leader_that_keeps_rejoining_stays_leader():
    d = Driver()
    (leader, b), gen = d.stable_group(2)
    tb = d.join(b, protocols=P("range", md=b"x"))
    tl = d.join(leader)
    assert d.responses[tl]["leader"] == leader == d.responses[tb]["leader"]


def test_no_member_rejoined_keeps_preparing_with_a_fresh_delayed_join():
    d = Driver()
    ts = [d.join(instance=f"i{i}") for i in range(2)]
    d.advance(51)
    d.advance(51)
    ids = [d.responses[t]["member_id"] for t in ts]
    gen = d.responses[ts[0]]["generation_id"]
    leader = d.responses[ts[0]]["leader"]
    for m, i in zip(ids, ("i0", "i1"), strict=True):
        d.sync(m, gen, {x: b"a" for x in ids} if m == leader else None, instance=i)
    assert d.state() == "Stable"
    # a third (dynamic) member joins, then leaves before the phase ends; nobody else rejoins
    p = d.join_new(client_id="dyn")
    d.join(p)
    assert d.state() == "PreparingRebalance"
    d.leave((p, None))
    for _ in range(4):  # heartbeats keep the static members alive; they never rejoin
        d.advance(200)
        for m, i in zip(ids, ("i0", "i1"), strict=True):
            assert d.heartbeat(m, gen, instance=i) == E.REBALANCE_IN_PROGRESS
    assert d.state() == "PreparingRebalance" and d.group().generation_id == gen
    # one static member rejoins: it becomes the leader of the next generation
    t = d.join(ids[1], instance="i1")
    d.advance(501)
    assert d.responses[t]["leader"] == ids[1] and d.responses[t]["generation_id"] == gen + 1


# ----------------------------------------------------------------------------- 5.4 vote


@pytest.mark.parametrize(
    "lists,expected",
    [
        ([["range", "roundrobin"]], {"range"}),
        ([["range", "roundrobin"], ["roundrobin", "range"]], {"range", "roundrobin"}),
        ([["range", "roundrobin"], ["roundrobin", "range"], ["roundrobin", "range"]], {"roundrobin"}),
        ([["range", "roundrobin"], ["roundrobin", "blah"]], {"roundrobin"}),
    ],
)
def test_protocol_vote(lists, expected):
    d = Driver()
    ids = [d.join_new(client_id=f"c{i}", protocols=P(*lists[0])) for i in range(len(lists))]
    res = join_all(d, ids, {m: P(*names) for m, names in zip(ids, lists, strict=True)})
    assert {r["protocol_name"] for r in res.values()} == {d.group().protocol_name}
    assert d.group().protocol_name in expected


def test_vote_tie_goes_to_the_earliest_joined_voter():
    d = Driver()
    ids = [d.join_new(client_id=f"c{i}") for i in range(2)]
    join_all(d, ids, {ids[0]: P("rr", "range"), ids[1]: P("range", "rr")})
    assert d.group().protocol_name == "rr"  # docs/protocol.md: vote ties follow join order


# ----------------------------------------------------------------------------- 5.5 generations


def test_generation_rules():
    d = Driver()
    pending = d.join_new()
    assert d.group().generation_id == 0  # MEMBER_ID_REQUIRED leaves it alone
    d.leave((pending, None))  # else the pending id would block the join phases below
    (a, b), gen = d.stable_group(2)
    assert gen == 1
    d.heartbeat(a, gen)
    assert d.group().generation_id == 1
    ta = d.join(a)
    assert d.state() == "PreparingRebalance" and d.group().generation_id == 1  # old one still
    assert d.heartbeat(b, 1) == E.REBALANCE_IN_PROGRESS
    d.join(b)
    assert d.group().generation_id == 2 and d.responses[ta]["generation_id"] == 2
    # completing with zero members still increments
    d.leave((a, None), (b, None))
    assert d.state() == "Empty" and d.group().generation_id == 3
    assert d.group().protocol_name is None
    # the Empty group is persisted
    assert isinstance(d.all_writes[-1], WriteGroupMetadata) and d.all_writes[-1].record.members == []
    assert d.all_writes[-1].record.generation_id == 3
