"""Scheme one against real ZooKeeper: membership, 0.8 byte layout, conflicts, retries, watches, commits."""

from __future__ import annotations

import json
import re
import time

import pytest
from kazoo.exceptions import NoNodeError

from core.errors import GroupshiftError
from core.types import TopicPartition
from core.zk import connect
from topics.errors import InvalidTopic
from topics.registry import add_partitions, create_topic
from zk_rebalance.events import read_events
from zk_rebalance.layout import InvalidGroupId, Whitelist
from zk_rebalance.member import ConsumerRebalanceFailed, ZkGroupMember, ZkMemberState
from zk_rebalance.metrics import conflicts, coverage, fanout, zk_requests

FAST = dict(rebalance_backoff_ms=100, session_timeout_ms=4000)


def member(zk_connect, cid, topics=("t",), tmp_path=None, **kw):
    opts = {**FAST, **kw}
    log = str(tmp_path / f"{cid}.jsonl") if tmp_path else None
    return ZkGroupMember(
        zk_connect,
        "g",
        list(topics) if not isinstance(topics, (dict, Whitelist)) else topics,
        consumer_id=cid,
        event_log=log,
        **opts,
    )


def expected_range(consumers: list[str], topics: dict[str, int], group="g") -> dict[TopicPartition, str]:
    """0.8 range over thread ids `g_<c>-0` in string order (one stream each)."""
    threads = sorted(f"{group}_{c}-0" for c in consumers)
    out = {}
    for topic, n in topics.items():
        per, extra = divmod(n, len(threads))
        for pos, tid in enumerate(threads):
            start = per * pos + min(pos, extra)
            for p in range(start, start + per + (1 if pos < extra else 0)):
                out[TopicPartition(topic, p)] = tid
    return out


def wait_group(members, topics: dict[str, int], timeout=20.0):
    """Until every member is stable and their assignments partition all partitions exactly once."""
    universe = {TopicPartition(t, p) for t, n in topics.items() for p in range(n)}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(m.is_stable() for m in members):
            got = [m.assignment() for m in members]
            if sum(len(a) for a in got) == len(universe) and set().union(*got) == universe:
                return
        time.sleep(0.02)
    raise AssertionError(
        f"group not stable: {[(m.consumer_id, m.state, sorted(m.assignment())) for m in members]}"
    )


def owners(zk, group, topics: dict[str, int]) -> dict[TopicPartition, str]:
    out = {}
    for t, n in topics.items():
        for p in range(n):
            out[TopicPartition(t, p)] = zk.get(f"/consumers/{group}/owners/{t}/{p}")[0].decode()
    return out


def test_join_and_leave_one_to_eight_members_match_range(zk, zk_connect, tmp_path):
    topics = {"t": 12, "u": 5}
    for t, n in topics.items():
        create_topic(zk, t, n)
    names = [f"m{i}" for i in (3, 1, 7, 0, 5, 2, 6, 4)]  # join order differs from the sort order
    live: list[ZkGroupMember] = []
    try:
        for name in names:
            live.append(member(zk_connect, name, list(topics), tmp_path).start())
            wait_group(live, topics)
            expected = expected_range([m.consumer_id.split("_", 1)[1] for m in live], topics)
            assert owners(zk, "g", topics) == expected
            for m in live:
                assert m.assignment() == {
                    tp for tp, o in expected.items() if o.startswith(m.consumer_id + "-")
                }
        while len(live) > 1:
            live.pop(0).close()
            wait_group(live, topics)
            assert owners(zk, "g", topics) == expected_range(
                [m.consumer_id.split("_", 1)[1] for m in live], topics
            )
    finally:
        for m in live:
            m.close()
    events = read_events(tmp_path.glob("*.jsonl"))
    assert conflicts(events)["rebalance_failures"] == 0
    assert fanout(events) == 8 and zk_requests(events)["total"] > 0


