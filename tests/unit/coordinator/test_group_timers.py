"""Delayed operations and timers, and the core procedures they drive.

Timers fire when now > deadline (strictly), as Kafka's MockTimer does.
"""

from __future__ import annotations

import pytest

from coordinator.group.messages import GroupRecord, GroupSnapshot, MemberRecord, ProtocolRecord
from coordinator.wire import error_codes as E
from tests.unit.coordinator.test_group_driver import Driver


def test_timers_fire_strictly_after_the_deadline():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    d.heartbeat(a, gen)
    d.heartbeat(b, gen)
    d.advance(500)
    assert b in d.group().members  # now == deadline: not yet
    d.heartbeat(a, gen)
    d.advance(1)
    assert d.state() == "PreparingRebalance" and b not in d.group().members


def test_next_deadline_and_tick():
    d = Driver()
    assert d.core.next_deadline() is None  # nothing scheduled before the first call
    (a,), gen = d.stable_group(1)
    assert d.core.next_deadline() == d.now + 500
    for _ in range(3):
        d.advance(200)
        d.heartbeat(a, gen)
        assert d.core.next_deadline() == d.now + 500  # rescheduling moves it
    d.advance(d.core.next_deadline() - d.now + 1)
    assert d.state() == "Empty"


def test_handle_fires_due_timers_first():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    d.advance(300)
    d.heartbeat(a, gen)
    d.now += 201  # the driver was late to tick: b's deadline has passed
    assert d.heartbeat(a, gen) == E.REBALANCE_IN_PROGRESS  # b expired before this heartbeat
    assert b not in d.group().members


# ----------------------------------------------------------------------------- 6.1 DelayedJoin


def test_delayed_join_timeout_is_the_max_rebalance_timeout_including_the_trigger():
    d = Driver()
    ids = [d.join_new(client_id=f"c{i}") for i in range(2)]
    tokens = [d.join(ids[0], rebalance=300), d.join(ids[1], rebalance=1000, session=5000)]
    d.advance(51)
    d.advance(51)
    leader = d.responses[tokens[0]]["leader"]
    d.sync(leader, 1, {})
    d.sync(ids[1], 1)
    assert d.state() == "Stable"
    start = d.now
    t = d.join(ids[0], rebalance=1200, session=5000)  # triggers with 1200: max(1200, 1000)
    d.advance(1200)
    assert t not in d.responses and d.state() == "PreparingRebalance"
    d.advance(1)
    assert d.responses[t]["generation_id"] == 2 and d.now - start == 1201
    assert ids[1] not in d.group().members  # did not rejoin


def test_delayed_join_completes_early_when_everyone_rejoined():
    d = Driver()
    (a, b, c), gen = d.stable_group(3)
    ts = [d.join(m) for m in (a, b)]
    assert not any(t in d.responses for t in ts)
    tc = d.join(c)
    assert all(d.responses[t]["generation_id"] == gen + 1 for t in (*ts, tc))


def test_delayed_join_rechecked_after_a_member_is_removed():
    d = Driver()
    (a, b, c), gen = d.stable_group(3)
    ta, tb = d.join(a), d.join(b)
    d.leave((c, None))
    assert d.responses[ta]["generation_id"] == gen + 1 and d.state() == "CompletingRebalance"
    assert tb in d.responses


# ----------------------------------------------------------------------------- 6.2 initial delay


def test_initial_delay_example_1_one_extension():
    # D=50, T=150: member 1 at t=0, member 2 at t=49 -> one more window -> both generation 1.
    d = Driver()
    m1, m2 = d.join_new(client_id="a"), d.join_new(client_id="b")
    t1 = d.join(m1, rebalance=150)
    d.advance(49)
    t2 = d.join(m2, rebalance=150)
    d.advance(2)  # t=51: the first window (0-50) expired, someone new came: extend
    assert d.state() == "PreparingRebalance"
    d.advance(50)  # t=101: the second window (51-101) has not expired yet
    assert t1 not in d.responses
    d.advance(1)
    assert d.responses[t1]["generation_id"] == d.responses[t2]["generation_id"] == 1


def test_initial_delay_example_2_budget_exhausted():
    # D=50, T=100: members 1,2 at t=0 (R=50); extend at t=50 (R=0); member 3 at t=51; complete.
    d = Driver()
    ids = [d.join_new(client_id=c) for c in "abc"]
    t1, t2 = d.join(ids[0], rebalance=100), d.join(ids[1], rebalance=100)
    d.advance(51)
    t3 = d.join(ids[2], rebalance=100)
    d.advance(50)
    assert d.state() == "PreparingRebalance"
    d.advance(1)
    assert {d.responses[t]["generation_id"] for t in (t1, t2, t3)} == {1}


def test_initial_delay_first_window_is_exactly_d_even_when_rebalance_timeout_is_smaller():
    d = Driver()
    m = d.join_new()
    t = d.join(m, rebalance=10)
    d.advance(50)
    assert t not in d.responses  # not min(D, T) = 10 (Kafka's code, not its comment)
    d.advance(1)
    assert d.responses[t]["generation_id"] == 1


