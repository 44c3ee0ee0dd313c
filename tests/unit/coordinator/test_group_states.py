"""The group states, their valid previous states, and what drives each transition."""

from __future__ import annotations

import itertools

import pytest

from coordinator.group.coordinator import VALID_PREVIOUS_STATES, GroupState, IllegalStateTransition
from coordinator.group.metadata import Group
from coordinator.wire import error_codes as E
from tests.unit.coordinator.test_group_driver import Driver

S = GroupState
ALLOWED = {
    (S.STABLE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.STABLE),
    (S.PREPARING_REBALANCE, S.EMPTY),
    (S.STABLE, S.DEAD),
    (S.PREPARING_REBALANCE, S.DEAD),
    (S.COMPLETING_REBALANCE, S.DEAD),
    (S.EMPTY, S.DEAD),
    (S.DEAD, S.DEAD),  # Dead -> Dead is allowed
}


@pytest.mark.parametrize("old,new", list(itertools.product(S, S)), ids=lambda s: s.value)
def test_transition_table(old, new):
    group = Group("g", 0)
    group.state = old
    if (old, new) in ALLOWED:
        group.transition_to(new, 7)
        assert group.state is new
        assert group.state_timestamp == 7
    else:
        with pytest.raises(IllegalStateTransition):
            group.transition_to(new, 7)
        assert group.state is old


def test_table_matches_spec():
    assert {(p, t) for t, prevs in VALID_PREVIOUS_STATES.items() for p in prevs} == ALLOWED


def test_state_names_are_kafkas():
    assert [s.value for s in S] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]


@pytest.mark.parametrize(
    "state,can",
    [
        (S.STABLE, True),
        (S.COMPLETING_REBALANCE, True),
        (S.EMPTY, True),
        (S.PREPARING_REBALANCE, False),
        (S.DEAD, False),
    ],
)
def test_can_rebalance(state, can):
    group = Group("g", 0)
    group.state = state
    assert group.can_rebalance is can


def test_new_group_is_empty_generation_zero():
    d = Driver()
    d.join_new()
    g = d.group()
    assert (g.state, g.generation_id, g.protocol_name, g.leader_id) == (S.EMPTY, 0, None, None)


def test_normal_cycle_and_state_changed_outputs():
    d = Driver()
    (leader,), gen = d.stable_group(1)
    seen = [(s.old, s.new) for s in d.states]
    assert seen == [
        (None, S.EMPTY),
        (S.EMPTY, S.PREPARING_REBALANCE),
        (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
        (S.COMPLETING_REBALANCE, S.STABLE),
    ]
    # the last member leaving a Stable group: PreparingRebalance then immediately Empty
    d.states.clear()
    assert d.leave((leader, None))["members"][0]["error_code"] == E.NONE
    assert [(s.old, s.new) for s in d.states] == [
        (S.STABLE, S.PREPARING_REBALANCE),
        (S.PREPARING_REBALANCE, S.EMPTY),
    ]
    assert d.group().generation_id == gen + 1


def test_state_timestamp_is_the_time_of_the_last_change():
    d = Driver()
    d.stable_group(1)
    assert d.group().state_timestamp == d.now
    d.advance(400)
    assert d.group().state_timestamp == d.now - 400


def test_completing_to_preparing_on_changed_metadata():
    d = Driver()
    ids = [d.join_new(client_id=f"c{i}") for i in range(2)]
    t = [d.join(m) for m in ids]
    d.advance(51)  # the second member arrived in the first window: one more window
    d.advance(51)
    assert d.state() == "CompletingRebalance"
    follower = ids[1] if d.responses[t[0]]["leader"] == ids[0] else ids[0]
    d.join(follower, protocols=[{"name": "range", "metadata": b"changed"}])
    assert d.state() == "PreparingRebalance"
