"""SyncGroup, Heartbeat, LeaveGroup."""

from __future__ import annotations

import pytest

from coordinator.group.messages import WriteGroupMetadata
from coordinator.group.state import DEAD, EMPTY
from coordinator.wire import error_codes as E
from tests.unit.coordinator.test_group_driver import Driver


def completing(d: Driver, n: int = 2) -> tuple[list[str], str, int]:
    """A group in CompletingRebalance: (member ids, leader, generation)."""
    ids = [d.join_new(client_id=f"c{i}") for i in range(n)]
    tokens = [d.join(m) for m in ids]
    while not all(t in d.responses for t in tokens):
        d.advance(51)
    assert d.state() == "CompletingRebalance"
    return ids, d.responses[tokens[0]]["leader"], d.responses[tokens[0]]["generation_id"]


# ============================================================================ SyncGroup


def test_sync_group_absent_is_unknown_member():
    d = Driver()
    assert d.responses[d.sync("m", 1)]["error_code"] == E.UNKNOWN_MEMBER_ID


def test_sync_dead_group_is_coordinator_not_available():
    d = Driver()
    (leader,), gen = d.stable_group(1)
    d.group().state = DEAD
    assert d.responses[d.sync(leader, gen)]["error_code"] == E.COORDINATOR_NOT_AVAILABLE


def test_sync_wrong_generation():
    d = Driver()
    (leader,), gen = d.stable_group(1)
    assert d.responses[d.sync(leader, gen + 1)]["error_code"] == E.ILLEGAL_GENERATION


@pytest.mark.parametrize(
    "ptype,pname,err",
    [
        (None, None, E.NONE),
        ("consumer", "range", E.NONE),
        ("connect", None, E.INCONSISTENT_GROUP_PROTOCOL),
        (None, "roundrobin", E.INCONSISTENT_GROUP_PROTOCOL),
        ("consumer", "roundrobin", E.INCONSISTENT_GROUP_PROTOCOL),
    ],
)
def test_sync_protocol_type_and_name_checked_only_when_given(ptype, pname, err):
    d = Driver()
    (leader,), gen = d.stable_group(1)
    r = d.responses[d.sync(leader, gen, protocol_type=ptype, protocol_name=pname)]
    assert r["error_code"] == err


def test_sync_in_preparing_rebalance():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    d.join(a)
    r = d.responses[d.sync(b, gen)]
    assert r == {
        "error_code": E.REBALANCE_IN_PROGRESS,
        "protocol_type": None,
        "protocol_name": None,
        "assignment": b"",
    }


def test_sync_in_empty_with_members_is_unknown_member():
    d = Driver()
    (leader,), gen = d.stable_group(1)
    d.group().state = EMPTY  # not produced by normal operation
    assert d.responses[d.sync(leader, gen)]["error_code"] == E.UNKNOWN_MEMBER_ID


def test_followers_wait_for_the_leader_then_everyone_gets_its_assignment():
    d = Driver()
    ids, leader, gen = completing(d, 3)
    followers = [m for m in ids if m != leader]
    waiting = [d.sync(m, gen) for m in followers]
    assert not any(t in d.responses for t in waiting)
    assert d.group().pending_sync_members == {leader}
    # a missing member gets empty bytes; entries for non-members are ignored
    t = d.sync(leader, gen, {leader: b"L", followers[0]: b"F0", "stranger": b"S"})
    assert d.state() == "Stable"
    expect = {leader: b"L", followers[0]: b"F0", followers[1]: b""}
    for tok, mid in zip([*waiting, t], [*followers, leader], strict=True):
        assert d.responses[tok] == {
            "error_code": E.NONE,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignment": expect[mid],
        }
    w = d.all_writes[-1]
    assert isinstance(w, WriteGroupMetadata)
    assert {m.member_id: m.assignment for m in w.record.members} == expect
    assert all("stranger" != m.member_id for m in w.record.members)


