"""OffsetCommit (which state and generation accepts a commit, storing, write errors) and
OffsetFetch and offset retention."""

from __future__ import annotations

import msgspec
import pytest

from coordinator.group.messages import DeleteGroup, DeleteOffsets, WriteOffsets
from coordinator.group.state import DEAD
from coordinator.wire import error_codes as E
from coordinator.wire.schema import OFFSET_COMMIT
from tests.unit.coordinator.test_group_driver import Driver

T0 = ("t", 0)


def sub(*topics: str) -> list[dict]:
    md = msgspec.msgpack.encode(
        {"version": 0, "topics": list(topics), "user_data": None, "owned_partitions": []}
    )
    return [{"name": "range", "metadata": md}]


# ----------------------------------------------------------------------------- acceptance


def test_absent_group_negative_generation_creates_a_simple_group():
    d = Driver()
    assert d.call_commit({T0: 5}, member_id="whatever") == {T0: E.NONE}
    g = d.group()
    assert (d.state(), g.protocol_type, g.generation_id) == ("Empty", None, 0)
    assert d.fetched([T0]) == {T0: (5, "", E.NONE)}


def test_absent_group_non_negative_generation_is_illegal_generation():
    d = Driver()
    assert d.call_commit({T0: 5, ("u", 1): 2}, generation=0, member_id="m") == {T0: 22, ("u", 1): 22}
    assert d.core.group_ids() == []


def test_dead_group():
    d = Driver()
    d.call_commit({T0: 5})
    d.group().state = DEAD
    assert d.call_commit({T0: 6}) == {T0: E.COORDINATOR_NOT_AVAILABLE}


@pytest.mark.parametrize("member_id,instance", [("", None), ("m", None), ("m", "i"), ("", "i")])
def test_empty_group_negative_generation_ignores_member_checks(member_id, instance):
    d = Driver()
    (a,), _ = d.stable_group(1)
    d.leave((a, None))
    assert d.state() == "Empty"
    assert d.call_commit({T0: 9}, member_id=member_id, instance=instance) == {T0: E.NONE}


def test_empty_group_non_negative_generation_is_unknown_member():
    d = Driver()
    (a,), gen = d.stable_group(1)
    d.leave((a, None))
    assert d.call_commit({T0: 9}, generation=gen + 1, member_id=a) == {T0: E.UNKNOWN_MEMBER_ID}
    assert d.call_commit({T0: 9}, generation=0) == {T0: E.UNKNOWN_MEMBER_ID}


def test_non_empty_group_anonymous_commit_is_unknown_member():
    d = Driver()
    d.stable_group(1)
    assert d.call_commit({T0: 1}) == {T0: E.UNKNOWN_MEMBER_ID}


@pytest.mark.parametrize(
    "case,generation_delta,expected",
    [
        ("member", 0, E.NONE),
        ("member", 1, E.ILLEGAL_GENERATION),
        ("member", -100, E.ILLEGAL_GENERATION),  # generation < 0 but a member id: checked
        ("stranger", 0, E.UNKNOWN_MEMBER_ID),
    ],
)
def test_stable(case, generation_delta, expected):
    d = Driver()
    (a,), gen = d.stable_group(1)
    mid = a if case == "member" else "stranger"
    assert d.call_commit({T0: 1}, generation=gen + generation_delta, member_id=mid) == {T0: expected}


def test_preparing_rebalance_accepts_the_current_pre_rebalance_generation():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    d.join(a)
    assert d.state() == "PreparingRebalance"
    assert d.call_commit({T0: 3}, generation=gen, member_id=b) == {T0: E.NONE}
    assert d.call_commit({T0: 4}, generation=gen + 1, member_id=b) == {T0: E.ILLEGAL_GENERATION}


