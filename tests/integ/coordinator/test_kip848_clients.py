"""librdkafka consumers speaking KIP-848's consumer protocol to a node's Kafka listener.

confluent-kafka (librdkafka bundled in its wheel, `group.protocol=consumer`) against one node
process per test, on a fresh ZooKeeper chroot and a private log root: ConsumerGroupHeartbeat
(68), Metadata v12 by topic id, OffsetFetch/OffsetCommit v9 and ConsumerGroupDescribe (69),
served by scheme two's incremental groups (docs/kafka-listener.md, "KIP-848's consumer protocol").
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from coordinator.kafka_wire.consumer_group_api import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from pipeline.consumer import Consumer as GroupshiftConsumer
from tests.kafka_helpers import ck_consume, kafka_node_in, new_topic, produce, recv_exactly, send_and_drain
from topics.topic_ids import ZERO, ensure_topic_id, kafka_string

# The consumer protocol: the server sets the session timeout and the heartbeat interval.
KIP848 = {
    "group.protocol": "consumer",
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "fetch.wait.max.ms": 200,
    "check.crcs": True,
}


REPO = Path(__file__).resolve().parents[3]

# The server's settings for consumer-protocol members: sessions short enough for a test to wait
# out a killed member, heartbeats often enough to move partitions quickly.
SESSION_MS = 6000
NODE_OPTIONS = (
    "--group-consumer-session-timeout-ms",
    str(SESSION_MS),
    "--group-consumer-heartbeat-interval-ms",
    "300",
)


@pytest.fixture
def node(zk_connect, tmp_path):
    with kafka_node_in(zk_connect, tmp_path, *NODE_OPTIONS) as proc:
        yield proc


def _consumer(node, group: str, topics: list[str], **conf) -> Consumer:
    c = Consumer({"bootstrap.servers": node.kafka_bootstrap, "group.id": group, **KIP848, **conf})
    c.subscribe(topics)
    return c


def _wait_for(what: str, condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


class Member(threading.Thread):
    """A librdkafka consumer-protocol member polling in its own thread: it commits what it read
    before it lets a partition go (in the revoke callback) and after every batch, and records
    each assignment change and each commit's span of offsets (`commits`: partition, first, next)."""

    def __init__(self, node, group: str, topic: str, name: str, topics: list[str] | None = None, **conf):
        super().__init__(daemon=True, name=name)
        self.node, self.group, self.topic, self.conf = node, group, topic, conf
        self.topics = topics or [topic]
        self.held: set[tuple[str, int]] = set()  # (topic, partition), for members of several topics
        self.got: list[bytes] = []
        self.positions: dict[int, int] = {}
        self.assigned: set[int] = set()
        self.events: list[tuple[str, frozenset[int]]] = []
        self.commits: list[tuple[int, int, int]] = []
        self.stale_commits = 0  # commits sent again after STALE_MEMBER_EPOCH
        self._since: dict[int, int] = {}  # partition -> the first offset read and not committed yet
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def _commit(self, c: Consumer, partitions) -> None:
        todo = sorted(p for p in partitions if p in self._since)  # only what was read since
        if not todo:
            return
        offsets = [CKTopicPartition(self.topic, p, self.positions[p]) for p in todo]
        deadline = time.monotonic() + 10
        while True:
            try:
                c.commit(offsets=offsets, asynchronous=False)
                break
            except KafkaException as exc:
                # The coordinator checks a commit's member epoch exactly (as Kafka does) and bumps the
                # epoch as it hands the member partitions: a commit sent meanwhile is STALE. The
                # partitions stay ours (a revocation waits for this thread), so commit again once
                # librdkafka holds the new epoch.
                if exc.args[0].code() != KafkaError.STALE_MEMBER_EPOCH or time.monotonic() > deadline:
                    raise
                self.stale_commits += 1
                self.stop.wait(0.05)
        self.commits += [(p, self._since.pop(p), self.positions[p]) for p in todo]

    def run(self) -> None:
        c = Consumer(
            {"bootstrap.servers": self.node.kafka_bootstrap, "group.id": self.group, **KIP848, **self.conf}
        )
        self.consumer = c

        def assign(consumer, tps):
            self.assigned |= {tp.partition for tp in tps if tp.topic == self.topic}
            self.held |= {(tp.topic, tp.partition) for tp in tps}
            self.events.append(("assigned", frozenset(tp.partition for tp in tps)))

        def revoke(consumer, tps):
            gone = {tp.partition for tp in tps if tp.topic == self.topic}
            self._commit(consumer, gone)
            self.assigned -= gone
            self.held -= {(tp.topic, tp.partition) for tp in tps}
            self.events.append(("revoked", frozenset(gone)))

        def lost(consumer, tps):
            self.assigned -= {tp.partition for tp in tps if tp.topic == self.topic}
            self.held -= {(tp.topic, tp.partition) for tp in tps}
            for tp in tps:  # read, never committed: the next owner reads it again
                self._since.pop(tp.partition, None)
            self.events.append(("lost", frozenset(tp.partition for tp in tps)))

        try:
            c.subscribe(self.topics, on_assign=assign, on_revoke=revoke, on_lost=lost)
            while not self.stop.is_set():
                msgs = c.consume(num_messages=200, timeout=0.1)
                read = set()
                for m in msgs:
                    if m.error():
                        raise KafkaException(m.error())
                    if m.topic() != self.topic or m.partition() not in self.assigned:
                        continue  # fetched before a revocation the callback already committed
                    self.got.append(m.value())
                    self._since.setdefault(m.partition(), m.offset())
                    self.positions[m.partition()] = m.offset() + 1
                    read.add(m.partition())
                self._commit(c, read)
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            c.close()  # leaves the group (epoch -1), after the revoke callback committed

    def finish(self) -> None:
        self.stop.set()
        self.join(30)
        assert not self.is_alive() and self.error is None, self.error


