"""docs/protocol.md: request validation, the group-id pre-check and its per-API translation.

Malformed bodies (not a map, missing key, wrong type) get INVALID_REQUEST (42) and never raise.
"""

from __future__ import annotations

import pytest

from coordinator.wire import error_codes as E
from coordinator.wire.schema import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
)
from tests.unit.coordinator.test_group_driver import GROUP, PROTOCOLS, Driver

JOIN = {
    "group_id": GROUP,
    "session_timeout_ms": 500,
    "rebalance_timeout_ms": 500,
    "member_id": "",
    "group_instance_id": None,
    "protocol_type": "consumer",
    "protocols": PROTOCOLS,
    "reason": None,
}
SYNC = {
    "group_id": GROUP,
    "generation_id": 1,
    "member_id": "m",
    "group_instance_id": None,
    "protocol_type": None,
    "protocol_name": None,
    "assignments": [],
}
HB = {"group_id": GROUP, "generation_id": 1, "member_id": "m", "group_instance_id": None}
LEAVE = {"group_id": GROUP, "members": [{"member_id": "m", "group_instance_id": None, "reason": None}]}
COMMIT = {
    "group_id": GROUP,
    "generation_id": -1,
    "member_id": "",
    "group_instance_id": None,
    "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}]}
    ],
}
FETCH = {"group_id": GROUP, "topics": [{"name": "t", "partition_indexes": [0]}]}
DESCRIBE = {"groups": [GROUP]}
LIST = {"states_filter": []}
DELETE = {"groups_names": [GROUP]}
ODELETE = {"group_id": GROUP, "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}


def _without(body, key):
    return {k: v for k, v in body.items() if k != key}


MALFORMED = [
    (JOIN_GROUP, None),
    (JOIN_GROUP, [1, 2]),
    (JOIN_GROUP, "body"),
    (JOIN_GROUP, _without(JOIN, "group_id")),
    (JOIN_GROUP, _without(JOIN, "member_id")),
    (JOIN_GROUP, _without(JOIN, "protocols")),
    (JOIN_GROUP, _without(JOIN, "session_timeout_ms")),
    (JOIN_GROUP, {**JOIN, "session_timeout_ms": "500"}),
    (JOIN_GROUP, {**JOIN, "session_timeout_ms": True}),
    (JOIN_GROUP, {**JOIN, "session_timeout_ms": 2**31}),
    (JOIN_GROUP, {**JOIN, "group_id": 7}),
    (JOIN_GROUP, {**JOIN, "member_id": None}),
    (JOIN_GROUP, {**JOIN, "protocols": [{"name": "range", "metadata": "not-bytes"}]}),
    (JOIN_GROUP, {**JOIN, "protocols": [{"name": "range"}]}),
    (JOIN_GROUP, {**JOIN, "protocols": {"range": b""}}),
    (SYNC_GROUP, _without(SYNC, "generation_id")),
    (SYNC_GROUP, {**SYNC, "assignments": [{"member_id": "m", "assignment": 3}]}),
    (HEARTBEAT, _without(HB, "member_id")),
    (HEARTBEAT, {**HB, "generation_id": 1.5}),
    (LEAVE_GROUP, _without(LEAVE, "members")),
    (LEAVE_GROUP, {**LEAVE, "members": [{"group_instance_id": None}]}),
    (OFFSET_COMMIT, _without(COMMIT, "topics")),
    (OFFSET_COMMIT, {**COMMIT, "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}),
    (
        OFFSET_COMMIT,
        {
            **COMMIT,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 2**63}]}],
        },
    ),
    (OFFSET_FETCH, {"topics": None}),
    (OFFSET_FETCH, {**FETCH, "topics": [{"name": "t", "partition_indexes": ["0"]}]}),
    (DESCRIBE_GROUPS, {}),
    (DESCRIBE_GROUPS, {"groups": "g"}),
    (LIST_GROUPS, {"states_filter": "Stable"}),
    (DELETE_GROUPS, {"groups_names": [1]}),
    (OFFSET_DELETE, _without(ODELETE, "topics")),
]


@pytest.mark.parametrize("api,body", MALFORMED)
def test_malformed_body_is_invalid_request(api, body):
    d = Driver()
    r = d.call(api, body)
    assert r["error_code"] == E.INVALID_REQUEST
    assert isinstance(r["error_message"], str) and r["error_message"]
    assert d.core.group_ids() == []


@pytest.mark.parametrize("api", [10, 18, 28, 99, -1])
def test_apis_the_core_does_not_serve_are_unsupported(api):
    assert Driver().call(api, {})["error_code"] == E.UNSUPPORTED_VERSION