def test_znodes_are_byte_identical_to_kafka_0_8(zk, zk_connect):
    create_topic(zk, "t1", 3)
    create_topic(zk, "t2", 1)
    m = ZkGroupMember(
        zk_connect,
        "grp",
        {"t1": 2, "t2": 1},
        consumer_id="host1-1420070400000-1a2b3c4d",
        auto_commit=False,
        **FAST,
    ).start()
    try:
        assert m.wait_for_stable(10)
        cid = "grp_host1-1420070400000-1a2b3c4d"
        assert m.consumer_id == cid
        data, stat = zk.get(f"/consumers/grp/ids/{cid}")
        assert re.fullmatch(
            rb'\{"version":1,"subscription":\{"t1":2,"t2":1\},"pattern":"static","timestamp":"\d{13}"\}', data
        )
        assert stat.ephemeralOwner == m.zk.client_id[0]
        assert zk.get("/consumers/grp/owners/t1/0")[0] == f"{cid}-0".encode()
        assert zk.get("/consumers/grp/owners/t1/2")[0] == f"{cid}-1".encode()
        assert zk.get("/consumers/grp/owners/t2/0")[0] == f"{cid}-0".encode()
        o_stat = zk.get("/consumers/grp/owners/t1/0")[1]
        assert o_stat.ephemeralOwner == m.zk.client_id[0]
        assert zk.get("/consumers/grp/owners/t1")[0] == b""  # parent: persistent, empty
        m.commit({TopicPartition("t1", 0): 286894308})
        data, stat = zk.get("/consumers/grp/offsets/t1/0")
        assert data == b"286894308" and stat.ephemeralOwner == 0
        assert m.committed([TopicPartition("t1", 0), TopicPartition("t1", 1)]) == {
            TopicPartition("t1", 0): 286894308,
            TopicPartition("t1", 1): None,
        }
    finally:
        m.close()
    # A clean shutdown closes the session: the ids and owner nodes go at once, offsets stay.
    assert zk.get_children("/consumers/grp/ids") == []
    assert zk.get_children("/consumers/grp/owners/t1") == []
    assert zk.get("/consumers/grp/offsets/t1/0")[0] == b"286894308"


def test_wildcard_registration_and_topic_creation_rebalances(zk, zk_connect, tmp_path):
    create_topic(zk, "foo1", 2)
    create_topic(zk, "bar", 2)
    m = member(zk_connect, "w", Whitelist(" 'foo.*' "), tmp_path, num_streams=3).start()
    try:
        assert m.wait_for_stable(10)
        data = zk.get(f"/consumers/g/ids/{m.consumer_id}")[0]
        assert re.fullmatch(
            rb'\{"version":1,"subscription":\{"foo.\*":3\},"pattern":"white_list",'
            rb'"timestamp":"\d+"\}',
            data,
        )
        assert m.assignment() == {TopicPartition("foo1", 0), TopicPartition("foo1", 1)}
        create_topic(zk, "foo2", 1)  # fires the children watch of /brokers/topics
        deadline = time.monotonic() + 10
        while TopicPartition("foo2", 0) not in m.assignment() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert TopicPartition("foo2", 0) in m.assignment()
        add_partitions(zk, "foo2", 2)  # fires the data watch on /brokers/topics/foo2
        deadline = time.monotonic() + 10
        while TopicPartition("foo2", 1) not in m.assignment() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert TopicPartition("foo2", 1) in m.assignment()
    finally:
        m.close()
    kinds = {e.get("kind") for e in read_events([tmp_path / "w.jsonl"]) if e["ev"] == "watch"}
    assert {"topics", "topic"} <= kinds


