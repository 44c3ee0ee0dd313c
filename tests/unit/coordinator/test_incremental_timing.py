"""Scheme two's incremental core over time: one session timer entry per member however often it
heartbeats (a silent member still expires), and revocations that need no wait do not wait."""

from __future__ import annotations

from core.types import TopicPartition as TP
from tests.unit.coordinator.incremental_core import SESSION_MS, Core, owners, partitions

ALL = {TP("t", p) for p in range(4)}


def test_heartbeats_keep_one_timer_entry_per_member_and_a_silent_member_still_expires():
    c = Core()
    c.sizes(t=4)
    a = c.heartbeat(token="a")
    b = c.heartbeat(token="b")
    for _ in range(2_000):  # many heartbeats, well inside the session
        c.now += 5
        a = c.ack(a, token="a")
        b = c.ack(b, token="b")
        c.run(c.core.tick(c.now))
    assert len(c.core._timers) <= 4  # a session entry per member (and a revocation's, if any)
    # B goes silent; A keeps heartbeating: B is removed one session after its last heartbeat.
    last_b = c.now
    while c.now < last_b + SESSION_MS + 50:
        c.now += 100
        a = c.ack(a, token="a")
        c.run(c.core.tick(c.now))
    assert list(c.group().members) == [a.member_id]
    assert len(c.core._timers) <= 2


def test_a_revocation_of_partitions_the_heartbeat_says_it_never_took_completes_at_once():
    """A member given partitions, and told to give some back before it took them: its heartbeat
    (owned partitions without them) is the release. Waiting for another would stall the group —
    clients send their owned partitions only when those change (librdkafka in a 50-member join)."""
    c = Core()
    c.sizes(t=4)
    a = c.heartbeat(token="a")
    a = c.heartbeat(a.member_id, a.member_epoch, owned=set(), token="a")  # given all four
    assert len(partitions(a)) == 4
    b = c.heartbeat(token="b")  # a join: two of A's four now target B
    # A had not taken its four yet: it still reports none.
    a = c.heartbeat(a.member_id, a.member_epoch, owned=set(), token="a")
    assert len(partitions(a)) == 2 and a.member_epoch == c.group().assignment_epoch
    assert not c.group().members[a.member_id].revoking
    b = c.ack(b, token="b")
    assert partitions(b) == ALL - partitions(a)  # B gets them now, not after A's rebalance timeout
    assert all(len(o) == 1 for o in owners(c).values())