def test_initial_delay_never_completes_early():
    d = Driver()
    m = d.join_new()
    t = d.join(m)  # everyone (one member) has joined
    assert t not in d.responses and d.state() == "PreparingRebalance"


def test_initial_delay_no_new_member_no_extension():
    d = Driver()
    m = d.join_new()
    t = d.join(m, rebalance=10_000)
    d.advance(51)
    assert d.responses[t]["error_code"] == E.NONE


def test_initial_delay_total_never_exceeds_max_d_t():
    d = Driver()
    ids = [d.join_new(client_id=f"c{i}", session=60_000) for i in range(4)]
    tokens = [d.join(ids[0], rebalance=120, session=60_000)]
    # someone new in every window: 0-50 (R=70), 51-101 (R=20), 102-122 (R=0), then complete
    for at, mid, fire in ((49, ids[1], 51), (99, ids[2], 102), (120, ids[3], None)):
        d.advance(at - d.now)
        tokens.append(d.join(mid, rebalance=120, session=60_000))
        if fire is not None:
            d.advance(fire - d.now)  # the window expires: someone new came, extend
        assert d.state() == "PreparingRebalance"
    d.advance(122 - d.now)
    assert tokens[0] not in d.responses
    d.advance(1)
    assert {d.responses[t]["generation_id"] for t in tokens} == {1}


def test_initial_delay_zero_completes_the_first_join_at_once():
    d = Driver(group_initial_rebalance_delay_ms=0)
    m = d.join_new()
    r = d.call_join(m)
    assert (r["error_code"], r["generation_id"], r["leader"]) == (E.NONE, 1, m)


def test_group_back_from_empty_waits_exactly_one_window():
    d = Driver()
    (a,), gen = d.stable_group(1)
    d.leave((a, None))
    assert d.state() == "Empty" and d.group().generation_id == 2
    ids = [d.join_new(client_id=c) for c in "xy"]
    t1 = d.join(ids[0], rebalance=10_000)
    d.advance(30)
    t2 = d.join(ids[1], rebalance=10_000)  # would extend a generation-0 group
    d.advance(21)
    assert {d.responses[t]["generation_id"] for t in (t1, t2)} == {3}


# ----------------------------------------------------------------------------- 6.3 session expiry


def test_session_expiry_removes_the_member_and_rebalances():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    for _ in range(3):
        d.advance(300)
        assert d.heartbeat(a, gen) in (E.NONE, E.REBALANCE_IN_PROGRESS)
    assert b not in d.group().members


def test_members_parked_in_join_or_sync_are_not_expired():
    d = Driver()
    (a, b), gen = d.stable_group(2, rebalance=5000)
    ta = d.join(a)
    for _ in range(3):  # a is parked in JoinGroup well past its session timeout
        d.advance(400)
        assert d.heartbeat(b, gen) == E.REBALANCE_IN_PROGRESS
    assert a in d.group().members
    tb = d.join(b)  # completes the join phase
    assert d.responses[ta]["generation_id"] == gen + 1
    leader = d.responses[ta]["leader"]
    follower = b if leader == a else a
    tf = d.sync(follower, gen + 1)
    d.advance(1000)  # follower parked in SyncGroup; the leader is silent and gets expired
    assert leader not in d.group().members
    assert follower in d.group().members and d.responses[tf]["error_code"] == E.REBALANCE_IN_PROGRESS
    assert tb in d.responses


def test_new_member_join_timeout_is_five_minutes():
    d = Driver()
    # a static member that never rejoins keeps the join phase open (rebalance timeout 600 s)
    t = d.join(instance="s", rebalance=600_000, session=600_000)
    d.advance(51)
    s = d.responses[t]["member_id"]
    d.sync(s, 1, {}, instance="s")
    new = d.join_new(client_id="new", session=500)
    tn = d.join(new, session=500, rebalance=600_000)
    assert d.state() == "PreparingRebalance"
    d.advance(1000)  # beyond its session timeout: a new member waits up to 300000
    assert new in d.group().members and tn not in d.responses
    d.advance(299_000)
    assert tn not in d.responses
    d.advance(1)
    r = d.responses[tn]
    assert (r["error_code"], r["member_id"]) == (E.UNKNOWN_MEMBER_ID, "")
    assert new not in d.group().members


def test_timer_of_a_member_that_left_does_nothing():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    d.leave((b, None))
    ta = d.join(a)
    assert d.responses[ta]["generation_id"] == gen + 1
    d.sync(a, gen + 1, {})
    d.advance(400)
    d.heartbeat(a, gen + 1)
    d.advance(200)  # b's old deadline passes
    assert d.state() == "Stable" and list(d.group().members) == [a]


@pytest.mark.parametrize("state", ["Stable", "PreparingRebalance"])
def test_offset_commit_keeps_the_member_alive(state):
    d = Driver()
    (a, b), gen = d.stable_group(2, rebalance=5000)
    if state == "PreparingRebalance":
        d.join(a)
    for _ in range(3):
        d.advance(300)
        errs = d.call_commit({("t", 0): 1}, generation=gen, member_id=b)
        assert errs == {("t", 0): E.NONE}
    assert b in d.group().members