def test_nullable_fields_may_be_omitted_and_unknown_keys_ignored():
    d = Driver()
    body = _without(_without(JOIN, "group_instance_id"), "reason")
    r = d.call(JOIN_GROUP, {**body, "future_field": 1})
    assert r["error_code"] == E.MEMBER_ID_REQUIRED


# ------------------------------------------------------------------- 2.1.1 group id validity

# JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetDelete: null or "" is invalid.
# OffsetCommit, OffsetFetch, DescribeGroups, DeleteGroups: only null is invalid.
STRICT = [
    (JOIN_GROUP, JOIN),
    (SYNC_GROUP, SYNC),
    (HEARTBEAT, HB),
    (LEAVE_GROUP, LEAVE),
    (OFFSET_DELETE, ODELETE),
]


@pytest.mark.parametrize("api,body", STRICT)
@pytest.mark.parametrize("gid", [None, ""])
def test_null_or_empty_group_id_is_invalid(api, body, gid):
    r = Driver().call(api, {**body, "group_id": gid})
    assert r["error_code"] == E.INVALID_GROUP_ID


def test_join_invalid_group_id_echoes_member_id():
    r = Driver().call(JOIN_GROUP, {**JOIN, "group_id": "", "member_id": "abc"})
    assert (r["error_code"], r["member_id"], r["generation_id"], r["leader"]) == (
        E.INVALID_GROUP_ID,
        "abc",
        -1,
        "",
    )
    assert r["protocol_name"] is None and r["members"] == []


def test_empty_group_id_is_legal_for_commit_fetch_describe_delete():
    d = Driver()
    assert d.call_commit({("t", 0): 5}, group="") == {("t", 0): E.NONE}
    assert d.fetched([("t", 0)], group="") == {("t", 0): (5, "", E.NONE)}
    assert d.describe("")[0]["error_code"] == E.NONE
    assert d.delete_groups("") == {"": E.NONE}


def test_null_group_id_for_commit_fetch_describe_delete():
    d = Driver()
    assert d.call_commit({("t", 0): 5, ("u", 1): 1}, group=None) == {
        ("t", 0): E.INVALID_GROUP_ID,
        ("u", 1): E.INVALID_GROUP_ID,
    }
    assert d.call(OFFSET_FETCH, {**FETCH, "group_id": None}) == {
        "error_code": E.INVALID_GROUP_ID,
        "topics": [],
    }
    desc = d.describe(None, GROUP)
    assert desc[0] == {
        "error_code": E.INVALID_GROUP_ID,
        "group_id": None,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
    }
    assert desc[1]["error_code"] == E.NONE
    assert d.delete_groups(None) == {None: E.INVALID_GROUP_ID}


# ---------------------------------------------------- 2.1.2-4 driver pre-check, per-API translation

SHARD_ERRORS = [E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR]


@pytest.mark.parametrize("err", SHARD_ERRORS)
def test_precheck_join(err):
    r = Driver().call(JOIN_GROUP, {**JOIN, "member_id": "m1"}, group_check=lambda g: err)
    assert (r["error_code"], r["member_id"], r["generation_id"], r["leader"], r["protocol_name"]) == (
        err,
        "m1",
        -1,
        "",
        None,
    )


@pytest.mark.parametrize("err,expected", [(15, 15), (14, E.REBALANCE_IN_PROGRESS), (16, 16)])
def test_precheck_sync_rewrites_load_in_progress(err, expected):
    r = Driver().call(SYNC_GROUP, SYNC, group_check=lambda g: err)
    assert r == {"error_code": expected, "protocol_type": None, "protocol_name": None, "assignment": b""}


@pytest.mark.parametrize("err,expected", [(15, 15), (14, E.NONE), (16, 16)])
def test_precheck_heartbeat_blind_success_while_loading(err, expected):
    assert Driver().call(HEARTBEAT, HB, group_check=lambda g: err) == {"error_code": expected}


@pytest.mark.parametrize("err", SHARD_ERRORS)
def test_precheck_leave_is_top_level(err):
    assert Driver().call(LEAVE_GROUP, LEAVE, group_check=lambda g: err) == {"error_code": err, "members": []}


@pytest.mark.parametrize("err", SHARD_ERRORS)
def test_precheck_commit_every_partition(err):
    d = Driver()
    assert d.call_commit({("t", 0): 1, ("t", 1): 2}, group_check=lambda g: err) == {
        ("t", 0): err,
        ("t", 1): err,
    }
    assert d.core.group_ids() == []


@pytest.mark.parametrize("err", SHARD_ERRORS)
def test_precheck_fetch_is_group_level(err):
    assert Driver().call(OFFSET_FETCH, FETCH, group_check=lambda g: err) == {"error_code": err, "topics": []}


