"""Session timers of scheme two's incremental core: one pending entry per member, however often it
heartbeats, and a member that stops heartbeating is still removed when its session ends."""

from __future__ import annotations

from tests.unit.coordinator.incremental_core import SESSION_MS, Core


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
