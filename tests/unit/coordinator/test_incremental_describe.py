"""Scheme two's incremental form from outside: ConsumerGroupDescribe (69), and OffsetFetch and
OffsetCommit fenced by member epoch."""

from __future__ import annotations

import msgspec
import pytest

from coordinator.wire import errors as E
from coordinator.wire.schema import (
    CONSUMER_GROUP_DESCRIBE,
    DESCRIBE_GROUPS,
    JOIN_GROUP,
    OFFSET_FETCH,
    ConsumerGroupDescribeRequest,
    DescribeGroupsRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    OffsetFetchRequest,
    OffsetFetchTopic,
    ServerAssignedTopic,
)
from tests.unit.coordinator.incremental_core import Core, partitions


def describe(c: Core, *groups: str, group_check=None):
    return c.send(
        CONSUMER_GROUP_DESCRIBE, ConsumerGroupDescribeRequest(group_ids=list(groups)), "d", group_check
    )


def classic_group(c: Core, gid: str = "classic") -> None:
    join = JoinGroupRequest(
        group_id=gid,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupProtocol(name="range", metadata=b"")],
    )
    first = c.send(JOIN_GROUP, join, "j")  # MEMBER_ID_REQUIRED, with the id to join with
    c.send(JOIN_GROUP, msgspec.structs.replace(join, member_id=first.member_id), "j")


def test_describe_shows_epochs_and_both_assignments():
    c = Core()
    c.listed("t", "u1")
    c.sizes(t=4, u1=1)
    a = c.heartbeat(instance="i-a", rack="r1", token="a")
    b = c.heartbeat(topics=("t",), regex="u[0-9]", token="b")
    (g,) = describe(c, "g").groups
    assert (g.error_code, g.group_id, g.group_state, g.assignor_name) == (0, "g", "Reconciling", "uniform")
    assert (g.group_epoch, g.assignment_epoch) == (2, 2)
    ma, mb = g.members
    assert (ma.member_id, ma.instance_id, ma.rack_id, ma.member_epoch) == (a.member_id, "i-a", "r1", 1)
    assert (ma.client_id, ma.client_host) == ("c", "/h")
    assert (ma.subscribed_topic_names, ma.subscribed_topic_regex) == (["t"], None)
    assert ma.assignment == [ServerAssignedTopic(topic="t", partitions=[0, 1, 2, 3])]  # still A's
    kept = {p for t in ma.target_assignment for p in t.partitions}
    assert kept < {0, 1, 2, 3}  # A's target: what it keeps
    assert (mb.subscribed_topic_names, mb.subscribed_topic_regex) == (["t"], "u[0-9]")
    assert mb.instance_id is None and mb.member_epoch == b.member_epoch == 2
    assert {(t.topic, p) for t in mb.target_assignment for p in t.partitions} == {
        ("t", p) for p in {0, 1, 2, 3} - kept
    } | {("u1", 0)}
    assert mb.assignment == [ServerAssignedTopic(topic="u1", partitions=[0])]  # free at once
    a = c.ack(a, instance="i-a")
    a = c.ack(a, instance="i-a")
    c.ack(b)
    (g,) = describe(c, "g").groups
    assert g.group_state == "Stable" and all(m.assignment == m.target_assignment for m in g.members)
    # A static member that left shows epoch -2 (DescribeGroups too).
    c.heartbeat(a.member_id, -2, instance="i-a", token="leave")
    assert describe(c, "g").groups[0].members[0].member_epoch == -2


def test_describe_errors_per_group():
    c = Core()
    c.sizes(t=1)
    c.heartbeat()
    classic_group(c)
    answer = describe(
        c,
        "g",
        "classic",
        "nobody",
        "elsewhere",
        group_check=lambda g: E.NOT_COORDINATOR if g == "elsewhere" else 0,
    )
    codes = [(g.group_id, g.error_code, g.group_state) for g in answer.groups]
    assert codes == [
        ("g", E.NONE, "Stable"),
        ("classic", E.GROUP_ID_NOT_FOUND, "Dead"),
        ("nobody", E.GROUP_ID_NOT_FOUND, "Dead"),
        ("elsewhere", E.NOT_COORDINATOR, "Dead"),
    ]
    assert all(g.members == [] and g.group_epoch == -1 for g in answer.groups[1:])
    # The classic describe still knows both kinds.
    described = c.send(DESCRIBE_GROUPS, DescribeGroupsRequest(groups=["g", "classic"]), "dg").groups
    assert [d.protocol_type for d in described] == ["consumer-incremental", "consumer"]


def fetch(c: Core, member_id, epoch) -> int:
    body = OffsetFetchRequest(
        group_id="g",
        topics=[OffsetFetchTopic(name="t", partition_indexes=[0])],
        member_id=member_id,
        member_epoch=epoch,
    )
    answer = c.send(OFFSET_FETCH, body, "fetch")
    if answer.error_code:
        return answer.error_code
    (t,) = answer.topics
    assert t.partitions[0].committed_offset == 7
    return E.NONE


@pytest.mark.parametrize(
    "who, epoch, code",
    [
        (None, -1, E.NONE),  # the admin client's, or a client without the fields: not checked
        ("", -1, E.NONE),
        ("a", "current", E.NONE),
        ("a", "previous", E.STALE_MEMBER_EPOCH),
        ("a", "next", E.STALE_MEMBER_EPOCH),
        ("nobody", 1, E.UNKNOWN_MEMBER_ID),
        (None, 1, E.UNKNOWN_MEMBER_ID),
    ],
)
def test_offset_fetch_is_fenced_by_member_epoch(who, epoch, code):
    c = Core()
    c.sizes(t=2)
    a = c.heartbeat()
    c.heartbeat(token="b")  # a second member: A's epoch moves on
    a2 = c.ack(a)
    a2 = c.ack(a2)
    assert a2.member_epoch == a.member_epoch + 1
    assert c.commit(a.member_id, a2.member_epoch) == E.NONE
    mid = a.member_id if who == "a" else who
    e = {"current": a2.member_epoch, "previous": a.member_epoch, "next": a2.member_epoch + 1}.get(
        epoch, epoch
    )
    assert fetch(c, mid, e) == code


@pytest.mark.parametrize(
    "members, member, epoch, code",
    [
        (0, "", -1, E.NONE),  # an empty group takes commits from outside it
        (1, "", -1, E.UNKNOWN_MEMBER_ID),
        (1, "a", "current", E.NONE),
        (1, "a", "stale", E.STALE_MEMBER_EPOCH),
        (1, "nobody", 1, E.UNKNOWN_MEMBER_ID),
    ],
)
def test_offset_commit_is_fenced_by_member_epoch(members, member, epoch, code):
    c = Core()
    c.sizes(t=1)
    a = c.heartbeat()
    if not members:
        c.heartbeat(a.member_id, -1, token="leave")
    mid = a.member_id if member == "a" else member
    e = {"current": a.member_epoch, "stale": a.member_epoch - 1}.get(epoch, epoch)
    assert c.commit(mid, e) == code
    if code == E.NONE:
        assert partitions(a) or not members