def test_completing_rebalance_accepts_nobody():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    ta = d.join(a)
    d.join(b)
    assert d.state() == "CompletingRebalance"
    new = d.responses[ta]["generation_id"]
    assert d.call_commit({T0: 3}, generation=new, member_id=b) == {T0: E.REBALANCE_IN_PROGRESS}
    assert d.call_commit({T0: 3}, generation=gen, member_id=b) == {T0: E.ILLEGAL_GENERATION}


# ----------------------------------------------------------------------------- storing


def test_metadata_too_large_per_partition():
    d = Driver(offset_metadata_max_bytes=4)
    body = {
        "group_id": "group",
        "generation_id": -1,
        "member_id": "",
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": "abcd"},
                    {"partition_index": 1, "committed_offset": 1, "committed_metadata": "abcde"},
                    {
                        "partition_index": 2,
                        "committed_offset": 1,
                        "committed_metadata": "\U0001f600\U0001f600\U0001f600",
                    },
                    {"partition_index": 3, "committed_offset": 7, "committed_metadata": None},
                ],
            }
        ],
    }
    errs = d.commit_errors(d.send(OFFSET_COMMIT, body))
    # UTF-16 code units, as Java counts: each emoji is 2
    assert errs == {("t", 0): 0, ("t", 1): E.OFFSET_METADATA_TOO_LARGE, ("t", 2): 12, ("t", 3): 0}
    assert d.fetched([("t", 0), ("t", 1), ("t", 3)]) == {
        ("t", 0): (1, "abcd", 0),
        ("t", 1): (-1, "", 0),
        ("t", 3): (7, "", 0),
    }


def test_all_too_large_writes_nothing():
    d = Driver(offset_metadata_max_bytes=1)
    assert d.call_commit({T0: 1}, metadata="xx") == {T0: E.OFFSET_METADATA_TOO_LARGE}
    assert [w for w in d.all_writes if isinstance(w, WriteOffsets)] == []


def test_commit_record_timestamps_and_explicit_retention():
    d = Driver()
    d.advance(1234)
    d.call_commit({T0: 5})
    (w,) = [w for w in d.all_writes if isinstance(w, WriteOffsets)]
    (rec,) = w.offsets
    assert (rec.topic, rec.partition, rec.offset, rec.commit_timestamp, rec.expire_timestamp) == (
        "t",
        0,
        5,
        1234,
        None,
    )
    body = {
        "group_id": "group",
        "generation_id": -1,
        "member_id": "",
        "retention_time_ms": 100,
        "topics": [{"name": "t", "partitions": [{"partition_index": 1, "committed_offset": 1}]}],
    }
    d.send(OFFSET_COMMIT, body)
    assert d.all_writes[-1].offsets[0].expire_timestamp == 1334


def test_commit_is_visible_only_once_written():
    d = Driver(auto_persist=False)
    t = d.commit({T0: 5})
    assert t not in d.responses
    assert d.fetched([T0]) == {T0: (-1, "", E.NONE)}
    assert d.fetched([T0], require_stable=True) == {T0: (-1, "", E.UNSTABLE_OFFSET_COMMIT)}
    (w,) = d.writes
    d.complete(w.token)
    assert d.commit_errors(t) == {T0: E.NONE}
    assert d.fetched([T0], require_stable=True) == {T0: (5, "", E.NONE)}


def test_later_write_wins_even_if_reported_first():
    d = Driver(auto_persist=False)
    d.commit({T0: 5})
    d.commit({T0: 6})
    w1, w2 = d.writes
    d.complete(w2.token)
    d.complete(w1.token)
    assert d.fetched([T0]) == {T0: (6, "", E.NONE)}