def test_join_completion_reschedules_kept_static_members():
    d = Driver()
    tokens = {i: d.join(instance=i) for i in ("i0", "i1")}
    d.advance(51)
    d.advance(51)
    ids = {i: d.responses[t]["member_id"] for i, t in tokens.items()}
    gen = 1
    leader = d.responses[tokens["i0"]]["leader"]
    for i, m in ids.items():
        d.sync(m, gen, {} if m == leader else None, instance=i)
    t = d.join(ids["i0"], instance="i0", protocols=[{"name": "range", "metadata": b"x"}])
    d.advance(450)
    assert d.heartbeat(ids["i1"], gen, instance="i1") == E.REBALANCE_IN_PROGRESS
    d.advance(51)  # join phase times out at 500: i1 kept, its timer restarted at completion
    assert d.responses[t]["generation_id"] == 2
    d.advance(450)
    assert ids["i1"] in d.group().members  # 950 ms since its last heartbeat, 450 since completion


def test_load_schedules_every_member_session():
    d = Driver()
    rec = GroupRecord(
        "group",
        "consumer",
        "range",
        5,
        "m0",
        0,
        [
            MemberRecord(f"m{i}", None, "c", "h", 500, 500, "consumer", [ProtocolRecord("range", b"")], b"")
            for i in range(2)
        ],
    )
    d.advance(10_000)
    d.absorb(d.core.load_group(GroupSnapshot("group", rec, []), d.now))
    d.advance(300)
    assert d.heartbeat("m0", 5) == E.NONE
    d.advance(201)
    assert "m1" not in d.group().members and "m0" in d.group().members


# ----------------------------------------------------------------------------- 6.4 DelayedSync


def test_pending_sync_timeout_removes_members_that_never_synced_even_when_stable():
    d = Driver()
    ids = [d.join_new(client_id=f"c{i}") for i in range(3)]
    tokens = [d.join(m) for m in ids]
    d.advance(51)
    d.advance(51)
    leader = d.responses[tokens[0]]["leader"]
    lazy = ids[2]
    d.sync(leader, 1, {m: b"x" for m in ids})
    d.sync(ids[1], 1)
    assert d.state() == "Stable" and d.group().pending_sync_members == {lazy}
    d.advance(300)
    d.heartbeat(leader, 1), d.heartbeat(ids[1], 1), d.heartbeat(lazy, 1)
    d.advance(201)  # rebalance timeout 500 after join completion
    assert lazy not in d.group().members
    assert d.state() == "PreparingRebalance"


def test_pending_sync_timeout_emptying_the_group_makes_it_empty():
    d = Driver()
    ids = [d.join_new(client_id="a")]
    t = d.join(ids[0], session=5000)
    d.advance(51)
    assert d.responses[t]["generation_id"] == 1
    d.advance(501)  # never synced
    assert d.state() == "Empty" and d.group().generation_id == 2


def test_pending_sync_timer_cancelled_by_a_new_rebalance():
    d = Driver()
    (a, b), gen = d.stable_group(2, rebalance=400)
    ta = d.join(a)
    d.join(b)
    assert d.responses[ta]["generation_id"] == gen + 1
    leader = d.responses[ta]["leader"]
    d.join(leader, protocols=[{"name": "range", "metadata": b"new"}])  # rebalance before any sync
    assert d.group().sync_op is None and not d.group().pending_sync_members


def test_everyone_synced_no_removal():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    d.advance(300)
    d.heartbeat(a, gen), d.heartbeat(b, gen)
    d.advance(300)
    assert d.state() == "Stable" and len(d.group().members) == 2


# ----------------------------------------------------------------------------- 7.3 prepare rebalance


def test_prepare_rebalance_from_completing_answers_parked_syncs():
    d = Driver()
    ids = [d.join_new(client_id=f"c{i}") for i in range(2)]
    tokens = [d.join(m) for m in ids]
    d.advance(51)
    d.advance(51)
    leader = d.responses[tokens[0]]["leader"]
    follower = next(m for m in ids if m != leader)
    tf = d.sync(follower, 1)
    d.join(leader, protocols=[{"name": "range", "metadata": b"changed"}])
    assert d.responses[tf] == {
        "error_code": E.REBALANCE_IN_PROGRESS,
        "protocol_type": None,
        "protocol_name": None,
        "assignment": b"",
    }
    assert d.state() == "PreparingRebalance"


def test_resume_after_an_outage_restarts_session_timers_instead_of_expiring_everyone():
    # The node could not serve for longer than the members' session timeout (its ZooKeeper was
    # away, heartbeats were answered COORDINATOR_NOT_AVAILABLE): on resuming, nobody has expired.
    d = Driver()
    (a, b), gen = d.stable_group(2)
    d.now += 2_000  # four session timeouts without a tick
    d.core.resume(d.now)
    assert d.state() == "Stable" and {a, b} <= set(d.group().members)
    d.advance(300)
    assert d.heartbeat(a, gen) == E.NONE
    d.advance(201)  # b stays silent after the outage: it expires as usual, a does not
    assert d.state() == "PreparingRebalance" and b not in d.group().members
