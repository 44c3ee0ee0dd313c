"""What an incremental member reports as owned in its heartbeats (`owned_report`), and why: the
coordinator takes a report without a partition it gave the member as "never took it"."""

from __future__ import annotations

from coordinator.member.incremental_member import owned_report
from core.types import TopicPartition as TP
from tests.unit.coordinator.incremental_core import Core, partitions

ALL = {TP("t", p) for p in range(4)}


def test_owned_partitions_are_reported_only_once_the_latest_answer_is_acted_on():
    two, four = {TP("t", 0), TP("t", 1)}, set(ALL)
    assert owned_report(two, None, reconciling=False) == two  # joining: nothing answered yet
    assert owned_report(two, two, reconciling=False) == two  # holds what it was given
    assert owned_report(two, four, reconciling=False) is None  # given more, not taken yet
    assert owned_report(four, two, reconciling=False) is None  # told to give some back, not yet
    assert owned_report(two, two, reconciling=True) is None  # the caller's thread is moving
    assert owned_report(set(), set(), reconciling=False) == set()


def test_a_partition_given_and_not_yet_taken_is_not_released_by_a_heartbeat_that_says_nothing():
    """A is given all four; before it takes them, B joins and two of them now target B. A report
    of what A holds (none yet) would release them to B at once, while A's caller thread, acting on
    the answer that gave them, goes on to take them. With nothing reported they stay A's to give
    back, and reach B only after A has said what it holds."""
    c = Core()
    c.sizes(t=4)
    a = c.heartbeat(token="a")
    a = c.heartbeat(a.member_id, a.member_epoch, owned=set(), token="a")
    assert partitions(a) == ALL  # given; A's caller thread has not taken them yet
    b = c.heartbeat(token="b")
    a_next = c.heartbeat(a.member_id, a.member_epoch, owned=None, token="a")  # nothing reported
    moving = ALL - partitions(a_next)
    assert len(moving) == 2 and c.group().members[a.member_id].revoking == moving
    b = c.ack(b, token="b")
    assert not partitions(b) & moving  # still A's to give back
    # A took all four (the answer it was acting on), says so, then gives the two back
    c.heartbeat(a.member_id, a_next.member_epoch, owned=ALL, token="a")
    assert c.group().members[a.member_id].revoking == moving
    c.heartbeat(a.member_id, a_next.member_epoch, owned=ALL - moving, token="a")
    assert not c.group().members[a.member_id].revoking
    b = c.ack(b, token="b")
    assert partitions(b) == moving