@pytest.mark.parametrize(
    "storage_error,client_error",
    [
        (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
        (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
        (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
        (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
        (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
        (E.MESSAGE_TOO_LARGE, E.INVALID_COMMIT_OFFSET_SIZE),
        (E.RECORD_LIST_TOO_LARGE, E.INVALID_COMMIT_OFFSET_SIZE),
        (E.INVALID_FETCH_SIZE, E.INVALID_COMMIT_OFFSET_SIZE),
        (E.NETWORK_EXCEPTION, E.COORDINATOR_LOAD_IN_PROGRESS),
        (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_NOT_AVAILABLE),
    ],
)
def test_write_error_mapping(storage_error, client_error):
    d = Driver(auto_persist=False, offset_metadata_max_bytes=1)
    t = d.commit({T0: 5, ("t", 1): 6})
    (w,) = d.writes
    d.complete(w.token, ok=False, error=storage_error)
    assert d.commit_errors(t) == {T0: client_error, ("t", 1): client_error}
    assert d.fetched([T0]) == {T0: (-1, "", E.NONE)}


def test_a_partition_listed_twice_the_last_counts():
    d = Driver()
    body = {
        "group_id": "group",
        "generation_id": -1,
        "member_id": "",
        "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]},
            {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 2}]},
        ],
    }
    d.send(OFFSET_COMMIT, body)
    assert d.fetched([T0]) == {T0: (2, "", E.NONE)}


# ----------------------------------------------------------------------------- OffsetFetch


def test_fetch_absent_or_dead_group():
    d = Driver()
    assert d.fetched([T0, ("u", 3)]) == {T0: (-1, "", 0), ("u", 3): (-1, "", 0)}
    assert d.fetch(None) == {"error_code": 0, "topics": []}
    d.call_commit({T0: 1})
    d.group().state = DEAD
    assert d.fetched([T0]) == {T0: (-1, "", 0)}


def test_fetch_all_and_requested():
    d = Driver()
    d.call_commit({("b", 1): 11, ("a", 0): 10, ("b", 0): 12}, metadata="md")
    assert d.fetch(None)["topics"] == [
        {
            "name": "a",
            "partitions": [{"partition_index": 0, "committed_offset": 10, "metadata": "md", "error_code": 0}],
        },
        {
            "name": "b",
            "partitions": [
                {"partition_index": 0, "committed_offset": 12, "metadata": "md", "error_code": 0},
                {"partition_index": 1, "committed_offset": 11, "metadata": "md", "error_code": 0},
            ],
        },
    ]
    assert d.fetched([("b", 1), ("c", 0)]) == {("b", 1): (11, "md", 0), ("c", 0): (-1, "", 0)}


def test_fetch_needs_no_membership_in_any_state():
    d = Driver()
    (a, b), gen = d.stable_group(2)
    d.call_commit({T0: 4}, generation=gen, member_id=a)
    d.join(a)
    assert d.state() == "PreparingRebalance"
    assert d.fetched([T0]) == {T0: (4, "", 0)}


# ----------------------------------------------------------------------------- retention

RET = dict(offsets_retention_ms=10_000, offsets_retention_check_interval_ms=1000)


def test_simple_group_offsets_expire_per_offset_then_the_group_is_removed():
    d = Driver(**RET)
    d.call_commit({T0: 1})
    d.advance(5000)
    d.call_commit({("t", 1): 1})
    d.advance(5001)  # T0 is 10 s old at the check after 10 s
    assert d.fetched([T0, ("t", 1)]) == {T0: (-1, "", 0), ("t", 1): (1, "", 0)}
    assert any(isinstance(w, DeleteOffsets) and w.partitions == [("t", 0)] for w in d.all_writes)
    d.advance(5000)
    assert d.core.group_ids() == []
    assert isinstance(d.all_writes[-1], DeleteGroup)
    assert d.states[-1].new is DEAD
    # a later commit recreates it
    assert d.call_commit({T0: 3}) == {T0: 0} and d.group().generation_id == 0


def test_empty_group_offsets_expire_together_from_when_it_became_empty():
    d = Driver(**RET)
    (a,), gen = d.stable_group(1)
    d.call_commit({T0: 1}, generation=gen, member_id=a)
    d.leave((a, None))
    empty_since = d.now
    d.advance(9000)
    d.call_commit({("t", 1): 1})  # a fresh commit in Empty does not extend the group's clock
    d.advance(10_000 - (d.now - empty_since) - 1)
    assert d.fetched([T0]) == {T0: (1, "", 0)}
    d.advance(1000)
    assert d.core.group_ids() == []


def test_stable_consumer_group_keeps_subscribed_topics():
    d = Driver(**RET)
    (a,), gen = d.stable_group(1, protocols=sub("t"), session=600_000)
    d.call_commit({T0: 1, ("gone", 0): 2}, generation=gen, member_id=a)
    d.advance(10_001)
    d.advance(1000)
    assert d.fetched([T0, ("gone", 0)]) == {T0: (1, "", 0), ("gone", 0): (-1, "", 0)}


@pytest.mark.parametrize("case", ["unparseable", "connect", "rebalancing"])
def test_never_expired(case):
    d = Driver(**RET)
    protocols = [{"name": "range", "metadata": b"\xc1garbage"}] if case == "unparseable" else sub("x")
    ptype = "connect" if case == "connect" else "consumer"
    ids = [d.join_new(protocol_type=ptype)]
    t = d.join(ids[0], protocols=protocols, protocol_type=ptype, session=600_000, rebalance=600_000)
    d.advance(51)
    gen = d.responses[t]["generation_id"]
    d.sync(ids[0], gen, {})
    d.call_commit({T0: 1}, generation=gen, member_id=ids[0])
    if case == "rebalancing":
        d.join_new(client_id="other", session=600_000)  # a pending member keeps it preparing
        d.join(ids[0], protocols=sub("y"), session=600_000, rebalance=600_000)
        assert d.state() == "PreparingRebalance"
    for _ in range(12):
        d.advance(1001)
    assert d.fetched([T0]) == {T0: (1, "", 0)}


def test_pending_commits_never_expire_and_explicit_expiry():
    d = Driver(auto_persist=False, **RET)
    t = d.commit({T0: 1})
    d.advance(20_000)
    assert t not in d.responses
    (w,) = d.writes
    d.complete(w.token)
    assert d.fetched([T0]) == {T0: (1, "", 0)}  # survived 20 checks while in flight
    d.advance(1001)
    assert d.fetched([T0]) == {T0: (-1, "", 0)}  # written 21 s ago: expires at the next check
    body = {
        "group_id": "group",
        "generation_id": -1,
        "member_id": "",
        "retention_time_ms": 500,
        "topics": [{"name": "t", "partitions": [{"partition_index": 1, "committed_offset": 1}]}],
    }
    d.send(OFFSET_COMMIT, body)
    d.complete(d.writes[0].token)
    d.advance(400)
    assert d.fetched([("t", 1)]) == {("t", 1): (1, "", 0)}
    d.advance(1001)  # explicit expiry at commit + 500, long before the 10 s retention
    assert d.fetched([("t", 1)]) == {("t", 1): (-1, "", 0)}


def test_group_without_offsets_is_dropped_at_the_check():
    d = Driver(**RET)
    d.join_new()  # creates an Empty group with no offsets
    assert d.core.group_ids() == ["group"]
    d.advance(1001)
    assert d.core.group_ids() == []


def test_expire_offsets_on_demand():
    d = Driver(**RET)
    d.call_commit({T0: 1})
    d.now += 10_000
    d.absorb(d.core.expire_offsets(d.now))
    assert d.core.group_ids() == []


def test_deleting_a_topic_removes_its_offsets_everywhere_at_once():
    d = Driver()
    d.call_commit({T0: 1, ("u", 0): 2}, group="g1")
    d.call_commit({T0: 1}, group="g2")
    d.absorb(d.core.delete_topics(["t"], d.now))
    assert d.fetched([T0, ("u", 0)], group="g1") == {T0: (-1, "", 0), ("u", 0): (2, "", 0)}
    assert d.core.group_ids() == ["g1"]  # g2 was Empty with no offsets left
