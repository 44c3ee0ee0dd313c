"""coordinator/node/authorization.py: what each request needs, and the denied part's answer.

Pure: an `Authorizer` with ACLs for User:alice, requests built as the codecs build them."""

from __future__ import annotations

import pytest

from coordinator.kafka_wire import messages as M
from coordinator.node.authorization import GROUP_RULES, OPEN_APIS, Grants, RequestAuthorization
from coordinator.wire import schema as S
from coordinator.wire.errors import GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED
from security.acls import (
    ALLOW,
    CLUSTER,
    CLUSTER_NAME,
    DELETE,
    DESCRIBE,
    GROUP,
    READ,
    TOPIC,
    AccessControlEntry,
    Authorizer,
    ResourcePattern,
)

ALICE = "User:alice"
PEER = "/127.0.0.1"


def gate(*grants: tuple) -> RequestAuthorization:
    auth = Authorizer()
    for rtype, name, op in grants:
        auth.set_acls(ResourcePattern(rtype, name), [AccessControlEntry(ALICE, "*", op, ALLOW)])
    return RequestAuthorization(auth)


def test_every_api_has_a_rule():
    g = gate()
    for api in S.APIS:
        assert g.covers(api), S.API_NAMES[api]
    for api in (M.METADATA, M.LIST_OFFSETS, M.FETCH, M.PRODUCE):
        assert g.covers(api)
    assert OPEN_APIS == {
        S.API_VERSIONS,
        S.DESCRIBE_CLUSTER,
        17,
        36,
    }  # 17, 36: SaslHandshake, SaslAuthenticate


@pytest.mark.parametrize(
    "api, body",
    [
        (S.HEARTBEAT, S.HeartbeatRequest(group_id="b", generation_id=1, member_id="m")),
        (S.LEAVE_GROUP, S.LeaveGroupRequest(group_id="b", members=[])),
        (S.SERVER_HEARTBEAT, S.ServerHeartbeatRequest(group_id="b", generation_id=1, consumer_id="c")),
        (
            S.JOIN_GROUP,
            S.JoinGroupRequest(
                group_id="b", session_timeout_ms=1, rebalance_timeout_ms=1, member_id="",
                protocol_type="consumer", protocols=[],
            ),
        ),
    ],
)  # fmt: skip
def test_a_group_request_needs_read(api, body):
    assert GROUP_RULES[api] is READ
    assert gate((GROUP, "b", READ)).rule(ALICE, PEER, api, body) is None
    ruling = gate((GROUP, "b", DESCRIBE)).rule(ALICE, PEER, api, body)
    assert ruling.request is None and ruling.answer.error_code == GROUP_AUTHORIZATION_FAILED


def test_a_connections_grants_hold_until_the_acls_or_its_principal_change():
    """A group allowed once is served again without a lookup; an ACL change or another principal
    asks the ACLs again, so a revoked group is refused on the connection's next request."""
    g, grants = gate((GROUP, "b", READ)), Grants()
    beat = S.HeartbeatRequest(group_id="b", generation_id=1, member_id="m")
    assert g.rule(ALICE, PEER, S.HEARTBEAT, beat, grants) is None
    assert grants.allowed == {(S.HEARTBEAT, "b")}
    g.authorizer._decisions.clear()  # the connection's grant answers, not the authorizer's memory
    assert g.rule(ALICE, PEER, S.HEARTBEAT, beat, grants) is None and not g.authorizer._decisions
    g.authorizer.set_acls(ResourcePattern(GROUP, "b"), [])  # revoked
    ruling = g.rule(ALICE, PEER, S.HEARTBEAT, beat, grants)
    assert ruling.answer.error_code == GROUP_AUTHORIZATION_FAILED
    g.authorizer.set_acls(ResourcePattern(GROUP, "b"), [AccessControlEntry(ALICE, "*", READ, ALLOW)])
    assert g.rule(ALICE, PEER, S.HEARTBEAT, beat, grants) is None
    ruling = g.rule("User:bob", PEER, S.HEARTBEAT, beat, grants)  # the same grants, another principal
    assert ruling.answer.error_code == GROUP_AUTHORIZATION_FAILED


