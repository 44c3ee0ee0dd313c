"""Scheme two's incremental form: subscriptions by regular expression, resolved by the coordinator
over the topics the node lists (full match), kept across a takeover."""

from __future__ import annotations

import pytest

from coordinator.server_side.incremental_groups import resolve
from coordinator.wire import errors as E
from core.types import TopicPartition as TP
from tests.unit.coordinator.incremental_core import Core, partitions


@pytest.mark.parametrize(
    "names, regex, topics",
    [
        ((), "t", ("t",)),  # a full match: "t" is not a prefix pattern
        ((), "t.*", ("t", "t2", "tx")),
        ((), "^t[0-9]$", ("t2",)),  # anchors are harmless
        ((), ".*", ("other", "t", "t2", "tx")),  # Kafka's internal topics are never matched
        (("other",), "t[0-9]", ("other", "t2")),  # names and matches together
        (("__consumer_offsets",), None, ("__consumer_offsets",)),  # a name may still list one
        (("t",), "", ("t",)),  # "" is no regex
    ],
)
def test_resolve_is_a_full_match_over_the_known_topics(names, regex, topics):
    known = {"t", "t2", "tx", "other", "__consumer_offsets", "__transaction_state"}
    assert resolve(names, regex, known) == topics


@pytest.mark.parametrize("epoch", [0, 1])
def test_an_invalid_regex_is_refused(epoch):
    c = Core()
    c.sizes(t=1)
    a = c.heartbeat()
    mid = a.member_id if epoch else ""
    answer = c.heartbeat(mid, a.member_epoch if epoch else 0, regex="t(", token="bad")
    assert answer.error_code == E.INVALID_REGULAR_EXPRESSION and "regex" in answer.error_message


def test_a_regex_member_follows_the_topics_as_they_come_and_go():
    c = Core()
    c.listed("t1", "other")
    c.sizes(t1=2, other=1)
    a = c.heartbeat(topics=(), regex="t[0-9]+")
    assert a.error_code == E.NONE and partitions(a) == {TP("t1", 0), TP("t1", 1)}
    epoch, writes = c.group().epoch, c.writes
    c.listed("t1", "other")  # nothing new: nothing moves, nothing is written
    assert (c.group().epoch, c.writes) == (epoch, writes)
    c.listed("t1", "t2", "other")  # t2 created: a new epoch, its size watched
    assert c.group().epoch == epoch + 1 and c.watched[-1] == "t2"
    assert c.records["g"].generation_id == epoch + 1
    assert c.group().state == "Assigning"  # until t2's size is known
    c.sizes(t2=1)
    assert c.group().epoch == epoch + 1
    a = c.ack(a)
    assert partitions(a) == {TP("t1", 0), TP("t1", 1), TP("t2", 0)} and a.member_epoch == epoch + 1
    c.listed("t2", "other")  # t1 deleted
    a = c.ack(a)
    a = c.ack(a)
    assert partitions(a) == {TP("t2", 0)} and c.group().state == "Stable"


def test_a_regex_changes_with_a_heartbeat_and_an_empty_one_drops_it():
    c = Core()
    c.listed("t", "u1", "u2")
    c.sizes(t=1, u1=1, u2=1)
    a = c.heartbeat(topics=("t",))
    epoch = c.group().epoch
    a = c.heartbeat(a.member_id, a.member_epoch, owned=partitions(a), topics=None, regex="u.")
    assert c.group().epoch == epoch + 1
    assert c.group().members[a.member_id].topics == ("t", "u1", "u2")
    a = c.ack(a)
    assert partitions(a) == {TP("t", 0), TP("u1", 0), TP("u2", 0)}
    a = c.heartbeat(a.member_id, a.member_epoch, owned=partitions(a), topics=None, regex="")
    a = c.ack(a)
    assert partitions(a) == {TP("t", 0)} and c.group().members[a.member_id].regex is None


def test_another_node_keeps_the_regex_of_the_record():
    c = Core()
    c.listed("t1", "x")
    c.sizes(t1=2, x=1)
    a = c.heartbeat(topics=("x",), regex="t.*")
    other = c.taken_over()
    m = other.group().members[a.member_id]
    assert (m.names, m.regex, m.topics) == (("x",), "t.*", ("t1", "x"))
    other.listed("t1", "t2", "x")
    assert other.group().members[a.member_id].topics == ("t1", "t2", "x")