def test_leader_sync_first_then_followers_get_theirs_in_stable():
    d = Driver()
    ids, leader, gen = completing(d, 2)
    follower = next(m for m in ids if m != leader)
    d.sync(leader, gen, {follower: b"F"})
    r = d.responses[d.sync(follower, gen, {follower: b"ignored"})]
    assert r["assignment"] == b"F"
    # Stable: the request's assignments are ignored, even from the leader
    r = d.responses[d.sync(leader, gen, {leader: b"new", follower: b"new"})]
    assert r["assignment"] == b"" and d.group().members[follower].assignment == b"F"


def test_repeated_sync_replaces_the_parked_one():
    d = Driver()
    ids, leader, gen = completing(d, 2)
    follower = next(m for m in ids if m != leader)
    t1 = d.sync(follower, gen)
    t2 = d.sync(follower, gen)
    assert d.discarded == [t1]
    d.sync(leader, gen, {follower: b"F"})
    assert t1 not in d.responses and d.responses[t2]["assignment"] == b"F"


@pytest.mark.parametrize(
    "storage_error,client_error",
    [
        (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
        (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
        (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
        (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
        (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
        (E.REQUEST_TIMED_OUT, E.REBALANCE_IN_PROGRESS),
        (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
        (E.RECORD_LIST_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
        (E.INVALID_FETCH_SIZE, E.UNKNOWN_SERVER_ERROR),
        (E.NOT_COORDINATOR, E.NOT_COORDINATOR),
        (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_NOT_AVAILABLE),
    ],
)
def test_assignment_write_failure(storage_error, client_error):
    d = Driver(auto_persist=False)
    ids, leader, gen = completing(d, 2)
    follower = next(m for m in ids if m != leader)
    tf = d.sync(follower, gen)
    tl = d.sync(leader, gen, {leader: b"L", follower: b"F"})
    (w,) = d.writes
    d.complete(w.token, ok=False, error=storage_error)
    for t in (tf, tl):
        assert d.responses[t] == {
            "error_code": client_error,
            "protocol_type": None,
            "protocol_name": None,
            "assignment": b"",
        }
    assert d.state() == "PreparingRebalance"
    assert all(m.assignment == b"" for m in d.group().members.values())


def test_assignment_write_success_after_the_group_moved_on_is_ignored():
    d = Driver(auto_persist=False)
    ids, leader, gen = completing(d, 2)
    follower = next(m for m in ids if m != leader)
    tl = d.sync(leader, gen, {leader: b"L", follower: b"F"})
    (w,) = d.writes
    d.leave((follower, None))  # CompletingRebalance -> PreparingRebalance: parked syncs answered
    assert d.responses[tl]["error_code"] == E.REBALANCE_IN_PROGRESS
    d.complete(w.token, ok=True)
    assert d.group().members[leader].assignment == b""
    assert d.state() in ("PreparingRebalance", "CompletingRebalance")


def test_sync_in_stable_reschedules_the_session_and_clears_pending_sync():
    d = Driver()
    ids, leader, gen = completing(d, 2)
    follower = next(m for m in ids if m != leader)
    d.sync(leader, gen, {follower: b"F"})
    assert d.group().pending_sync_members == {follower}
    d.advance(400)
    d.heartbeat(leader, gen)
    d.sync(follower, gen)
    assert not d.group().pending_sync_members
    d.advance(400)  # 800 ms after join completion: alive thanks to the SyncGroup at 400
    assert follower in d.group().members


# ============================================================================ Heartbeat


def test_heartbeat_group_absent_dead():
    d = Driver()
    assert d.heartbeat("m", 0) == E.UNKNOWN_MEMBER_ID
    (leader,), gen = d.stable_group(1)
    d.group().state = DEAD
    assert d.heartbeat(leader, gen) == E.COORDINATOR_NOT_AVAILABLE


def test_heartbeat_identity_before_generation():
    d = Driver()
    (leader,), gen = d.stable_group(1)
    assert d.heartbeat("nobody", gen + 5) == E.UNKNOWN_MEMBER_ID
    assert d.heartbeat(leader, gen + 5) == E.ILLEGAL_GENERATION
    assert d.heartbeat(leader, -1) == E.ILLEGAL_GENERATION


@pytest.mark.parametrize("state", ["PreparingRebalance", "CompletingRebalance", "Stable"])
def test_heartbeat_by_state_and_it_keeps_the_member_alive(state):
    d = Driver()
    if state == "CompletingRebalance":
        ids, leader, gen = completing(d, 2)
        mid = next(m for m in ids if m != leader)
    else:
        (leader, mid), gen = d.stable_group(2, rebalance=2000)  # join phase outlasts 3 sessions
        if state == "PreparingRebalance":
            d.join(leader)
    assert d.state() == state
    expected = E.REBALANCE_IN_PROGRESS if state == "PreparingRebalance" else E.NONE
    for _ in range(3):
        d.advance(300)
        if d.state() != state:
            break
        assert d.heartbeat(mid, gen) == expected
    assert mid in d.group().members


def test_heartbeat_in_empty_with_members_is_unknown_member():
    d = Driver()
    (leader,), gen = d.stable_group(1)
    d.group().state = EMPTY
    assert d.heartbeat(leader, gen) == E.UNKNOWN_MEMBER_ID


def test_heartbeat_does_not_change_the_generation():
    d = Driver()
    (leader,), gen = d.stable_group(1)
    for _ in range(5):
        d.heartbeat(leader, gen)
    assert d.group().generation_id == gen


# ============================================================================ LeaveGroup


def test_leave_absent_group():
    d = Driver()
    r = d.leave(("a", None), ("", "i"))
    assert r == {
        "error_code": E.NONE,
        "members": [
            {"member_id": "a", "group_instance_id": None, "error_code": E.UNKNOWN_MEMBER_ID},
            {"member_id": "", "group_instance_id": "i", "error_code": E.UNKNOWN_MEMBER_ID},
        ],
    }


def test_leave_dead_group():
    d = Driver()
    (leader,), gen = d.stable_group(1)
    d.group().state = DEAD
    assert d.leave((leader, None)) == {"error_code": E.COORDINATOR_NOT_AVAILABLE, "members": []}


def test_leave_batch_each_identity_in_order():
    d = Driver()
    (a, b, c), gen = d.stable_group(3)
    p = d.join_new(client_id="late")
    r = d.leave((a, None), ("ghost", None), (p, None), (b, "not-static"), ("", None))
    assert [m["error_code"] for m in r["members"]] == [
        E.NONE,
        E.UNKNOWN_MEMBER_ID,
        E.NONE,
        E.UNKNOWN_MEMBER_ID,
        E.UNKNOWN_MEMBER_ID,
    ]
    assert [(m["member_id"], m["group_instance_id"]) for m in r["members"]] == [
        (a, None),
        ("ghost", None),
        (p, None),
        (b, "not-static"),
        ("", None),
    ]
    assert set(d.group().members) == {b, c} and not d.group().pending_members
    assert d.state() == "PreparingRebalance"


def test_leave_answers_the_parked_join_of_the_leaving_member():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    tb = d.join(b, protocols=[{"name": "range", "metadata": b"x"}])
    assert d.leave((b, None))["members"][0]["error_code"] == E.NONE
    r = d.responses[tb]
    assert (r["error_code"], r["member_id"], r["generation_id"]) == (E.UNKNOWN_MEMBER_ID, "", -1)


def test_leave_of_a_member_with_a_parked_sync_drops_that_sync():
    d = Driver()
    ids, leader, gen = completing(d, 2)
    follower = next(m for m in ids if m != leader)
    t = d.sync(follower, gen)
    d.leave((follower, None))
    assert d.discarded == [t] and t not in d.responses  # Kafka never answers it


def test_last_member_leaving_completing_rebalance_empties_the_group():
    d = Driver()
    ids, leader, gen = completing(d, 1)
    d.leave((leader, None))
    assert d.state() == "Empty" and d.group().generation_id == gen + 1