def _owners(members: list[Member]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for m in members:
        for p in m.assigned:
            out.setdefault(p, []).append(m.name)
    return out


def test_consumer_protocol_member_reads_once_commits_and_resumes(node):
    topic, group = new_topic(node, 2), f"g-{uuid.uuid4().hex[:8]}"
    first = produce(node, topic, 200)
    c = _consumer(node, group, [topic])
    try:
        got = ck_consume(c, 200)
        assert len(got) == 200 and set(got) == first
        c.commit(asynchronous=False)
        committed = c.committed([CKTopicPartition(topic, p) for p in (0, 1)], timeout=20)
        assert {tp.partition: tp.offset for tp in committed} == {0: 100, 1: 100}
    finally:
        c.close()
    second = produce(node, topic, 30, start=200)
    c = _consumer(node, group, [topic])
    try:
        got = ck_consume(c, 30)
        assert sorted(got) == sorted(second)  # resumed from the commit
    finally:
        c.close()


def test_members_join_and_leave_moving_only_what_moves_and_reading_each_record_once(node):
    topic, group = new_topic(node, 6), f"g-{uuid.uuid4().hex[:8]}"
    values = produce(node, topic, 600, partitions=6)
    members = [Member(node, group, topic, "m1")]
    members[0].start()
    try:
        _wait_for("m1 holds every partition", lambda: members[0].assigned == set(range(6)))
        for name in ("m2", "m3"):
            kept_before = {m.name: set(m.assigned) for m in members}
            events_before = {m.name: len(m.events) for m in members}
            joiner = Member(node, group, topic, name)
            members.append(joiner)
            joiner.start()
            _wait_for(
                f"{name} joins and the six partitions are spread over {len(members)}",
                lambda: (
                    all(len(m.assigned) == 6 // len(members) for m in members)
                    and sorted(_owners(members)) == list(range(6))
                ),
            )
            for m in members[:-1]:  # the old members only let partitions go; none came back to them
                revoked = set().union(
                    *(p for kind, p in m.events[events_before[m.name] :] if kind == "revoked")
                )
                assert m.assigned == kept_before[m.name] - revoked
                assert all(kind != "lost" for kind, _ in m.events)
            assert all(len(o) == 1 for o in _owners(members).values())  # never two owners
        produce(node, topic, 600, start=600, partitions=6)
        values |= {f"v-{i}".encode() for i in range(600, 1200)}
        leaver = members.pop(1)
        leaver.finish()
        _wait_for(
            "the leaver's partitions go to the other two",
            lambda: sorted(_owners(members)) == list(range(6)) and all(len(m.assigned) == 3 for m in members),
        )
        everyone = members + [leaver]
        _wait_for("every record read", lambda: sum(len(m.got) for m in everyone) >= len(values))
    finally:
        for m in members:
            m.finish()
    got = [v for m in everyone for v in m.got]
    assert len(got) == len(values) and set(got) == values  # each record exactly once


def test_groupshift_incremental_member_and_librdkafka_members_share_a_group(node):
    """One group model: groupshift's own scheme-two incremental member (native listener) and
    librdkafka consumer-protocol members (Kafka listener) split the partitions between them."""
    topic, group = new_topic(node, 4), f"g-{uuid.uuid4().hex[:8]}"
    values = produce(node, topic, 400, partitions=4)
    mine = GroupshiftConsumer(
        group,
        [topic],
        rebalancer="server",
        incremental=True,
        zk=node.zk,
        log_root=node.data,
        bootstrap=node.bootstrap,
        session_timeout_ms=6000,
        heartbeat_interval_ms=300,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    theirs = Member(node, group, topic, "rdkafka")
    got_mine: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while not mine.assignment() and time.monotonic() < deadline:
            for records in mine.poll(100).values():
                got_mine.extend(r.value for r in records)
        theirs.start()

        def split() -> bool:
            for records in mine.poll(100).values():
                got_mine.extend(r.value for r in records)
            mine.commit()
            held = {tp.partition for tp in mine.assignment()}
            return len(held) == 2 and len(theirs.assigned) == 2 and not held & theirs.assigned

        _wait_for("the two kinds of member split the four partitions", split)

        def drained() -> bool:
            for records in mine.poll(100).values():
                got_mine.extend(r.value for r in records)
            mine.commit()
            return len(got_mine) + len(theirs.got) >= len(values)

        _wait_for("every record read", drained)
    finally:
        theirs.finish()
        mine.close()
    got = got_mine + theirs.got
    assert len(got) == len(values) and set(got) == values


def test_a_killed_member_is_fenced_after_the_servers_session_and_only_its_partitions_move(node, tmp_path):
    topic, group = new_topic(node, 4), f"g-{uuid.uuid4().hex[:8]}"
    values = produce(node, topic, 400, partitions=4)
    survivor = Member(node, group, topic, "survivor")
    survivor.start()
    out = (tmp_path / "victim.out").open("w")
    victim = subprocess.Popen(
        [sys.executable, "-m", "tests.integ.coordinator.kip848_member", node.kafka_bootstrap, group, topic],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_for(
            "the victim takes half", lambda: len(survivor.assigned) == 2 and "assigned" in _text(tmp_path)
        )
        kept = set(survivor.assigned)
        events = len(survivor.events)
        victim.kill()
        victim.wait(10)
        produce(node, topic, 400, start=400, partitions=4)
        values |= {f"v-{i}".encode() for i in range(400, 800)}
        _wait_for("the survivor gets the victim's partitions", lambda: survivor.assigned == {0, 1, 2, 3})
        later = survivor.events[events:]
        assert [kind for kind, _ in later] == ["assigned"] and later[0][1] == {
            0,
            1,
            2,
            3,
        } - kept  # kept: untouched
        # The victim committed what it read; the survivor reads on from there, to the end.
        _wait_for("every record read", lambda: set(survivor.got) | _victim_read(node, group, topic) >= values)
    finally:
        if victim.poll() is None:
            victim.kill()
        out.close()
        survivor.finish()


def _text(tmp_path) -> str:
    return (tmp_path / "victim.out").read_text()


def _victim_read(node, group: str, topic: str) -> set[bytes]:
    """The records below the group's committed offsets of the partitions the survivor did not read."""
    c = Consumer({"bootstrap.servers": node.kafka_bootstrap, "group.id": group, **KIP848})
    try:
        committed = c.committed([CKTopicPartition(topic, p) for p in range(4)], timeout=20)
    finally:
        c.close()
    return {f"v-{i}".encode() for tp in committed for i in range(tp.partition, 4 * max(tp.offset, 0), 4)}


def test_a_static_member_restarts_without_a_rebalance_and_its_instance_id_is_held(node):
    topic, group = new_topic(node, 4), f"g-{uuid.uuid4().hex[:8]}"
    other = Member(node, group, topic, "other")
    static = Member(node, group, topic, "static", **{"group.instance.id": "static-1"})
    other.start()
    static.start()
    try:
        _wait_for("the two split the partitions", lambda: len(other.assigned) == len(static.assigned) == 2)
        held, events = set(static.assigned), len(other.events)
        # A second member with the same instance id while the first holds it: refused, fatally.
        dup = Consumer(
            {
                "bootstrap.servers": node.kafka_bootstrap,
                "group.id": group,
                "group.instance.id": "static-1",
                **KIP848,
            }
        )
        dup.subscribe([topic])
        try:
            errors = []
            _wait_for("the duplicate is refused", lambda: errors.extend(_errors(dup)) or errors)
            # librdkafka raises UNRELEASED_INSTANCE_ID (111) as its fatal error.
            assert errors[0].code() == KafkaError._FATAL and "instance ID is still used" in errors[0].str()
        finally:
            dup.close()
        static.finish()  # leaves with epoch -2: its partitions wait for it until its session ends
        again = Member(node, group, topic, "static-again", **{"group.instance.id": "static-1"})
        again.start()
        try:
            _wait_for("the restarted member holds its partitions again", lambda: again.assigned == held)
            assert other.events[events:] == [] and other.assigned == {0, 1, 2, 3} - held  # no rebalance
        finally:
            again.finish()
    finally:
        if static.is_alive():
            static.stop.set()
            static.join(30)
        other.finish()


def _errors(c: Consumer) -> list:
    return [m.error() for m in c.consume(num_messages=10, timeout=0.2) if m.error()]


def test_a_regex_subscription_is_resolved_by_the_server_and_follows_new_topics(node):
    prefix, group = f"rx{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:8]}"
    for name in (f"{prefix}-a", f"{prefix}-b", f"other{prefix}"):
        node.store.create_topic(name, 2)
    m = Member(node, group, f"{prefix}-a", "regex", topics=[f"^{prefix}-.*"])
    m.start()
    try:
        want = {(f"{prefix}-{x}", p) for x in "ab" for p in (0, 1)}
        _wait_for("the regex's topics are assigned", lambda: m.held == want)
        node.store.create_topic(f"{prefix}-c", 1)
        _wait_for("a new matching topic is assigned too", lambda: m.held == want | {(f"{prefix}-c", 0)})
    finally:
        m.finish()


# ------------------------------------------------------------------------------ the wire, raw


def _exchange(s: socket.socket, request, response_class, version: int, correlation_id: int = 1):
    request.with_header(correlation_id=correlation_id, client_id="kip848-test")
    s.sendall(bytes(request.encode(version=version, header=True, framed=True)))
    size = struct.unpack(">i", recv_exactly(s, 4))[0]
    return response_class.decode(recv_exactly(s, size), version=version, header=True)


def _metadata(s: socket.socket, names=(), ids=()):
    topics = [MetadataRequest.MetadataRequestTopic(topic_id=None, name=n) for n in names] + [
        MetadataRequest.MetadataRequestTopic(topic_id=i, name=None) for i in ids
    ]
    req = MetadataRequest(
        version=12, topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    return _exchange(s, req, MetadataResponse, 12)


def test_metadata_v12_names_each_topic_by_one_id_asked_by_name_or_by_id(node):
    topic = new_topic(node, 3)
    registration = b'{"version":1,"partitions":{"0":[0]}}'
    node.zk_client.create("/brokers/topics/elsewhere", registration)  # as another tool registers one
    unknown = uuid.uuid4()
    with socket.create_connection(("127.0.0.1", node.kafka_port), timeout=10) as s:
        by_name = {t.name: t for t in _metadata(s, [topic, "elsewhere"]).topics}
        assert by_name[topic].error_code == 0 and by_name[topic].topic_id not in (None, ZERO)
        # Reading metadata writes nothing: the other tool's topic has no id until a member needs one.
        assert by_name["elsewhere"].topic_id is None
        assert node.zk_client.get("/brokers/topics/elsewhere")[0] == registration
        epoch, deadline = 0, time.monotonic() + 30
        while True:  # heartbeat until the node, having read the topic's size, assigns its partition
            s.sendall(
                _heartbeat_frame(
                    group_id="ids",
                    member_id="m-ids",
                    member_epoch=epoch,
                    subscribed_topic_names=["elsewhere"],
                )
            )
            answer = ConsumerGroupHeartbeatResponse.decode(
                recv_exactly(s, struct.unpack(">i", recv_exactly(s, 4))[0]), version=1, header=True
            )
            assert answer.error_code == 0
            epoch = answer.member_epoch
            if answer.assignment is not None and answer.assignment.topic_partitions:
                break
            assert time.monotonic() < deadline, "no assignment"
            time.sleep(answer.heartbeat_interval_ms / 1000)  # the interval the server asks for
        [assigned] = answer.assignment.topic_partitions
        assert assigned.topic_id not in (None, ZERO) and assigned.partitions == [0]
        ids = {topic: by_name[topic].topic_id, "elsewhere": assigned.topic_id}
        assert _metadata(s, ["elsewhere"]).topics[0].topic_id == ids["elsewhere"]
        answer = _metadata(s, ids=[ids[topic], ids["elsewhere"], unknown]).topics
        assert [(t.name, t.topic_id, t.error_code) for t in answer] == [
            (topic, ids[topic], 0),
            ("elsewhere", ids["elsewhere"], 0),
            (None, unknown, 100),  # UNKNOWN_TOPIC_ID, no name
        ]
        assert len(answer[0].partitions) == 3
    # The ids are where Kafka's tools read them, and stay as they are.
    assert ensure_topic_id(node.zk_client, topic) == ids[topic]
    assert json.loads(node.zk_client.get("/brokers/topics/elsewhere")[0])["topic_id"] == kafka_string(
        ids["elsewhere"]
    )


def _heartbeat_frame(**fields) -> bytes:
    req = ConsumerGroupHeartbeatRequest(
        version=1,
        **{
            "group_id": "fuzz",
            "member_id": "m-fuzz",
            "member_epoch": 0,
            "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": ["fuzz-topic"],
            "topic_partitions": [],
            **fields,
        },
    )
    req.with_header(correlation_id=3, client_id="fuzz")
    return bytes(req.encode(version=1, header=True, framed=True))


def test_malformed_flexible_frames_get_an_error_or_a_close_never_a_crash(node):
    rng = random.Random(11)
    good = _heartbeat_frame()
    body_at = 4 + 2 + 2 + 4 + 2 + len("fuzz")  # size, api, version, correlation id, client id
    frames = [
        good[:body_at] + b"\x05" + good[body_at + 1 :],  # header: 5 tagged fields that are not there
        good[:body_at] + b"\x01\x00\x7f" + good[body_at + 1 :],  # header: a tag longer than the frame
        good[: body_at + 1] + b"\x7f" + good[body_at + 2 :],  # a compact string longer than the frame
        good[:-1] + b"\x03\x00\x10",  # the body's last tagged-field section lies about its size
        _heartbeat_frame(
            topic_partitions=[
                ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=uuid.uuid4(), partitions=[0])
            ]
        ),
    ]
    describe = ConsumerGroupDescribeRequest(
        version=0, group_ids=["a", "b"], include_authorized_operations=True
    )
    describe.with_header(correlation_id=4, client_id="fuzz")
    seeds = [good, bytes(describe.encode(version=0, header=True, framed=True))]
    for _ in range(150):  # byte flips, truncations and insertions of well-formed frames
        frame = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(4, len(frame))
            frame[i] = rng.randrange(256)
        if rng.random() < 0.3:
            frame = frame[: rng.randrange(4, len(frame))]
        frame[:4] = struct.pack(">i", len(frame) - 4)
        frames.append(bytes(frame))
    for frame in frames:
        send_and_drain(node.kafka_port, frame)
    assert node.alive
    with socket.create_connection(("127.0.0.1", node.kafka_port), timeout=10) as s:
        # An owned topic id nobody has is dropped; the heartbeat itself is answered (the topic is unknown).
        s.sendall(frames[4])
        size = struct.unpack(">i", recv_exactly(s, 4))[0]
        answer = ConsumerGroupHeartbeatResponse.decode(recv_exactly(s, size), version=1, header=True)
        assert answer.member_id == "m-fuzz" and answer.error_code == 0
