"""An experiment member that is a librdkafka consumer (confluent-kafka) of a node's Kafka listener:
the `kafka-classic` and `kafka-consumer` schemes. `experiments.worker` hands it the run:

    python -m experiments.worker --scheme kafka-classic --bootstrap KAFKA_HOST:PORT --zk .. --data .. \
        --group g --topic t --member m3 --log DIR/m3.jsonl [--gate FILE]

It writes the same processing log as groupshift's members (`experiments/worker.py`), from the
client's own callbacks and calls: `assigned` / `revoked` / `lost` from `on_assign` / `on_revoke` /
`on_lost` (both schemes are incremental: each names the partitions added or taken away), `process`
per partition of every `consume()` batch, `commit_begin` and `commit` around a synchronous commit
after every batch. librdkafka does not deliver records again after a failed commit (its position
stays), and a Kafka commit covers every offset below it: so each commit carries every record the
member processed since its last successful commit of partitions it still holds (the batches of a
failed commit ride on the next one), and a partition revoked or lost drops its uncommitted range
(its next owner reads it again from the committed offset). `gen` is the group generation the
client holds (the member epoch under KIP-848), read from its consumer-group metadata; -1 before it
joined. The records come through the listener's Fetch, from the project's Parquet log. SIGTERM:
`close()` (the client revokes what it holds and leaves the group), no further commit.
"""

from __future__ import annotations

import argparse
import os
import threading
import time

from core.errors import GroupshiftError
from core.extras import require
from core.scheme import Scheme

MAGIC = b"CGMDv2:"  # librdkafka's serialized consumer-group metadata: magic, then the int32 generation


def generation(consumer) -> int:
    """The generation (member epoch) the client holds, from its consumer-group metadata; -1 if none."""
    try:
        md = consumer.consumer_group_metadata()
    except Exception:
        return -1
    if not isinstance(md, bytes) or not md.startswith(MAGIC) or len(md) < len(MAGIC) + 4:
        return -1
    return int.from_bytes(md[len(MAGIC) : len(MAGIC) + 4], "little", signed=True)


def unsupported(scheme: str) -> str | None:
    """Why the nodes' Kafka listener cannot take this scheme's members, or None (it can, or the
    scheme is not a librdkafka one): KIP-848's consumers need ConsumerGroupHeartbeat (api 68)."""
    from coordinator.kafka_wire.codec import VERSIONS
    from coordinator.wire.schema import CONSUMER_GROUP_HEARTBEAT

    if scheme == Scheme.KAFKA_CONSUMER.value and CONSUMER_GROUP_HEARTBEAT not in VERSIONS:
        return "the nodes' Kafka listener does not serve ConsumerGroupHeartbeat (api 68, KIP-848) yet"
    return None


def config(args: argparse.Namespace) -> dict:
    """The consumer's settings: the scheme's group protocol, the run's session (classic only: under
    KIP-848 the session is the coordinator's), manual commits, short fetch waits."""
    scheme = Scheme(args.scheme)
    conf = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.member,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "max.poll.interval.ms": 60_000,
        "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 1000,  # new partitions seen within a second
        "check.crcs": True,
        "log_level": 3,
        **scheme.kafka_config(),
    }
    if conf["group.protocol"] == "classic":
        conf["session.timeout.ms"] = args.session_ms
        conf["heartbeat.interval.ms"] = args.heartbeat_ms
    return conf


def wait_gate(gate: str | None, stop: threading.Event) -> bool:
    """Wait until the file `gate` exists (the driver starts several members at one moment); False
    if told to stop first."""
    while gate and not os.path.exists(gate):
        if stop.wait(0.002):
            return False
    return not stop.is_set()


def run(args: argparse.Namespace, out, stop: threading.Event) -> int:
    """Consume, process and commit until `stop` is set (SIGTERM); `out` is the processing log."""
    ck = require("confluent_kafka", "kafka")
    if not args.bootstrap:
        raise GroupshiftError(f"scheme {args.scheme} needs --bootstrap: the node's Kafka listener")
    consumer = ck.Consumer(config(args))

    pending: dict[str, list] = {}  # partition -> [topic, partition, first, last] not yet committed

    def callback(ev: str):
        def on(c, partitions) -> None:
            names = sorted(f"{tp.topic}-{tp.partition}" for tp in partitions)
            if ev != "assigned":
                for tp in names:
                    pending.pop(tp, None)
            out.emit(ev, partitions=names, gen=generation(c))

        return on

    out.emit("ready")
    if not wait_gate(args.gate, stop):
        consumer.close()
        return 0
    out.emit("join")
    consumer.subscribe(
        [args.topic], on_assign=callback("assigned"), on_revoke=callback("revoked"), on_lost=callback("lost")
    )
    try:
        while not stop.is_set():
            try:
                msgs = consumer.consume(num_messages=args.max_poll_records, timeout=0.1)
            except ck.KafkaException as exc:
                out.emit("poll_error", error=str(exc)[:300])
                continue
            ranges: dict[str, list] = {}
            for msg in msgs:
                if msg.error() is not None:
                    out.emit("poll_error", error=str(msg.error())[:300])
                    continue
                tp = f"{msg.topic()}-{msg.partition()}"
                span = ranges.setdefault(tp, [msg.topic(), msg.partition(), msg.offset(), msg.offset()])
                span[2], span[3] = min(span[2], msg.offset()), max(span[3], msg.offset())
            if not ranges:
                continue
            gen = generation(consumer)
            for tp, (topic, partition, a, b) in ranges.items():
                out.emit("process", tp=tp, first=a, last=b, gen=gen)
                pending.setdefault(tp, [topic, partition, a, b])[3] = b
            if args.process_ms:
                time.sleep(args.process_ms / 1000)
            commit(ck, consumer, out, gen, pending)
    finally:
        consumer.close()
    return 0


def commit(ck, consumer, out, gen: int, pending: dict[str, list]) -> None:
    """Commit every pending range synchronously, logged as `commit_begin` then `commit`; a
    successful commit empties `pending`, a failed one leaves it for the next."""
    batches = [[tp, a, b] for tp, (_, _, a, b) in pending.items()]
    out.emit("commit_begin", gen=gen, batches=batches)  # a kill may cut the result line off
    offsets = [ck.TopicPartition(topic, partition, b + 1) for topic, partition, _, b in pending.values()]
    try:
        done = consumer.commit(offsets=offsets, asynchronous=False)
        failed = [f"{tp.topic}-{tp.partition}: {tp.error}" for tp in done or [] if tp.error]
    except ck.KafkaException as exc:
        failed = [str(exc)]
    if failed:
        out.emit("commit", ok=False, gen=gen, error="; ".join(failed)[:300], batches=batches)
    else:
        pending.clear()
        out.emit("commit", ok=True, gen=gen, offsets={b[0]: b[2] + 1 for b in batches}, batches=batches)