def test_find_coordinator_needs_describe():
    body = S.FindCoordinatorRequest(key="b", key_type=0)
    assert gate((GROUP, "b", DESCRIBE)).rule(ALICE, PEER, S.FIND_COORDINATOR, body) is None
    ruling = gate().rule(ALICE, PEER, S.FIND_COORDINATOR, body)
    assert ruling.answer.error_code == GROUP_AUTHORIZATION_FAILED and ruling.answer.node_id == -1


def commit(*topics: str) -> S.OffsetCommitRequest:
    return S.OffsetCommitRequest(
        group_id="a",
        generation_id=1,
        member_id="m",
        topics=[
            S.OffsetCommitTopic(
                name=t, partitions=[S.OffsetCommitPartition(partition_index=0, committed_offset=5)]
            )
            for t in topics
        ],
    )


def test_offset_commit_is_group_read_then_topic_read_per_topic():
    g = gate((GROUP, "a", READ), (TOPIC, "t", READ), (TOPIC, "d", DESCRIBE))
    assert g.rule(ALICE, PEER, S.OFFSET_COMMIT, commit("t")) is None
    ruling = g.rule(ALICE, PEER, S.OFFSET_COMMIT, commit("t", "d"))
    assert [t.name for t in ruling.request.topics] == ["t"]  # only "t" reaches the core
    served = S.OffsetCommitResponse(
        topics=[
            S.TopicPartitionResults(name="t", partitions=[S.PartitionResult(partition_index=0, error_code=0)])
        ]
    )
    codes = {t.name: t.partitions[0].error_code for t in ruling.amend(served).topics}
    assert codes == {"t": 0, "d": TOPIC_AUTHORIZATION_FAILED}
    all_denied = g.rule(ALICE, PEER, S.OFFSET_COMMIT, commit("d"))
    assert all_denied.request is None
    assert all_denied.answer.topics[0].partitions[0].error_code == TOPIC_AUTHORIZATION_FAILED
    no_group = gate((TOPIC, "t", READ)).rule(ALICE, PEER, S.OFFSET_COMMIT, commit("t"))
    assert no_group.answer.topics[0].partitions[0].error_code == GROUP_AUTHORIZATION_FAILED


def test_offset_fetch_is_group_describe_and_hides_undescribed_topics():
    g = gate((GROUP, "a", DESCRIBE), (TOPIC, "t", DESCRIBE))
    every = g.rule(ALICE, PEER, S.OFFSET_FETCH, S.OffsetFetchRequest(group_id="a"))
    part = [S.OffsetFetchPartition(partition_index=0, committed_offset=3, metadata="", error_code=0)]
    served = S.OffsetFetchResponse(
        error_code=0,
        topics=[S.OffsetFetchTopicResponse(name=n, partitions=part) for n in ("t", "secret")],
    )
    assert [t.name for t in every.amend(served).topics] == ["t"]
    named = g.rule(
        ALICE,
        PEER,
        S.OFFSET_FETCH,
        S.OffsetFetchRequest(
            group_id="a", topics=[S.OffsetFetchTopic(name="secret", partition_indexes=[0, 1])]
        ),
    )
    assert named.request is None
    assert [
        (p.partition_index, p.committed_offset, p.error_code) for p in named.answer.topics[0].partitions
    ] == [
        (0, -1, TOPIC_AUTHORIZATION_FAILED),
        (1, -1, TOPIC_AUTHORIZATION_FAILED),
    ]
    denied = gate().rule(ALICE, PEER, S.OFFSET_FETCH, S.OffsetFetchRequest(group_id="a"))
    assert denied.answer.error_code == GROUP_AUTHORIZATION_FAILED


