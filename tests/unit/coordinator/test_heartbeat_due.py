"""`heartbeat_due`, WatchGroup's question to the core: would the member's next heartbeat move it?

Classic groups: due once a rebalance starts or the group is past the member's generation.
Incremental groups: due when its next heartbeat would bring it an epoch, a revocation or free
partitions; never while it waits for partitions others still hold (else a watching member would
heartbeat in a loop).
"""

from __future__ import annotations

from coordinator.wire import errors as E
from tests.unit.coordinator.incremental_core import Core, partitions
from tests.unit.coordinator.test_group_driver import GROUP, Driver

DUE, QUIET = E.REBALANCE_IN_PROGRESS, E.NONE


def test_classic_due_when_a_rebalance_starts_or_the_generation_moved():
    d = Driver()
    (leader, follower), gen = d.stable_group(2)
    due = d.core.heartbeat_due
    assert due(GROUP, leader, gen) == QUIET
    assert due(GROUP, follower, gen - 1) == DUE  # behind the group
    assert due(GROUP, "stranger", gen) == E.UNKNOWN_MEMBER_ID
    assert due("no-such-group", leader, gen) == E.UNKNOWN_MEMBER_ID
    d.join(d.join_new(client_id="joiner"))  # a joiner starts a rebalance
    assert d.state() == "PreparingRebalance"
    assert due(GROUP, leader, gen) == DUE
    assert due(GROUP, follower, gen) == DUE


def test_incremental_due_for_a_new_epoch_a_revocation_or_free_partitions_only():
    c = Core()
    c.sizes(t=4)
    a = c.heartbeat(token="a")
    due = c.core.heartbeat_due
    assert due("g", a.member_id, a.member_epoch - 1) == DUE  # it has not heard its epoch
    assert due("g", a.member_id, a.member_epoch) == (DUE if len(partitions(a)) < 4 else QUIET)
    a = c.ack(a, token="a")  # holds all four now
    assert len(partitions(a)) == 4
    assert due("g", a.member_id, a.member_epoch) == QUIET
    b = c.heartbeat(token="b")  # a joiner: a new target takes two of A's partitions
    assert due("g", a.member_id, a.member_epoch) == DUE  # A must revoke
    # B waits for partitions A still holds: not due, however often it is asked.
    assert due("g", b.member_id, b.member_epoch) == QUIET
    a = c.ack(a, token="a")  # A is told what to give up
    assert due("g", a.member_id, a.member_epoch) == QUIET  # releasing what it knows of
    a = c.heartbeat(a.member_id, a.member_epoch, owned=set(partitions(a)), token="a")  # released
    assert due("g", b.member_id, b.member_epoch) == DUE  # B's partitions are free now
    b = c.ack(b, token="b")
    assert len(partitions(b)) == 2
    assert due("g", b.member_id, b.member_epoch) == QUIET
    a = c.ack(a, token="a")  # A is at the group's epoch again
    assert due("g", a.member_id, a.member_epoch) == QUIET
    assert due("g", "stranger", 1) == E.UNKNOWN_MEMBER_ID


def test_incremental_a_new_epoch_that_moves_none_of_a_members_partitions_is_no_news():
    c = Core()
    c.sizes(t=4, u=2)
    a = c.heartbeat(topics=("t",), token="a")
    a = c.ack(a, token="a")
    assert len(partitions(a)) == 4
    u = c.heartbeat(topics=("u",), token="u")  # a new group epoch; A keeps all of "t"
    assert c.group().epoch > a.member_epoch
    assert c.core.heartbeat_due("g", a.member_id, a.member_epoch) == QUIET
    assert len(partitions(u)) == 2  # the newcomer took its free partitions in its join's answer
