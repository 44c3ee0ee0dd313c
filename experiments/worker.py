"""One experiment member as its own process: a `pipeline.Consumer` of one scheme that processes
and commits, writing a processing log the analysis reads (for `kafka-classic` and `kafka-consumer`,
a librdkafka consumer of the node's Kafka listener instead: `experiments/kafka_worker.py`).

    python -m experiments.worker --scheme three-eager --zk HOST:PORT/chroot --data DIR \
        --group g --topic t --member m3 --log DIR/m3.jsonl [--bootstrap HOST:PORT] [--session-ms 3000]

It polls, "processes" each batch (`--process-ms` of work per batch), and commits after every poll
that returned records; SIGTERM makes it leave cleanly (close without a further commit). Every line
of `--log` is one JSON event with the system-wide monotonic time `t` (processes on one machine share
the clock, so logs merge by `t`):

    {"ev": "start", "scheme": .., "pid": ..}
    {"ev": "ready"}, {"ev": "join"}          # librdkafka members: imported; subscribing (after --gate)
    {"ev": "assigned" | "revoked" | "lost", "partitions": ["t-0", ..], "gen": g}
    {"ev": "process", "tp": "t-0", "first": a, "last": b, "gen": g}      # offsets a..b inclusive
    {"ev": "commit_begin", "gen": g, "batches": [["t-0", a, b], ..]}     # then one of:
    {"ev": "commit", "ok": true, "gen": g, "offsets": {"t-0": n}, "batches": [["t-0", a, b], ..]}
    {"ev": "commit", "ok": false, "gen": g, "error": "..", "batches": [..]}  # fenced: not an output
    {"ev": "stop"}

A batch is a *committed output* when the commit that follows it succeeded (`Consumer.commit()`
commits every record `poll()` returned since the previous commit, or nothing). A member killed
between `commit_begin` and its result leaves the outcome in doubt; the analysis settles it from
where the partition's next owner started.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from core.scheme import Scheme

SCHEMES = Scheme.names()
#: What a run compares unless told otherwise (the librdkafka schemes are asked for by name).
DEFAULT_SCHEMES = tuple(s.value for s in Scheme.defaults())
#: Scheme one with `sync_before_read` (the follower-partition scenario): a run and a report column of
#: its own, but scheme one's members.
ONE_SYNC = "one-sync"


def scheme_of(run: str) -> Scheme | None:
    """The scheme of the run named `run`: a scheme's name, or `ONE_SYNC` (None for any other name)."""
    if run == ONE_SYNC:
        return Scheme.ONE
    return Scheme(run) if run in SCHEMES else None


def tp_name(tp) -> str:
    return f"{tp.topic}-{tp.partition}"


class ProcessingLog:
    """Line-buffered JSONL: every line reaches the OS as it is written, so a SIGKILL loses none."""

    def __init__(self, path: str, member: str):
        self.member = member
        self._file = open(path, "a", buffering=1, encoding="utf-8")
        self._lock = threading.Lock()

    def emit(self, ev: str, **fields) -> None:
        rec = {"t": time.monotonic(), "wall": time.time(), "member": self.member, "ev": ev, **fields}
        with self._lock:
            self._file.write(json.dumps(rec, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()


class Listener:
    def __init__(self, out: ProcessingLog):
        self.out, self.consumer = out, None

    def _emit(self, ev: str, partitions) -> None:
        gen = self.consumer.generation if self.consumer is not None else -1
        self.out.emit(ev, partitions=sorted(tp_name(tp) for tp in partitions), gen=gen)

    def on_partitions_revoked(self, partitions) -> None:
        self._emit("revoked", partitions)

    def on_partitions_assigned(self, partitions) -> None:
        self._emit("assigned", partitions)

    def on_partitions_lost(self, partitions) -> None:
        self._emit("lost", partitions)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.worker")
    p.add_argument("--scheme", choices=SCHEMES, required=True)
    p.add_argument("--zk", required=True)
    p.add_argument("--bootstrap")
    p.add_argument("--data", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--member", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--session-ms", type=int, default=3000)
    p.add_argument("--heartbeat-ms", type=int, default=300)
    p.add_argument("--process-ms", type=float, default=5.0)
    p.add_argument("--max-poll-records", type=int, default=200)
    p.add_argument("--zk-options", default="{}", help="scheme one's ZkGroupMember options, as JSON")
    p.add_argument("--gate", help="librdkafka members: subscribe once this file exists")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from core.lifeline import watch_parent

    out = ProcessingLog(args.log, args.member)
    out.emit("start", scheme=args.scheme, pid=os.getpid())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    watch_parent()  # the run's driver was killed: stop as on SIGTERM
    if Scheme(args.scheme).kafka:
        from experiments.kafka_worker import run

        try:
            return run(args, out, stop)
        finally:
            out.emit("stop")
            out.close()
    from core.errors import CommitFailed, GroupshiftError
    from pipeline.consumer import Consumer

    listener = Listener(out)
    options = Scheme(args.scheme).consumer_options()
    membership = {}
    if Scheme(args.scheme) is Scheme.ONE:
        membership = {
            "consumer_id": args.member,
            "event_log": str(Path(args.log).with_suffix(".zk.jsonl")),
            **json.loads(args.zk_options),
        }
    consumer = Consumer(
        args.group,
        [args.topic],
        zk=args.zk,
        log_root=args.data,
        bootstrap=args.bootstrap,
        listener=listener,
        client_id=args.member,
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=args.heartbeat_ms,
        max_poll_records=args.max_poll_records,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        coordinator_timeout_ms=120_000,
        membership_options=membership,
        **options,
    )
    listener.consumer = consumer
    try:
        while not stop.is_set():
            try:
                got = consumer.poll_batches(timeout_ms=100)
            except GroupshiftError as exc:  # e.g. the coordinator is away for a while: poll again
                out.emit("poll_error", error=str(exc)[:300])
                time.sleep(0.2)
                continue
            if not got:
                continue
            gen = consumer.generation
            batches = []
            for tp, batch in got.items():
                offsets = batch.column("offset")
                first, last = offsets[0].as_py(), offsets[-1].as_py()
                batches.append([tp_name(tp), first, last])
                out.emit("process", tp=tp_name(tp), first=first, last=last, gen=gen)
            if args.process_ms:
                time.sleep(args.process_ms / 1000)
            out.emit("commit_begin", gen=gen, batches=batches)  # a kill may cut the result line off
            try:
                consumer.commit()
            except CommitFailed as exc:
                out.emit("commit", ok=False, gen=gen, error=str(exc)[:300], batches=batches)
            except GroupshiftError as exc:
                out.emit("commit", ok=False, gen=gen, error=str(exc)[:300], batches=batches)
            else:
                offsets = {b[0]: b[2] + 1 for b in batches}
                out.emit("commit", ok=True, gen=gen, offsets=offsets, batches=batches)
    finally:
        try:
            consumer.close(autocommit=False)
        finally:
            out.emit("stop")
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
