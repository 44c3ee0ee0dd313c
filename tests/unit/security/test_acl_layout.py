"""security/acl_store.py's layout: Kafka's ZooKeeper paths and payloads, read and written alike."""

from __future__ import annotations

import json

import pytest

from security.acl_store import (
    EXTENDED_CHANGES,
    LITERAL_CHANGES,
    change_seq,
    decode_acls,
    decode_change,
    encode_acls,
    encode_change,
    resource_path,
)
from security.acls import (
    ALLOW,
    DENY,
    DESCRIBE_CONFIGS,
    GROUP,
    PREFIXED,
    READ,
    TOPIC,
    AccessControlEntry,
    AclError,
    ResourcePattern,
)

# As Kafka's ZkData documents them (a tree written by kafka-acls.sh).
KAFKA_TOPIC_ACLS = (
    b'{"version": 1, "acls": [ { "host":"host1", "permissionType": "Allow","operation": "Read",'
    b'"principal": "User:alice"}]}'
)


def test_paths_are_kafkas():
    assert resource_path(ResourcePattern(TOPIC, "topic-1")) == "/kafka-acl/Topic/topic-1"
    assert (
        resource_path(ResourcePattern(GROUP, "group-1", PREFIXED))
        == "/kafka-acl-extended/prefixed/Group/group-1"
    )


def test_a_payload_kafka_wrote_is_read():
    assert decode_acls(KAFKA_TOPIC_ACLS) == {AccessControlEntry("User:alice", "host1", READ, ALLOW)}


def test_payloads_round_trip_in_kafkas_form():
    entries = {
        AccessControlEntry("User:bob", "*", DESCRIBE_CONFIGS, DENY),
        AccessControlEntry("User:alice", "10.0.0.1", READ, ALLOW),
    }
    data = encode_acls(entries)
    assert decode_acls(data) == entries
    doc = json.loads(data)
    assert doc["version"] == 1
    assert {
        "principal": "User:bob",
        "permissionType": "Deny",
        "operation": "DescribeConfigs",
        "host": "*",
    } in doc["acls"]
    assert decode_acls(b"") == frozenset()


@pytest.mark.parametrize(
    "data",
    [b"not json", b'{"version": 2, "acls": []}', b'{"version": 1}',
     b'{"version":1,"acls":[{"principal":"User:a"}]}',
     b'{"version":1,"acls":[{"principal":"User:a","host":"*","operation":"Fly","permissionType":"Allow"}]}'],
)  # fmt: skip
def test_an_unreadable_payload_is_an_acl_error(data):
    with pytest.raises(AclError):
        decode_acls(data)


def test_change_notifications_are_kafkas():
    literal = ResourcePattern(GROUP, "billing")
    assert encode_change(literal) == b"Group:billing"
    assert decode_change(LITERAL_CHANGES, b"Group:billing") == literal
    assert decode_change(LITERAL_CHANGES, b"Topic:a:b") == ResourcePattern(TOPIC, "a:b")
    prefixed = ResourcePattern(GROUP, "bill", PREFIXED)
    assert json.loads(encode_change(prefixed)) == {
        "version": 1,
        "resourceType": "Group",
        "name": "bill",
        "patternType": "PREFIXED",
    }
    assert decode_change(EXTENDED_CHANGES, encode_change(prefixed)) == prefixed
    with pytest.raises(AclError):
        decode_change(LITERAL_CHANGES, b"nocolon")
    with pytest.raises(AclError):
        decode_change(
            EXTENDED_CHANGES, b'{"version":9,"resourceType":"Group","name":"x","patternType":"PREFIXED"}'
        )
    assert change_seq("acl_changes_0000000012") == 12
    assert change_seq("something_else") is None
