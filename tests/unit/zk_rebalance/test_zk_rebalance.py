"""Pure parts of scheme one: 0.8 layout and JSON, assignors (worked examples, properties), metrics."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.javahash import java_string_hash
from core.types import TopicPartition
from zk_rebalance.assignors import (
    RangeAssignor,
    RoundRobinAssignor,
    View,
    partition_assignor,
    thread_sort_key,
)
from zk_rebalance.layout import (
    Blacklist,
    InvalidRegistration,
    ThreadId,
    TopicCount,
    Whitelist,
    consumer_id_string,
    decode_registration,
    encode_registration,
    parse_thread_id,
)
from zk_rebalance.metrics import (
    conflicts,
    disagreement,
    double_consumption,
    fanout,
    offset_regressions,
    predicted_reads,
    stop_the_world,
    time_to_stable,
    unowned_partition_seconds,
    zk_requests,
    zombie_lifetime,
)


def view_for(me: str, streams: dict[str, dict[str, int]], partitions: dict[str, int]) -> View:
    """streams: consumer -> {topic: n}."""
    per_topic: dict[str, list[ThreadId]] = {}
    for c, subs in streams.items():
        for t, n in subs.items():
            per_topic.setdefault(t, []).extend(ThreadId(c, i) for i in range(n))
    return View(
        consumer=me,
        my_threads={t: [ThreadId(me, i) for i in range(n)] for t, n in streams[me].items()},
        partitions={t: list(range(partitions[t])) for t in streams[me]},
        consumers_for_topic={t: sorted(v, key=thread_sort_key) for t, v in per_topic.items()},
        consumers=sorted(streams),
    )


def test_registration_json_is_byte_exact():
    sub = TopicCount.static({"t1": 2, "t2": 1})
    assert encode_registration(sub, 1420070400000) == (
        b'{"version":1,"subscription":{"t1":2,"t2":1},"pattern":"static","timestamp":"1420070400000"}'
    )
    wl = TopicCount.wildcard(Whitelist(' "foo.*, bar" '), 3)
    assert wl.streams == {"foo.*|bar": 3}
    assert encode_registration(wl, 1420070400000) == (
        b'{"version":1,"subscription":{"foo.*|bar":3},"pattern":"white_list","timestamp":"1420070400000"}'
    )
    bl = TopicCount.wildcard(Blacklist("a/b"), 1)
    assert b'"subscription":{"a\\/b":1},"pattern":"black_list"' in encode_registration(bl, 1)
    back = decode_registration(encode_registration(wl, 1))
    assert back.pattern == "white_list" and back.filter.allows("foo9") and not back.filter.allows("baz")
    assert decode_registration(encode_registration(sub, 1)).streams == {"t1": 2, "t2": 1}


@pytest.mark.parametrize("data", [b"t", b"{}", b'{"pattern":"static"}', b"\xac\xed\x00\x05t", b"[1]"])
def test_non_0_8_registrations_are_rejected_with_the_path(data):
    with pytest.raises(InvalidRegistration, match="/consumers/g/ids/x"):
        decode_registration(data, "/consumers/g/ids/x")


def test_ids_and_filters():
    cid = consumer_id_string("grp")
    host_ms_uuid = cid[len("grp_") :]
    host, ms, u = host_ms_uuid.rsplit("-", 2)
    assert cid.startswith("grp_") and ms.isdigit() and len(ms) == 13 and 1 <= len(u) <= 8
    assert consumer_id_string("grp", "c1") == "grp_c1"
    assert str(ThreadId("grp_c1", 3)) == "grp_c1-3" and parse_thread_id("grp_h-1-ab-3") == ThreadId(
        "grp_h-1-ab", 3
    )
    assert sorted((ThreadId("c", i) for i in (0, 1, 2, 10, 11)), key=thread_sort_key) == [
        ThreadId("c", i) for i in (0, 1, 10, 11, 2)
    ]
    assert Whitelist("foo.*").allows("foo1") and not Whitelist("foo").allows("foo1")  # whole-name match
    assert not Whitelist(".*").allows("__consumer_offsets") and Whitelist(".*").allows(
        "__consumer_offsets", False
    )
    assert Blacklist("foo.*").allows("bar") and not Blacklist("foo.*").allows("foo2")


def test_range_worked_example():
    """Two consumers with two streams each, 5 partitions: the first 5 % 4 threads get one more."""
    v = view_for("C1", {"C1": {"t": 2}, "C2": {"t": 2}}, {"t": 5})
    mine = RangeAssignor().assign(v)
    assert {tp.partition: str(t) for tp, t in mine.items()} == {0: "C1-0", 1: "C1-0", 2: "C1-1"}
    other = RangeAssignor().assign(view_for("C2", {"C1": {"t": 2}, "C2": {"t": 2}}, {"t": 5}))
    assert {tp.partition: str(t) for tp, t in other.items()} == {3: "C2-0", 4: "C2-1"}


def test_roundrobin_deals_java_hash_order_to_threads_in_string_order():
    """Partitions sorted by the Java hash of "[t,p]" go to C1-0, C1-1, C2-0, C2-1 in turn."""
    v = view_for("C1", {"C1": {"t": 2}, "C2": {"t": 2}}, {"t": 4})
    order = sorted(range(4), key=lambda p: java_string_hash(f"[t,{p}]"))
    got = {**RoundRobinAssignor().assign(v, "C1"), **RoundRobinAssignor().assign(v, "C2")}
    dealt = [str(got[TopicPartition("t", p)]) for p in order]
    assert dealt == ["C1-0", "C1-1", "C2-0", "C2-1"]
    with pytest.raises(ValueError, match="Round-robin assignment is allowed only"):
        RoundRobinAssignor().assign(
            view_for("C1", {"C1": {"t": 1, "u": 1}, "C2": {"t": 1}}, {"t": 2, "u": 1})
        )
    assert partition_assignor("sticky").name == "range"  # unknown strategies fall back to range, as 0.8.2


@given(
    streams=st.dictionaries(st.sampled_from([f"c{i}" for i in range(12)]), st.integers(1, 3), min_size=1),
    partitions=st.integers(0, 40),
    strategy=st.sampled_from(["range", "roundrobin"]),
)
def test_every_partition_gets_exactly_one_thread(streams, partitions, strategy):
    subs = {c: {"t": n} for c, n in streams.items()}
    owners: dict[TopicPartition, ThreadId] = {}
    for c in streams:
        for tp, tid in partition_assignor(strategy).assign(view_for(c, subs, {"t": partitions})).items():
            assert tp not in owners and tid.consumer == c
            owners[tp] = tid
    assert set(owners) == {TopicPartition("t", p) for p in range(partitions)}
    counts = [sum(1 for t in owners.values() if t.consumer == c) for c in streams]
    if strategy == "range":  # contiguous and balanced per thread
        per_thread = [
            sum(1 for t in owners.values() if t == tid)
            for c, n in streams.items()
            for tid in (ThreadId(c, i) for i in range(n))
        ]
        assert max(per_thread) - min(per_thread) <= 1
    assert sum(counts) == partitions


def ev(t, member, name, **kw):
    return {"t": t, "member": member, "ev": name, **kw}


def test_metrics_from_synthetic_logs():
    events = [
        ev(0.0, "a", "fetch_start", partition="t-0"),
        ev(1.0, "a", "rebalance_begin"),
        ev(1.0, "b", "rebalance_begin"),
        ev(1.1, "a", "zk", op="getData"),
        ev(1.1, "b", "zk", op="getChildren"),
        ev(1.2, "a", "zk", op="create"),
        ev(1.2, "a", "fetch_stop", partition="t-0"),
        ev(1.3, "a", "decision", view="v1", mine={"t-0": "a-0"}, partitions={"t": 2}),
        ev(1.3, "b", "decision", view="v2", mine={"t-0": "b-0"}, partitions={"t": 2}),
        ev(1.4, "b", "conflict", partition="t-0"),
        ev(1.4, "b", "attempt_end", ok=False),
        ev(1.5, "a", "attempt_end", ok=True),
        ev(1.5, "a", "fetch_start", partition="t-0"),
        ev(1.5, "a", "rebalance_end", ok=True),
        ev(2.5, "b", "attempt_end", ok=True),
        ev(2.5, "b", "rebalance_end", ok=True),
        ev(2.6, "b", "fetch_start", partition="t-0"),
        ev(3.0, "a", "commit", partition="t-0", offset=10, mzxid=5),
        ev(3.1, "b", "commit", partition="t-0", offset=7, mzxid=6),
        ev(3.2, "c", "watch", kind="ids", left=["a"]),
        ev(4.2, "a", "fetch_stop", partition="t-0"),
        ev(0.0, "s", "owners", owned=["t-0"], partitions=2),
        ev(2.0, "s", "owners", owned=["t-0", "t-1"], partitions=2),
        ev(3.0, "s", "owners", owned=[], partitions=2),
    ]
    events.sort(key=lambda e: e["t"])
    assert fanout(events, 0.5, 2.0) == 2
    assert zk_requests(events)["total"] == 3 and zk_requests(events)["create"] == 1
    assert conflicts(events) == {"conflicts": 1, "attempts": 3, "failed_attempts": 1, "rebalance_failures": 0}
    d = disagreement(events)
    assert d["views"] == 2 and d["double_claimed"] == ["t-0"] and d["unclaimed"] == ["t-1"]
    assert time_to_stable(events, 1.0) == pytest.approx(1.5)
    stw = stop_the_world(events)
    assert stw["count"] == 1 and stw["p50"] == pytest.approx(0.3)
    assert unowned_partition_seconds(events, 0.0, 3.0) == pytest.approx(2.0)  # 1 unowned for 2 s
    assert double_consumption(events, 0, 5)["by_partition"]["t-0"] == pytest.approx(4.2 - 2.6)
    assert offset_regressions(events) == [
        {"partition": "t-0", "from": 10, "to": 7, "member": "b", "previous_member": "a"}
    ]
    assert zombie_lifetime(events, "a") == pytest.approx(1.0)
    assert zombie_lifetime(events, "b") is None
    assert zombie_lifetime(events + [ev(5, "c", "watch", kind="ids", left=["z"])], "z") == math.inf
    # A member that had stopped fetching before the others saw it leave (fenced) has no zombie time,
    # even though it fetches again later in a new session.
    fenced = [e for e in events if not (e["member"] == "a" and e["t"] == 4.2)] + [
        ev(3.1, "a", "fetch_stop", partition="t-0"),
        ev(6.0, "a", "fetch_start", partition="t-0"),
        ev(7.0, "a", "fetch_stop", partition="t-0"),
    ]
    fenced.sort(key=lambda e: e["t"])
    assert zombie_lifetime(fenced, "a") == 0.0
    assert predicted_reads(10, 1, 1) == 10 * 18