@pytest.mark.parametrize("err", SHARD_ERRORS)
def test_precheck_describe_and_delete_per_group(err):
    d = Driver()
    d.call_commit({("t", 0): 1}, group="mine")
    check = lambda g: 0 if g == "mine" else err  # noqa: E731
    desc = d.describe("mine", "theirs", group_check=check)
    assert desc[0]["group_state"] == "Empty"
    assert (desc[1]["error_code"], desc[1]["group_state"], desc[1]["members"]) == (err, "", [])
    assert d.delete_groups("theirs", "mine", group_check=check) == {"theirs": err, "mine": E.NONE}


@pytest.mark.parametrize("err", SHARD_ERRORS)
def test_precheck_offset_delete(err):
    assert Driver().call(OFFSET_DELETE, ODELETE, group_check=lambda g: err) == {
        "error_code": err,
        "topics": [],
    }


def test_group_id_validity_is_checked_before_the_shard():
    calls = []
    r = Driver().call(HEARTBEAT, {**HB, "group_id": ""}, group_check=lambda g: calls.append(g) or 16)
    assert r["error_code"] == E.INVALID_GROUP_ID and calls == []


def test_invalid_session_timeout_after_precheck_and_before_group_lookup():
    d = Driver()
    for timeout in (9, 600_001):
        r = d.call(JOIN_GROUP, {**JOIN, "session_timeout_ms": timeout, "member_id": "x"})
        assert (r["error_code"], r["member_id"]) == (E.INVALID_SESSION_TIMEOUT, "x")
    assert d.core.group_ids() == []
    # bounds are inclusive; the rebalance timeout is not validated
    assert (
        d.call(JOIN_GROUP, {**JOIN, "session_timeout_ms": 10, "rebalance_timeout_ms": 0})["error_code"]
        == E.MEMBER_ID_REQUIRED
    )
    assert d.call(JOIN_GROUP, {**JOIN, "session_timeout_ms": 600_000})["error_code"] == E.MEMBER_ID_REQUIRED


# ------------------------------------------------------------------- 2.2 member identity

IDENTITY_APIS = ["join", "sync", "heartbeat", "leave", "commit"]


def _identity_call(d, api, member_id, instance, generation):
    if api == "join":
        return d.call_join(member_id, instance=instance)["error_code"]
    if api == "sync":
        return d.responses[d.sync(member_id, generation, instance=instance)]["error_code"]
    if api == "heartbeat":
        return d.heartbeat(member_id, generation, instance=instance)
    if api == "leave":
        return d.leave((member_id, instance))["members"][0]["error_code"]
    return d.call_commit({("t", 0): 1}, generation=generation, member_id=member_id, instance=instance)[
        ("t", 0)
    ]


def _static_stable(d):
    t = d.join(instance="i1")
    d.advance(51)
    mid = d.responses[t]["member_id"]
    gen = d.responses[t]["generation_id"]
    d.sync(mid, gen, {mid: b"a"}, instance="i1")
    assert d.state() == "Stable"
    return mid, gen


@pytest.mark.parametrize("api", IDENTITY_APIS)
def test_instance_mapped_to_another_member_is_fenced(api):
    d = Driver()
    mid, gen = _static_stable(d)
    d.join_new(client_id="other")
    assert _identity_call(d, api, "someone-else", "i1", gen) == E.FENCED_INSTANCE_ID


@pytest.mark.parametrize("api", IDENTITY_APIS)
def test_unknown_instance_is_unknown_member(api):
    d = Driver()
    mid, gen = _static_stable(d)
    assert _identity_call(d, api, mid, "i-unknown", gen) == E.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("api", IDENTITY_APIS)
def test_unknown_member_id_is_unknown_member(api):
    d = Driver()
    mid, gen = _static_stable(d)
    assert _identity_call(d, api, "nobody", None, gen) == E.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("api", ["heartbeat", "commit", "sync"])
def test_static_member_id_without_instance_id_passes(api):
    d = Driver()
    mid, gen = _static_stable(d)
    assert _identity_call(d, api, mid, None, gen) == E.NONE


@pytest.mark.parametrize("api", ["heartbeat", "commit", "sync"])
def test_pending_member_ids_are_not_members(api):
    d = Driver()
    (leader,), gen = d.stable_group(1)
    pending = d.join_new(client_id="late")
    assert _identity_call(d, api, pending, None, gen) == E.UNKNOWN_MEMBER_ID


def test_nothing_raises_on_garbage():
    d = Driver()
    garbage = [
        None,
        0,
        "",
        b"",
        [],
        {},
        {"group_id": None},
        {"group_id": GROUP, "members": None},
        {"groups": [None, 3]},
    ]
    for api in (8, 9, 11, 12, 13, 14, 15, 16, 42, 47):
        for body in garbage:
            r = d.call(api, body)
            assert isinstance(r, dict)
