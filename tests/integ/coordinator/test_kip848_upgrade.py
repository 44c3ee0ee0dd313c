"""The online upgrade and downgrade of a consumer group with real clients (docs/scheme-two.md,
"Online upgrade and downgrade"): a classic group of kafka-python and librdkafka members becomes a
consumer-protocol group as its members restart one by one with `group.protocol=consumer`, and
turns classic again when the consumer-protocol members leave — while they consume, every record
committed once, no partition ever with two owners.

One node process with a Kafka listener (short consumer-protocol session and heartbeat interval),
a fresh ZooKeeper chroot and a private log root.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KPTopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.structs import OffsetAndMetadata

from coordinator.layout import decode_group, group_path
from tests.kafka_helpers import KAFKA_PYTHON_POLL_MS, kafka_node, new_topic, produce

PARTITIONS = set(range(4))


@pytest.fixture
def node(zk_connect, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    flags = ("--group-consumer-session-timeout-ms", "6000", "--group-consumer-heartbeat-interval-ms", "300")
    with kafka_node(zk_connect, data, tmp_path / "node-1.log", *flags) as proc:
        yield proc


def _wait_for(what: str, condition, timeout: float = 40.0, check=None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if check is not None:
            check()
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


class Member(threading.Thread):
    """A consumer polling in its own thread: it commits what it read after every batch and, in its
    revoke callback, before it gives a partition up; `assigned` is what it may read now."""

    def __init__(self, node, group: str, topic: str, name: str):
        super().__init__(daemon=True, name=name)
        self.node, self.group, self.topic = node, group, topic
        self.got: list[bytes] = []
        self.positions: dict[int, int] = {}
        self.assigned: set[int] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.consume()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def finish(self) -> None:
        self.stop.set()
        self.join(30)
        assert not self.is_alive() and self.error is None, (self.name, self.error)


class Librdkafka(Member):
    """confluent-kafka: classic (eager `range,roundrobin`, as librdkafka's default, or
    `cooperative=True`: cooperative-sticky) or, with `consumer=True`, KIP-848's consumer protocol."""

    def __init__(self, *args, consumer: bool = False, cooperative: bool = False):
        super().__init__(*args)
        self.conf = {
            "bootstrap.servers": self.node.kafka_bootstrap,
            "group.id": self.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "check.crcs": True,
        }
        if consumer:
            self.conf["group.protocol"] = "consumer"
        else:
            self.conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 200})
            if cooperative:
                self.conf["partition.assignment.strategy"] = "cooperative-sticky"

    def _commit(self, c: Consumer, partitions) -> None:
        offsets = [
            CKTopicPartition(self.topic, p, self.positions[p]) for p in partitions if p in self.positions
        ]
        if offsets:
            c.commit(offsets=offsets, asynchronous=False)

    def consume(self) -> None:
        c = Consumer(self.conf)

        def assign(consumer, tps):
            self.assigned |= {tp.partition for tp in tps}

        def revoke(consumer, tps):
            gone = {tp.partition for tp in tps}
            self._commit(consumer, gone)
            self.assigned -= gone

        def lost(consumer, tps):
            self.assigned -= {tp.partition for tp in tps}

        try:
            c.subscribe([self.topic], on_assign=assign, on_revoke=revoke, on_lost=lost)
            while not self.stop.is_set():
                read = set()
                for m in c.consume(num_messages=200, timeout=0.1):
                    if m.error():
                        raise KafkaException(m.error())
                    if m.partition() in self.assigned:  # else fetched before a revocation
                        self.got.append(m.value())
                        self.positions[m.partition()] = m.offset() + 1
                        read.add(m.partition())
                self._commit(c, read)
        finally:
            c.close()  # revokes (committing) and leaves


class KafkaPython(Member):
    """kafka-python 3.0.12, classic only (eager range, which revokes everything before rejoining,
    or `cooperative=True`: cooperative-sticky); it commits each batch once read, so nothing it
    read is uncommitted when it gives partitions up."""

    def __init__(self, *args, cooperative: bool = False):
        super().__init__(*args)
        self.assignors = [CooperativeStickyAssignor] if cooperative else [RangePartitionAssignor]

    def consume(self) -> None:
        c = KafkaConsumer(
            partition_assignment_strategy=self.assignors,
            bootstrap_servers=self.node.kafka_bootstrap,
            group_id=self.group,
            client_id=self.name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
            fetch_max_wait_ms=100,
        )
        member = self

        def commit(partitions) -> None:
            offsets = {
                KPTopicPartition(member.topic, p): OffsetAndMetadata(member.positions[p], "", -1)
                for p in partitions
                if p in member.positions
            }
            if offsets:
                c.commit(offsets)

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                # Called inside poll(), after the last batch was committed (the loop commits each
                # batch): nothing read is uncommitted here. (A blocking commit in a synchronous
                # listener is refused by kafka-python 3.)
                member.assigned -= {tp.partition for tp in revoked}

            def on_partitions_assigned(self, assigned):
                member.assigned |= {tp.partition for tp in assigned}

        try:
            c.subscribe([self.topic], listener=Listener())
            while not self.stop.is_set():
                read = set()
                for tp, records in c.poll(timeout_ms=KAFKA_PYTHON_POLL_MS).items():
                    if tp.partition not in self.assigned:
                        continue
                    for r in records:
                        self.got.append(r.value)
                        self.positions[tp.partition] = r.offset + 1
                    read.add(tp.partition)
                commit(read)
            commit(self.assigned)
        finally:
            self.assigned = set()  # it reads no more: what it held is committed
            c.close()  # LeaveGroup


