"""The places where source comments or common descriptions disagree with Kafka's code, one test
each, plus a property-based run of random request sequences checking the core's invariants."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.group.metadata import Group
from coordinator.group.state import DEAD, EMPTY, STABLE
from coordinator.wire import error_codes as E
from tests.unit.coordinator.test_group_driver import Driver


# 1. Dead answers COORDINATOR_NOT_AVAILABLE, not UNKNOWN_MEMBER_ID.
@pytest.mark.parametrize("api", ["join", "sync", "heartbeat", "leave", "commit"])
def test_1_dead_group_answers_coordinator_not_available(api):
    d = Driver()
    (a,), gen = d.stable_group(1)
    d.group().state = DEAD
    if api == "join":
        err = d.call_join(a)["error_code"]
    elif api == "sync":
        err = d.responses[d.sync(a, gen)]["error_code"]
    elif api == "heartbeat":
        err = d.heartbeat(a, gen)
    elif api == "leave":
        err = d.leave((a, None))["error_code"]
    else:
        err = d.call_commit({("t", 0): 1}, generation=gen, member_id=a)[("t", 0)]
    assert err == E.COORDINATOR_NOT_AVAILABLE


# 2. CompletingRebalance heartbeats get NONE (since Kafka 2.7).
def test_2_heartbeat_in_completing_rebalance_is_none():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    ta = d.join(a)
    d.join(b)
    assert d.state() == "CompletingRebalance"
    assert d.heartbeat(b, d.responses[ta]["generation_id"]) == E.NONE


# 3. Empty accepts commits with generation < 0.
def test_3_empty_group_accepts_negative_generation_commits():
    d = Driver()
    (a,), gen = d.stable_group(1)
    d.leave((a, None))
    assert d.state() == "Empty"
    assert d.call_commit({("t", 0): 1}) == {("t", 0): E.NONE}


# 4. Static replacement persistence failure: docs/protocol.md restores the previous protocols.
def test_4_failed_static_replacement_restores_protocols():
    d = Driver()
    t = d.join(instance="i")
    d.advance(51)
    old = d.responses[t]["member_id"]
    d.sync(old, 1, {}, instance="i")
    d.auto_persist = False
    d.join(instance="i", protocols=[{"name": "range", "metadata": b"new"}])
    d.complete(d.writes[0].token, ok=False, error=E.NOT_LEADER_OR_FOLLOWER)
    assert d.group().members[old].protocols == [("range", b"m")]
    # so the old id rejoining with the new protocols starts a rebalance (Java's behaviour)
    d.auto_persist = True
    t2 = d.join(old, instance="i", protocols=[{"name": "range", "metadata": b"new"}])
    assert d.responses[t2]["generation_id"] == 2  # a single member: completes at once


# 5. Misleadingly named Kafka tests.
def test_5_can_rebalance_when_empty_and_dead_to_dead():
    g = Group("g", 0)
    assert g.state is EMPTY and g.can_rebalance
    g.state = DEAD
    g.transition_to(DEAD, 1)
    assert g.state is DEAD


# 6. A repeated JoinGroup / SyncGroup replaces the parked one, which is never answered.
def test_6_repeated_parked_requests_are_replaced_not_answered():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    j1 = d.join(a)
    j2 = d.join(a)
    d.join(b)
    assert j1 not in d.responses and d.responses[j2]["error_code"] == E.NONE
    leader = d.responses[j2]["leader"]
    follower = b if leader == a else a
    s1 = d.sync(follower, gen + 1)
    s2 = d.sync(follower, gen + 1)
    d.sync(leader, gen + 1, {})
    assert s1 not in d.responses and d.responses[s2]["error_code"] == E.NONE
    assert d.discarded == [j1, s1]


# 7. No InitialRebalance state; the first window is exactly D.
def test_7_initial_delay_is_preparing_rebalance_for_exactly_d():
    d = Driver()
    m = d.join_new()
    t = d.join(m, rebalance=5)
    assert d.state() == "PreparingRebalance"
    d.advance(50)
    assert t not in d.responses
    d.advance(1)
    assert d.responses[t]["error_code"] == E.NONE


# 8. Leader re-election: any rejoined member may become leader.
def test_8_any_rejoined_member_may_become_leader():
    d = Driver()
    (leader, b, c), gen = d.stable_group(3)
    tb = d.join(b, protocols=[{"name": "range", "metadata": b"x"}])
    tc = d.join(c)
    d.advance(501)
    assert d.responses[tb]["leader"] in (b, c)
    assert d.responses[tb]["leader"] == d.responses[tc]["leader"]


# ------------------------------------------------------------------------ invariants (hypothesis)

ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["new", "join", "sync", "heartbeat", "leave", "commit", "advance", "static"]),
        st.integers(0, 5),
        st.integers(0, 700),
    ),
    max_size=60,
)


def _check_invariants(d: Driver) -> None:
    for g in d.core._groups.values():
        assert g.state is not DEAD
        assert g.num_awaiting_join == sum(m.awaiting_join for m in g.members.values())
        counts: dict[str, int] = {}
        for m in g.members.values():
            for name in m.protocol_names:
                counts[name] = counts.get(name, 0) + 1
        assert counts == g.supported_protocols
        assert (g.leader_id is None) == (not g.members)
        assert g.leader_id is None or g.leader_id in g.members
        assert all(g.members[mid].group_instance_id == iid for iid, mid in g.static_members.items())
        assert g.pending_sync_members <= set(g.members)
        assert not (set(g.pending_members) & set(g.members))
        if g.state is EMPTY:
            assert not g.members
        if g.state is STABLE:
            assert not any(m.awaiting_sync for m in g.members.values())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ACTIONS)
def test_random_sequences_keep_invariants_and_answer_everything(actions):
    d = Driver(group_max_size=3)
    known: list[str] = []
    parked: list[int] = []
    for kind, i, n in actions:
        mid = known[i % len(known)] if known else ""
        gen = d.group().generation_id if "group" in d.core._groups else -1
        if kind == "new":
            r = d.call_join(client_id=f"c{i}")
            if r["error_code"] == E.MEMBER_ID_REQUIRED:
                known.append(r["member_id"])
        elif kind == "join":
            parked.append(d.join(mid, protocols=[{"name": "range", "metadata": bytes([n % 3])}]))
        elif kind == "static":
            parked.append(d.join(instance=f"i{i % 2}"))
        elif kind == "sync":
            parked.append(d.sync(mid, gen, {m: b"x" for m in known}))
        elif kind == "heartbeat":
            d.heartbeat(mid, gen)
        elif kind == "leave":
            d.leave((mid, None))
        elif kind == "commit":
            d.call_commit({("t", i): n}, generation=gen if n % 2 else -1, member_id=mid)
        else:
            d.advance(n)
        _check_invariants(d)
    # let every timer run out: every parked request is answered or was explicitly discarded
    for _ in range(5):
        d.advance(400_000)
    _check_invariants(d)
    for t in parked:
        assert t in d.responses or t in d.discarded
