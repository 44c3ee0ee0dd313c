"""Scheme two's incremental form: static members (instance ids), leaving with -2 and restarting
without a rebalance, and rejoining after a fencing."""

from __future__ import annotations

import pytest

from coordinator.wire import errors as E
from core.types import TopicPartition as TP
from tests.unit.coordinator.incremental_core import SESSION_MS, Core, owners, partitions

ALL = {TP("t", p) for p in range(4)}


def stable_pair(c: Core, instances=("i-a", "i-b")):
    """Two members (static with `instances`) sharing t's four partitions at one epoch."""
    c.sizes(t=4)
    a = c.heartbeat(instance=instances[0], token="a")
    b = c.heartbeat(instance=instances[1], token="b")
    a = c.ack(a, instance=instances[0])  # A revokes two...
    a = c.ack(a, instance=instances[0])  # ...and is at B's epoch
    b = c.ack(b, instance=instances[1])  # B takes the two released
    assert a.member_epoch == b.member_epoch == c.group().epoch
    assert partitions(a) | partitions(b) == ALL and not partitions(a) & partitions(b)
    assert c.group().state == "Stable"
    return a, b


@pytest.mark.parametrize(
    "who, epoch, instance, code",
    [
        ("new", 0, "i-a", E.UNRELEASED_INSTANCE_ID),  # another member id joining with A's instance id
        ("b", 0, "i-a", E.UNRELEASED_INSTANCE_ID),  # a known member claiming A's instance id
        ("b", None, "i-a", E.FENCED_INSTANCE_ID),  # B heartbeating with A's instance id
        ("a", None, "i-x", E.UNKNOWN_MEMBER_ID),  # an instance id nobody holds
        ("a", None, "i-a", E.NONE),
        ("a", 0, "i-a", E.NONE),  # A itself rejoining (after a fencing): a new incarnation
    ],
)
def test_instance_ids_are_checked(who, epoch, instance, code):
    c = Core()
    a, b = stable_pair(c)
    mid = {"a": a.member_id, "b": b.member_id, "new": "g-new"}[who]
    current = {"a": a.member_epoch, "b": b.member_epoch, "new": 0}[who]
    answer = c.heartbeat(mid, current if epoch is None else epoch, owned=set(), instance=instance)
    assert answer.error_code == code, answer


def test_a_static_member_restarts_without_a_rebalance():
    c = Core()
    a, b = stable_pair(c)
    epoch = c.group().epoch
    left = c.heartbeat(a.member_id, -2, instance="i-a", token="leave")
    assert (left.error_code, left.member_epoch) == (E.NONE, -2)
    # Its partitions stay with it: B asks and gets nothing more, the group epoch does not move.
    b2 = c.ack(b, instance="i-b")
    assert partitions(b2) == partitions(b) and b2.member_epoch == epoch == c.group().epoch
    assert set(owners(c)) == ALL and c.group().members[a.member_id].reported_epoch == -2
    # The departed id is fenced; its replacement (a new process, a new member id) takes over.
    assert c.heartbeat(a.member_id, a.member_epoch, instance="i-a").error_code == E.FENCED_MEMBER_EPOCH
    c.now += SESSION_MS - 10
    new = c.heartbeat("a-restarted", 0, instance="i-a", token="new")
    assert new.error_code == E.NONE and new.member_id == "a-restarted"
    assert new.member_epoch == a.member_epoch and partitions(new) == partitions(a)
    assert c.group().epoch == epoch and a.member_id not in c.group().members
    assert c.ack(b, instance="i-b").member_epoch == epoch  # nobody else moved
    # The session is the replacement's now: the departed one's deadline removes nobody.
    c.advance(20)
    assert set(c.group().members) == {"a-restarted", b.member_id}
    assert c.commit("a-restarted", new.member_epoch) == E.NONE
    assert c.commit(a.member_id, a.member_epoch) == E.UNKNOWN_MEMBER_ID