class Owners(threading.Thread):
    """Samples every member's partitions until stopped; `overlaps` is any moment two held one."""

    def __init__(self):
        super().__init__(daemon=True)
        self.members: list[Member] = []
        self.overlaps: list[dict] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            seen: dict[int, list[str]] = {}
            for m in list(self.members):
                for p in set(m.assigned):
                    seen.setdefault(p, []).append(m.name)
            if any(len(v) > 1 for v in seen.values()):
                self.overlaps.append(seen)
            time.sleep(0.005)


def _protocol_type(node, group: str) -> str | None:
    data, _ = node.zk_client.get(group_path(group))
    record = decode_group(data)
    return record.protocol_type if record is not None else None


@pytest.mark.parametrize("cooperative", [False, True], ids=["eager", "cooperative-sticky"])
def test_a_classic_group_upgrades_while_consuming_and_downgrades_back(node, cooperative):
    topic, group = new_topic(node, 4), f"g-{uuid.uuid4().hex[:8]}"
    values = produce(node, topic, 400, partitions=4)
    owners = Owners()
    owners.start()
    live: list[Member] = []
    everyone: list[Member] = []

    def start(member: Member) -> Member:
        live.append(member)
        everyone.append(member)
        owners.members.append(member)
        member.start()
        return member

    def stop(member: Member) -> None:
        live.remove(member)
        member.finish()

    def healthy() -> None:
        for m in live:
            assert m.error is None, (m.name, m.error)

    def spread(*members: Member) -> bool:
        held = [m.assigned for m in members]
        return set().union(*held) == PARTITIONS and all(held) and sum(map(len, held)) == 4

    def produced(n: int, start_at: int) -> None:
        values.update(produce(node, topic, n, start=start_at, partitions=4))

    try:
        # A classic group: kafka-python and librdkafka (classic) share the topic.
        kp1 = start(KafkaPython(node, group, topic, "kp1", cooperative=cooperative))
        ck1 = start(Librdkafka(node, group, topic, "ck1", cooperative=cooperative))
        _wait_for("the classic group splits the partitions", lambda: spread(kp1, ck1), check=healthy)
        assert _protocol_type(node, group) == "consumer"
        # ck1 restarts with group.protocol=consumer: the group upgrades, kp1 stays a classic member.
        stop(ck1)
        ck2 = start(Librdkafka(node, group, topic, "ck2", consumer=True))
        _wait_for("upgraded: kp1 and ck2 share the partitions", lambda: spread(kp1, ck2), check=healthy)
        assert _protocol_type(node, group) == "consumer-incremental"
        produced(400, 400)
        # kp1 (kafka-python has no consumer protocol) is replaced by a consumer-protocol member.
        stop(kp1)
        ck3 = start(Librdkafka(node, group, topic, "ck3", consumer=True))
        _wait_for("consumer-protocol members only", lambda: spread(ck2, ck3), check=healthy)
        # A classic member joins the consumer group; then the consumer-protocol members leave.
        kp2 = start(KafkaPython(node, group, topic, "kp2", cooperative=cooperative))
        _wait_for("kp2 joins the consumer group", lambda: spread(ck2, ck3, kp2), check=healthy)
        stop(ck2)
        stop(ck3)
        _wait_for("downgraded: kp2 holds everything", lambda: kp2.assigned == PARTITIONS, check=healthy)
        assert _protocol_type(node, group) == "consumer"
        produced(400, 800)
        _wait_for(
            "every record read",
            lambda: sum(len(m.got) for m in everyone) >= len(values),
            check=healthy,
        )
        stop(kp2)
    finally:
        for m in list(live):
            m.stop.set()
        owners.stop.set()
        owners.join(5)
    assert owners.overlaps == []  # never two owners
    got = [v for m in everyone for v in m.got]
    assert len(got) == len(values) and set(got) == values  # each record exactly once
    c = Consumer({"bootstrap.servers": node.kafka_bootstrap, "group.id": group})
    try:
        committed = c.committed([CKTopicPartition(topic, p) for p in PARTITIONS], timeout=20)
    finally:
        c.close()
    assert {tp.partition: tp.offset for tp in committed} == dict.fromkeys(PARTITIONS, 300)