def test_node_exists_conflict_rolls_back_then_retry_succeeds(zk, zk_connect, zk_server, tmp_path):
    create_topic(zk, "t", 3)
    other = connect(zk_connect)
    other.create("/consumers/g/owners/t/1", b"g_ghost-0", ephemeral=True, makepath=True)
    m = member(zk_connect, "c", ("t",), tmp_path, rebalance_max_retries=50, rebalance_backoff_ms=1000)
    try:
        m.start()
        deadline = time.monotonic() + 10
        while m.events.counters["attempt_end"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert m.events.counters["conflict"] >= 1
        # The attempt was rolled back: partitions 0 and 2 are not held while 1 is blocked. Read
        # ZooKeeper first, then whether the next attempt (1 s of backoff later) had begun meanwhile.
        held = [p for p in (0, 2) if zk.exists(f"/consumers/g/owners/t/{p}")]
        assert not held or m.events.counters["attempt_begin"] > 1, held
        other.stop()  # the ghost's session ends: its owner node goes
        other.close()
        assert m.wait_for_stable(10)
        assert m.assignment() == {TopicPartition("t", p) for p in range(3)}
    finally:
        m.close()
    events = read_events([tmp_path / "c.jsonl"])
    rollback = [e for e in events if e["ev"] == "owner_deleted" and e["reason"] == "rollback"]
    assert {e["partition"] for e in rollback} == {"t-0", "t-2"}
    conflict = next(e for e in events if e["ev"] == "conflict")
    assert conflict["partition"] == "t-1" and conflict["owner"] == "g_ghost-0"
    ends = [e for e in events if e["ev"] == "attempt_end"]
    assert not ends[0]["ok"] and ends[-1]["ok"]


def test_rebalance_fails_after_exactly_the_configured_attempts(zk, zk_connect, tmp_path):
    create_topic(zk, "t", 2)
    other = connect(zk_connect)
    other.create("/consumers/g/owners/t/0", b"g_ghost-0", ephemeral=True, makepath=True)
    m = member(zk_connect, "c", ("t",), tmp_path, rebalance_max_retries=3, rebalance_backoff_ms=300)
    try:
        t0 = time.monotonic()
        m.start()
        with pytest.raises(ConsumerRebalanceFailed, match="can't rebalance after 3 retries"):
            m.wait_for_stable(20)
        elapsed = time.monotonic() - t0
        assert elapsed >= 3 * 0.3  # the backoff runs after the last attempt too
        assert m.state is ZkMemberState.FAILED and m.assignment() == set()
        assert not zk.exists("/consumers/g/owners/t/1")
    finally:
        m.close()
        other.stop()
        other.close()
    events = read_events([tmp_path / "c.jsonl"])
    attempts = [e for e in events if e["ev"] == "attempt_end"]
    assert [e["attempt"] for e in attempts] == [0, 1, 2] and not any(e["ok"] for e in attempts)
    end = next(e for e in events if e["ev"] == "rebalance_end")
    assert end["ok"] is False and end["duration"] >= 0.9
    assert conflicts(events) == {"conflicts": 3, "attempts": 3, "failed_attempts": 3, "rebalance_failures": 1}


def test_roundrobin_uses_java_hash_order(zk, zk_connect):
    from zk_rebalance.assignors import RoundRobinAssignor, View
    from zk_rebalance.layout import ThreadId

    create_topic(zk, "a", 5)
    create_topic(zk, "b", 3)
    ms = [member(zk_connect, c, ("a", "b"), assignor="roundrobin", num_streams=2) for c in ("x", "y")]
    try:
        for m in ms:
            m.start()
        wait_group(ms, {"a": 5, "b": 3})
        threads = sorted(ThreadId(f"g_{c}", i) for c in "xy" for i in range(2))
        view = View(
            "g_x",
            {},
            {"a": list(range(5)), "b": list(range(3))},
            {"a": threads, "b": threads},
            ["g_x", "g_y"],
        )
        assert ms[0].assignment() == set(RoundRobinAssignor().assign(view, "g_x"))
        assert ms[1].assignment() == set(RoundRobinAssignor().assign(view, "g_y"))
    finally:
        for m in ms:
            m.close()


def test_hand_written_0_8_tree_with_several_groups(zk, zk_connect):
    """A tree as a 0.8 cluster leaves it: brokers, topics, two groups, a live foreign consumer, offsets."""
    zk.create(
        "/brokers/ids/1",
        b'{"jmx_port":-1,"timestamp":"1420070400000","host":"h1","version":1,"port":9092}',
        makepath=True,
    )
    zk.create(
        "/brokers/topics/a", b'{"version":1,"partitions":{"1":[1],"0":[1],"3":[1],"2":[1]}}', makepath=True
    )
    zk.create("/brokers/topics/b", b'{"version":1,"partitions":{"0":[1],"1":[1]}}', makepath=True)
    for path, value in {
        "/consumers/g1/offsets/a/0": b"100",
        "/consumers/g1/offsets/a/1": b"101",
        "/consumers/g1/offsets/a/3": b"103",
        "/consumers/g2/offsets/a/0": b"7",
        "/consumers/g2/offsets/b/1": b"9",
    }.items():
        zk.create(path, value, makepath=True)
    foreign = connect(zk_connect)  # a Java consumer of g1 with two streams on `a`
    fid = "g1_host9-1420070400000-1a2b3c4d"
    foreign.create(
        f"/consumers/g1/ids/{fid}",
        b'{"version":1,"subscription":{"a":2},"pattern":"static","timestamp":"1420070400000"}',
        ephemeral=True,
        makepath=True,
    )
    m = ZkGroupMember(zk_connect, "g1", ["a"], consumer_id="zz", require_brokers=True, **FAST).start()
    n = ZkGroupMember(zk_connect, "g2", ["a", "b"], consumer_id="solo", **FAST).start()
    try:
        assert m.wait_for_stable(10) and n.wait_for_stable(10)
        # Threads in string order: g1_host9-...-0, g1_host9-...-1, g1_zz-0 → 4 partitions: 2, 1, 1.
        assert m.assignment() == {TopicPartition("a", 3)}
        assert m.positions() == {TopicPartition("a", 3): 103}
        assert n.assignment() == {TopicPartition(t, p) for t, c in (("a", 4), ("b", 2)) for p in range(c)}
        assert n.positions()[TopicPartition("b", 1)] == 9 and n.positions()[TopicPartition("b", 0)] is None
        assert m.committed([TopicPartition("a", 1)]) == {TopicPartition("a", 1): 101}
        cov = coverage(zk, "g1", {"a": 4})
        assert cov["owned"] == {"a-3": "g1_zz-0"} and sorted(cov["unowned"]) == ["a-0", "a-1", "a-2"]
    finally:
        m.close()
        n.close()
        foreign.stop()
        foreign.close()


def test_require_brokers_owns_nothing_until_a_broker_registers(zk, zk_connect, tmp_path):
    create_topic(zk, "t", 2)
    m = member(zk_connect, "c", ("t",), tmp_path, require_brokers=True).start()
    try:
        assert m.wait_for_stable(10) and m.assignment() == set()
        zk.create(
            "/brokers/ids/0",
            b'{"jmx_port":-1,"timestamp":"1","host":"h","version":1,"port":9092}',
            ephemeral=True,
            makepath=True,
        )
        deadline = time.monotonic() + 10
        while len(m.assignment()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert m.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
    finally:
        m.close()
    assert any(e["ev"] == "no_brokers" for e in read_events([tmp_path / "c.jsonl"]))


def test_auto_commit_writes_changed_offsets_only(zk, zk_connect, tmp_path):
    create_topic(zk, "t", 1)
    tp = TopicPartition("t", 0)
    m = member(zk_connect, "c", ("t",), tmp_path, auto_commit_interval_ms=200).start()
    try:
        assert m.wait_for_stable(10)
        assert m.positions() == {tp: None}
        time.sleep(0.5)
        assert not zk.exists("/consumers/g/offsets/t/0")  # nothing consumed: nothing written
        m.mark_consumed({tp: 17})
        deadline = time.monotonic() + 5
        while not zk.exists("/consumers/g/offsets/t/0") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert zk.get("/consumers/g/offsets/t/0")[0] == b"17"
        mzxid = zk.get("/consumers/g/offsets/t/0")[1].mzxid
        time.sleep(0.6)
        assert zk.get("/consumers/g/offsets/t/0")[1].mzxid == mzxid  # unchanged: not rewritten
        assert m.events.counters["commit_skipped"] >= 1
    finally:
        m.close()


def test_listener_sees_revoke_and_assign(zk, zk_connect):
    create_topic(zk, "t", 4)
    calls = []

    class L:
        def on_partitions_revoked(self, tps):
            calls.append(("revoked", sorted(tps)))

        def on_partitions_assigned(self, tps):
            calls.append(("assigned", sorted(tps)))

        def on_partitions_lost(self, tps):
            calls.append(("lost", sorted(tps)))

    a = member(zk_connect, "a", listener=L()).start()
    try:
        assert a.wait_for_stable(10)
        b = member(zk_connect, "b").start()
        wait_group([a, b], {"t": 4})
        b.close()
        wait_group([a], {"t": 4})
    finally:
        a.close()
    all4 = [TopicPartition("t", p) for p in range(4)]
    assert calls[0] == ("assigned", all4)
    assert ("revoked", all4) in calls and ("assigned", all4[:2]) in calls


def test_bad_input_rejected_as_0_8(zk_connect):
    with pytest.raises(InvalidGroupId, match="illegal"):
        ZkGroupMember(zk_connect, "bad group", ["t"])
    with pytest.raises(InvalidGroupId, match="required"):
        ZkGroupMember(zk_connect, "", ["t"])
    with pytest.raises(InvalidTopic, match="illegal"):
        ZkGroupMember(zk_connect, "g", ["bad/topic"])
    with pytest.raises(InvalidTopic):
        ZkGroupMember(zk_connect, "g", [".."])
    with pytest.raises(InvalidTopic, match="255"):
        ZkGroupMember(zk_connect, "g", ["x" * 256])
    ZkGroupMember(zk_connect, "g.ok_-1", ["x" * 255])  # accepted as in 0.8.2
    with pytest.raises(GroupshiftError):
        ZkGroupMember(zk_connect, "g", ["t"], num_streams=0)


def test_foreign_ids_node_is_reported_and_skipped(zk, zk_connect, tmp_path):
    create_topic(zk, "t", 2)
    other = connect(zk_connect)  # pykafka writes the topic name, not 0.8 JSON
    other.create("/consumers/g/ids/pykafka-1", b"t", ephemeral=True, makepath=True)
    m = member(zk_connect, "c", ("t",), tmp_path).start()
    try:
        assert m.wait_for_stable(10)
        assert m.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
    finally:
        m.close()
        other.stop()
        other.close()
    bad = [e for e in read_events([tmp_path / "c.jsonl"]) if e["ev"] == "bad_registration"]
    assert bad and bad[0]["path"] == "/consumers/g/ids/pykafka-1"
    assert "not a Kafka 0.8 consumer registration" in bad[0]["error"]


def test_event_log_is_jsonl_with_monotonic_times(zk, zk_connect, tmp_path):
    create_topic(zk, "t", 1)
    with member(zk_connect, "c", ("t",), tmp_path) as m:
        assert m.wait_for_stable(10)
    lines = (tmp_path / "c.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    assert all({"t", "wall", "member", "ev"} <= r.keys() for r in recs)
    assert [r["t"] for r in recs] == sorted(r["t"] for r in recs)
    evs = [r["ev"] for r in recs]
    for name in (
        "start",
        "registered",
        "rebalance_begin",
        "attempt_begin",
        "decision",
        "owner_created",
        "fetch_start",
        "rebalance_end",
        "fetch_stop",
        "closed",
    ):
        assert name in evs
    assert {r["op"] for r in recs if r["ev"] == "zk"} >= {"getChildren", "getData", "create", "exists"}
    with pytest.raises(NoNodeError):  # closed: its ids node went with its session
        zk.get("/consumers/g/ids/g_c")


@pytest.mark.parametrize("after_claim", [False, True])
def test_offsets_read_before_the_claim_unless_read_offsets_after_claim(zk, zk_connect, tmp_path, after_claim):
    create_topic(zk, "t", 1)
    zk.create("/consumers/g/offsets/t/0", b"5", makepath=True)
    with member(zk_connect, "c", ("t",), tmp_path, read_offsets_after_claim=after_claim) as m:
        assert m.wait_for_stable(10) and m.positions() == {TopicPartition("t", 0): 5}
    events = read_events([tmp_path / "c.jsonl"])
    read_at = next(e["t"] for e in events if e["ev"] == "zk" and e["path"] == "/consumers/g/offsets/t/0")
    claimed_at = next(e["t"] for e in events if e["ev"] == "owner_created")
    assert (read_at > claimed_at) is after_claim


def test_a_fenced_commit_names_the_partitions_it_refused_and_writes_the_others(zk, zk_connect, tmp_path):
    """With `fence_commits`, each partition's offset is written under its own owner epoch: when one
    partition was claimed since, the commit writes the rest and `CommitFailed.partitions` names the
    refused one (a caller that discards the whole batch would lose the written ones' records)."""
    from core.errors import CommitFailed
    from zk_rebalance.layout import epoch_path

    create_topic(zk, "t", 2)
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    m = member(zk_connect, "c", ("t",), tmp_path, fence_commits=True, auto_commit=False).start()
    try:
        assert m.wait_for_stable(10) and m.assignment() == {t0, t1}
        zk.set(epoch_path("g", "t", 1), b"someone-else")  # another claim of t-1 bumped its epoch
        with pytest.raises(CommitFailed) as info:
            m.commit({t0: 5, t1: 7}, m.generation)
        assert info.value.partitions == {t1}
        assert zk.get("/consumers/g/offsets/t/0")[0] == b"5"
        assert not zk.exists("/consumers/g/offsets/t/1")
    finally:
        m.close()