def test_a_departed_static_member_is_removed_when_its_session_ends():
    c = Core()
    a, b = stable_pair(c)
    epoch = c.group().epoch
    c.heartbeat(a.member_id, -2, instance="i-a", token="leave")
    assert c.commit(a.member_id, a.member_epoch) == E.STALE_MEMBER_EPOCH  # it left
    c.now += SESSION_MS // 2
    b = c.ack(b, instance="i-b")  # B stays alive
    c.advance(SESSION_MS // 2 + 1)
    assert list(c.group().members) == [b.member_id] and c.group().epoch == epoch + 1
    b = c.ack(b, instance="i-b")
    assert partitions(b) == ALL and b.member_epoch == epoch + 1
    # Its instance id is free again: a new member joins with it as any other.
    again = c.heartbeat("a-late", 0, instance="i-a", token="late")
    assert again.error_code == E.NONE and again.member_epoch == epoch + 2


@pytest.mark.parametrize("instance", ["i-a", None], ids=["static", "dynamic"])
def test_leaving_with_minus_one_removes_at_once(instance):
    c = Core()
    a, b = stable_pair(c, instances=(instance, None) if instance is None else ("i-a", "i-b"))
    epoch = c.group().epoch
    left = c.heartbeat(a.member_id, -1, instance=instance and "i-a", token="leave")
    assert (left.error_code, left.member_epoch) == (E.NONE, -1)
    assert list(c.group().members) == [b.member_id] and c.group().epoch == epoch + 1
    b2 = c.ack(b)
    assert partitions(b2) == ALL


def test_minus_two_without_an_instance_id_is_a_leave():
    c = Core()
    a, b = stable_pair(c, instances=(None, None))
    left = c.heartbeat(a.member_id, -2, token="leave")
    assert (left.error_code, left.member_epoch) == (E.NONE, -2)
    assert list(c.group().members) == [b.member_id]


def test_a_departed_static_member_survives_a_takeover():
    c = Core()
    a, b = stable_pair(c)
    c.heartbeat(a.member_id, -2, instance="i-a", token="leave")
    other = c.taken_over()
    other.sizes(t=4)
    m = other.group().members[a.member_id]
    assert (m.instance_id, m.left, m.assigned) == ("i-a", True, frozenset(partitions(a)))
    assert other.heartbeat("b-new", 0, instance="i-b").error_code == E.UNRELEASED_INSTANCE_ID
    new = other.heartbeat("a-new", 0, instance="i-a", token="new")
    assert (new.member_epoch, partitions(new)) == (a.member_epoch, partitions(a))
    assert other.group().epoch == c.group().epoch


@pytest.mark.parametrize("instance", [None, "i-a"], ids=["dynamic", "static"])
def test_a_fenced_member_rejoins_with_its_id_as_a_new_incarnation(instance):
    c = Core()
    c.sizes(t=4)
    a = c.heartbeat(instance=instance)
    assert c.heartbeat(a.member_id, a.member_epoch + 5, instance=instance).error_code == E.FENCED_MEMBER_EPOCH
    again = c.heartbeat(a.member_id, 0, instance=instance, token="again")
    assert again.error_code == E.NONE and again.member_id == a.member_id
    assert again.member_epoch > a.member_epoch and partitions(again) == ALL
    assert list(c.group().members) == [a.member_id]


def test_a_replacement_with_another_subscription_rebalances():
    c = Core()
    c.sizes(t=4, u=2)
    a, b = stable_pair(c)
    epoch = c.group().epoch
    c.heartbeat(a.member_id, -2, instance="i-a", token="leave")
    new = c.heartbeat("a-new", 0, topics=("t", "u"), instance="i-a", token="new")
    assert new.error_code == E.NONE and c.group().epoch == epoch + 1
    # Never two owners on the way.
    for _ in range(4):
        new = c.ack(new, instance="i-a")
        b = c.ack(b, instance="i-b")
        assert all(len(ms) == 1 for ms in owners(c).values())
    assert partitions(new) | partitions(b) == ALL | {TP("u", 0), TP("u", 1)}