def test_describe_and_delete_are_per_group_in_the_requests_order():
    g = gate((GROUP, "a", DESCRIBE), (GROUP, "c", DELETE))
    ruling = g.rule(ALICE, PEER, S.DESCRIBE_GROUPS, S.DescribeGroupsRequest(groups=["b", "a", "c"]))
    assert ruling.request.groups == ["a", "c"]  # Delete implies Describe
    served = S.DescribeGroupsResponse(
        groups=[S.DescribedGroup(error_code=0, group_id="a"), S.DescribedGroup(error_code=0, group_id="c")]
    )
    assert [(d.group_id, d.error_code) for d in ruling.amend(served).groups] == [
        ("b", GROUP_AUTHORIZATION_FAILED),
        ("a", 0),
        ("c", 0),
    ]
    deleting = g.rule(ALICE, PEER, S.DELETE_GROUPS, S.DeleteGroupsRequest(groups_names=["a", "c"]))
    assert deleting.request.groups_names == ["c"]
    done = S.DeleteGroupsResponse(results=[S.DeleteGroupsResult(group_id="c", error_code=0)])
    assert [(r.group_id, r.error_code) for r in deleting.amend(done).results] == [
        ("a", GROUP_AUTHORIZATION_FAILED),
        ("c", 0),
    ]
    nothing = g.rule(ALICE, PEER, S.DELETE_GROUPS, S.DeleteGroupsRequest(groups_names=["a"]))
    assert nothing.request is None and nothing.answer.results[0].error_code == GROUP_AUTHORIZATION_FAILED


def test_list_groups_lists_every_group_with_cluster_describe_else_the_describable_ones():
    listed = S.ListGroupsResponse(
        error_code=0,
        groups=[
            S.ListedGroup(group_id=g, protocol_type="consumer", group_state="Stable") for g in ("a", "b")
        ],
    )
    assert (
        gate((CLUSTER, CLUSTER_NAME, DESCRIBE)).rule(ALICE, PEER, S.LIST_GROUPS, S.ListGroupsRequest())
        is None
    )
    ruling = gate((GROUP, "a", READ)).rule(ALICE, PEER, S.LIST_GROUPS, S.ListGroupsRequest())
    assert [g.group_id for g in ruling.amend(listed).groups] == ["a"]


def test_the_data_plane_refuses_per_topic():
    g = gate((TOPIC, "t", READ))
    fetch = M.FetchRequest(
        max_wait_ms=0,
        min_bytes=1,
        topics=[M.FetchTopic(topic=n, partitions=[M.FetchPartition(0, 0, 100)]) for n in ("t", "u")],
    )
    ruling = g.rule_data(ALICE, PEER, M.FETCH, fetch)
    assert [t.topic for t in ruling.request.topics] == ["t"]
    merged = ruling.amend(
        M.FetchResponse(responses=[M.FetchTopicResponse("t", [M.FetchPartitionResponse(0, 0)])])
    )
    assert [(t.topic, t.partitions[0].error_code) for t in merged.responses] == [
        ("t", 0),
        ("u", TOPIC_AUTHORIZATION_FAILED),
    ]
    produce = M.ProduceRequest(
        acks=1, timeout_ms=1, topic_data=[M.ProduceTopic("t", [M.ProducePartition(0, b"")])]
    )
    refused = g.rule_data(ALICE, PEER, M.PRODUCE, produce)  # Read does not allow Write
    assert refused.request is None
    assert refused.answer.responses[0].partition_responses[0].error_code == TOPIC_AUTHORIZATION_FAILED
    quiet = g.rule_data(
        ALICE, PEER, M.PRODUCE, M.ProduceRequest(acks=0, timeout_ms=1, topic_data=produce.topic_data)
    )
    assert quiet.request is None and quiet.answer is None  # acks=0: no answer at all
    meta = g.rule_data(ALICE, PEER, M.METADATA, M.MetadataRequest(topics=None))
    listing = M.MetadataResponse(
        brokers=[], cluster_id="c", controller_id=1, topics=[M.MetadataTopic(0, "t"), M.MetadataTopic(0, "u")]
    )
    assert [t.name for t in meta.amend(listing).topics] == ["t"]
    asked = g.rule_data(ALICE, PEER, M.METADATA, M.MetadataRequest(topics=["t", "u"]))
    assert [(t.name, t.error_code) for t in asked.amend(listing).topics] == [
        ("t", 0),
        ("u", TOPIC_AUTHORIZATION_FAILED),
    ]
