"""Benchmark of KIP-848's consumer protocol through the Kafka listener, in one run.

Run on demand: `python -m bench.kip848 [--zk HOST:PORT] [--sizes 10,50] [--heartbeat-ms 500]`.
Without `--zk` a ZooKeeper container is started (testing/zookeeper.py). One node runs as a child
process with both listeners (`--listen`, `--kafka-listen`); members and load come from this
process, over loopback. Everything started is stopped on exit, Ctrl-C and SIGTERM.

* one join: N confluent-kafka (librdkafka) consumers, each polling in a thread of its own,
  subscribe to a topic of `--partitions-per-member` x N partitions and settle; then one more
  subscribes. Under `group.protocol=consumer` (the node's scheme-two incremental groups, server
  assignor `uniform`) and under the classic protocol with `cooperative-sticky`, both heartbeating
  every `--heartbeat-ms` (the node's `--group-consumer-heartbeat-interval-ms`; librdkafka's
  `heartbeat.interval.ms`) with a 45 s session (the node's `--group-consumer-session-timeout-ms`;
  librdkafka's `session.timeout.ms`). Measured from the members' own callbacks (on_assign,
  on_revoke, on_lost, timestamped): time to stable, from the joiner's `subscribe` to the last
  assignment change after which every partition has one owner (checked to hold for a quiet
  period); and the longest pause of a kept partition (one its owner had before the join and has
  after it): how long it was revoked before it came back. `--repeat` joins per N and protocol,
  alternating; the median time is compared, the worst pause. Targets: consumer protocol <= 1/2 of
  classic's time to stable; kept-partition pause 0 under the consumer protocol.
* heartbeats: `--members` members in `--groups` incremental groups join with epoch 0 and
  heartbeat until their assignments settle, through each listener (native: groupshift's wire,
  as `IncrementalMember` sends it; Kafka: ConsumerGroupHeartbeat v1 built with the classes of
  `coordinator/kafka_wire/consumer_group_api.py`); then steady heartbeats with their epochs
  (nil subscription and owned partitions: unchanged) from `--connections` connections keeping
  `--window` each in flight for `--seconds` (closed loop, `bench.coordinator`'s load).
  Target: Kafka-listener heartbeats/s >= 50 % of native.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from bench.coordinator import Conn, HeartbeatLoad, measure_heartbeats
from bench.kafka_wire import KafkaConn
from coordinator.kafka_wire import consumer_group_api as K
from coordinator.node.process import NodeProcess
from coordinator.wire import codec as P
from coordinator.wire.schema import ConsumerGroupHeartbeatRequest, ServerAssignedTopic
from core.zk import connect
from experiments.scale import Timeline
from topics.store import TopicStore

STABLE_RATIO_TARGET = 0.5
HEARTBEAT_RATIO_TARGET = 0.5
SESSION_MS = 45_000  # Kafka's group.consumer.session.timeout.ms and librdkafka's session.timeout.ms
KAFKA_CGH_V = 1
PROTOCOLS = {
    "consumer": {"group.protocol": "consumer", "group.remote.assignor": "uniform"},
    "classic": {"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky"},
}


# -- one join: librdkafka members ------------------------------------------------------------------


class RdMember(threading.Thread):
    """A confluent-kafka consumer polling in its own thread; its callbacks go to a `Timeline`
    (partition numbers) and keep `owned` up to date. It subscribes when `go` is set."""

    def __init__(self, bootstrap: str, group: str, topic: str, conf: dict, name: str):
        super().__init__(daemon=True, name=name)
        self.conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "log_level": 0,
            **conf,
        }
        self.topic = topic
        self.timeline = Timeline()
        self.owned: set[int] = set()
        self.lost = 0
        self.subscribed_at: float | None = None
        self.ready, self.go, self.stop = threading.Event(), threading.Event(), threading.Event()
        self.error: BaseException | None = None

    def _assigned(self, consumer, tps) -> None:
        got = frozenset(tp.partition for tp in tps)
        self.owned |= got
        self.timeline.on_partitions_assigned(got)

    def _revoked(self, consumer, tps) -> None:
        gone = frozenset(tp.partition for tp in tps)
        self.owned -= gone
        self.timeline.on_partitions_revoked(gone)

    def _lost(self, consumer, tps) -> None:
        self.lost += 1
        self._revoked(consumer, tps)

    def run(self) -> None:
        from confluent_kafka import Consumer

        try:
            c = Consumer(self.conf)
        except BaseException as exc:
            self.error = exc
            self.ready.set()
            return
        try:
            self.ready.set()
            while not self.go.wait(0.1):
                if self.stop.is_set():
                    return
            self.subscribed_at = time.monotonic()
            c.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)
            while not self.stop.is_set():
                c.consume(num_messages=100, timeout=0.2)  # the callbacks run in here
        except BaseException as exc:  # reported by the benchmark
            self.error = exc
        finally:
            c.close()

    def changes(self, since: float) -> list[float]:
        return [t for t, _, tps in list(self.timeline.events) if t >= since and tps]


def _covered(members: list[RdMember], partitions: int) -> bool:
    owned = [set(m.owned) for m in members]
    return sum(len(o) for o in owned) == partitions and len(set().union(*owned)) == partitions


def _settle(members: list[RdMember], partitions: int, since: float, quiet: float, timeout: float):
    """Wait until every partition has one owner and no assignment changed for `quiet` seconds;
    the time of the last change (None on timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        failed = [m for m in members if m.error is not None]
        if failed:
            raise SystemExit(f"member {failed[0].name} failed: {failed[0].error}")
        last = max((t for m in members for t in m.changes(since)), default=since)
        if _covered(members, partitions) and time.monotonic() - last >= quiet:
            return last
        time.sleep(0.02)
    return None


def one_join(node: NodeProcess, store: TopicStore, protocol: str, n: int, args) -> dict:
    partitions = args.partitions_per_member * n
    topic, group = f"k848-{n}-{uuid.uuid4().hex[:6]}", f"{protocol}-{n}-{uuid.uuid4().hex[:6]}"
    store.create_topic(topic, partitions)
    conf = dict(PROTOCOLS[protocol])
    if protocol == "classic":
        conf |= {"heartbeat.interval.ms": args.heartbeat_ms, "session.timeout.ms": SESSION_MS}
    members = [RdMember(node.kafka_bootstrap, group, topic, conf, f"{protocol}-{i}") for i in range(n + 1)]
    old, joiner = members[:n], members[n]
    quiet = max(1.0, 4 * args.heartbeat_ms / 1000)
    try:
        for m in members:
            m.start()
        for m in members:
            m.ready.wait(30)
        t_form = time.monotonic()
        for m in old:
            m.go.set()
        if _settle(old, partitions, t_form, quiet, args.timeout) is None:
            return {"error": f"{n} members did not settle in {args.timeout:g} s"}
        before = [set(m.owned) for m in old]
        joiner.go.set()
        while joiner.subscribed_at is None and joiner.error is None:
            time.sleep(0.001)
        t0 = joiner.subscribed_at or time.monotonic()
        done = _settle(members, partitions, t0, quiet, args.timeout)
        if done is None or not joiner.owned:
            return {"error": f"no stable group within {args.timeout:g} s of the join"}
        pause = max(
            m.timeline.kept_pause(t0, was & m.owned, done) for m, was in zip(old, before, strict=True)
        )
        return {
            "members": n,
            "partitions": partitions,
            "time_to_stable_ms": round(1000 * (done - t0), 1),
            "kept_pause_ms": round(1000 * pause, 1),
            "moved": sum(len(was - m.owned) for m, was in zip(old, before, strict=True)),
            "revocations": sum(
                1 for m in old for t, k, tps in m.timeline.events if t >= t0 and k == "revoked" and tps
            ),
            "lost": sum(m.lost for m in members),
        }
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(30)


# -- heartbeats: native wire against the Kafka listener ----------------------------------------------


class NativeHeartbeatLoad(HeartbeatLoad):
    """`HeartbeatLoad` for ConsumerGroupHeartbeat answers: their body does not end with the error code."""

    OK = b"\xaaerror_code\x00"  # msgpack: the key, then 0

    @classmethod
    def error_of(cls, payload: bytes) -> int:
        return 0 if cls.OK in payload else P.decode_response(payload)[1]["error_code"]


class KafkaCghLoad(HeartbeatLoad):
    """`HeartbeatLoad` for ConsumerGroupHeartbeat v1 answers: the error code follows the correlation
    id, the header's tagged fields (one byte: none) and throttle_time_ms."""

    @staticmethod
    def error_of(payload: bytes) -> int:
        return int.from_bytes(payload[9:11], "big", signed=True)


class _Side:
    """One listener's members: `beat` joins and heartbeats one, `steady` is a steady heartbeat's frame."""

    name, conn_class, load = "", Conn, HeartbeatLoad

    def __init__(self, host: str, port: int, topic: str, partitions: int):
        self.host, self.port, self.topic, self.partitions = host, port, topic, partitions

    async def open(self, i: int):
        return await self.conn_class.open(self.host, self.port, f"k848-{self.name}-{i}")


class NativeSide(_Side):
    """ConsumerGroupHeartbeat on groupshift's wire, as `IncrementalMember` sends it."""

    name, conn_class, load = "native", Conn, NativeHeartbeatLoad

    @staticmethod
    def _body(group: str, mid: str, epoch: int, topics, owned) -> ConsumerGroupHeartbeatRequest:
        return ConsumerGroupHeartbeatRequest(
            group_id=group,
            member_id=mid,
            member_epoch=epoch,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=SESSION_MS,
            subscribed_topic_names=topics,
            topic_partitions=owned,
        )

    async def beat(self, conn: Conn, group: str, mid: str, epoch: int, owned):
        """(error code, epoch, the assignment as owned partitions to send back, and comparable)."""
        body = self._body(group, mid, epoch, [self.topic] if epoch == 0 else None, owned)
        r = await conn.request(P.CONSUMER_GROUP_HEARTBEAT, body)
        got = [ServerAssignedTopic(t["topic"], sorted(t["partitions"])) for t in r.get("assignment") or []]
        return r["error_code"], r["member_epoch"], got, sorted((t.topic, t.partitions) for t in got)

    def steady(self, group: str, mid: str, epoch: int, i: int) -> bytes:
        return P.encode_request(
            P.CONSUMER_GROUP_HEARTBEAT, i, self._body(group, mid, epoch, None, None), "k848"
        )


class KafkaSide(_Side):
    """ConsumerGroupHeartbeat v1 through the Kafka listener: the Kafka schemas' classes, raw sockets."""

    name, conn_class, load = "kafka", KafkaConn, KafkaCghLoad

    @staticmethod
    def _request(group: str, mid: str, epoch: int, topics, owned) -> K.ConsumerGroupHeartbeatRequest:
        return K.ConsumerGroupHeartbeatRequest(
            version=KAFKA_CGH_V,
            group_id=group,
            member_id=mid,
            member_epoch=epoch,
            rebalance_timeout_ms=SESSION_MS if epoch == 0 else -1,
            subscribed_topic_names=topics,
            topic_partitions=owned,
        )

    async def beat(self, conn: KafkaConn, group: str, mid: str, epoch: int, owned):
        req = self._request(group, mid, epoch, [self.topic] if epoch == 0 else None, owned)
        conn.ids += 1
        req.with_header(correlation_id=conn.ids, client_id=conn.client_id)
        conn.writer.write(bytes(req.encode(version=KAFKA_CGH_V, header=True, framed=True)))
        size = int.from_bytes(await conn.reader.readexactly(4), "big")
        r = K.ConsumerGroupHeartbeatResponse.decode(
            await conn.reader.readexactly(size), version=KAFKA_CGH_V, header=True
        )
        one = K.ConsumerGroupHeartbeatRequest.TopicPartitions
        got = [
            one(topic_id=t.topic_id, partitions=sorted(t.partitions))
            for t in (r.assignment.topic_partitions if r.assignment else [])
        ]
        return r.error_code, r.member_epoch, got, sorted((str(t.topic_id), t.partitions) for t in got)

    def steady(self, group: str, mid: str, epoch: int, i: int) -> bytes:
        req = self._request(group, mid, epoch, None, None)
        req.with_header(correlation_id=i, client_id="k848")
        return bytes(req.encode(version=KAFKA_CGH_V, header=True, framed=True))


async def form_incremental(side, group: str, n: int, partitions: int) -> list[tuple[str, int]]:
    """n members join `group` (epoch 0) and heartbeat, owning what they were given, until no answer
    changes and the topic's `partitions` are all owned; returns [(member id, epoch)]."""
    conns = [await side.open(i) for i in range(n)]
    state: dict[str, tuple[int, list, list]] = {}
    try:
        for c in conns:
            mid = str(uuid.uuid4())
            code, epoch, got, key = await side.beat(c, group, mid, 0, [])
            assert code == 0, (side.name, code)
            state[mid] = (epoch, got, key)
        for _ in range(100):
            changed = False
            for c, (mid, (epoch, owned, was)) in zip(conns, list(state.items()), strict=True):
                code, new_epoch, got, key = await side.beat(c, group, mid, epoch, owned)
                assert code == 0, (side.name, code)
                changed |= (new_epoch, key) != (epoch, was)
                state[mid] = (new_epoch, got, key)
            if not changed and sum(len(p) for _, _, key in state.values() for _, p in key) == partitions:
                break
            if not changed:
                await asyncio.sleep(0.05)  # the node has not read the topic's size yet
        else:
            raise SystemExit(f"{side.name}: group {group} did not settle")
    finally:
        for c in conns:
            c.close()
    return [(mid, epoch) for mid, (epoch, _, _) in state.items()]


async def heartbeats(sides, args) -> dict:
    """Form each side's groups, then measure them in `--rounds` alternating closed-loop runs (the
    machine's other load shifts less between a pair); per side, the run of median throughput."""
    per_group = max(1, args.members // args.groups)
    formed_by, out = {}, {}
    for side in sides:
        prefix = f"{side.name[0]}cgh-{uuid.uuid4().hex[:6]}"
        sem = asyncio.Semaphore(16)
        t0 = time.monotonic()

        async def one(g: int, side=side, prefix=prefix, sem=sem):
            async with sem:
                name = f"{prefix}-{g}"
                return name, await form_incremental(side, name, per_group, side.partitions)

        formed = await asyncio.gather(*(one(g) for g in range(args.groups)))
        formed_by[side.name] = [side.steady(g, m, e, i) for g, ms in formed for i, (m, e) in enumerate(ms)]
        out[side.name] = {"members": len(formed_by[side.name]), "setup_s": round(time.monotonic() - t0, 2)}
    runs: dict[str, list] = {side.name: [] for side in sides}
    shape = (args.connections, args.window, 0.0, args.seconds)
    for _ in range(args.rounds):
        for side in sides:
            frames = formed_by[side.name]
            runs[side.name].append(await measure_heartbeats(side.host, side.port, frames, *shape, side.load))
    for side in sides:
        got = sorted(runs[side.name], key=lambda r: r["heartbeats_per_s"])
        out[side.name] |= got[len(got) // 2] | {"runs": [r["heartbeats_per_s"] for r in runs[side.name]]}
    return out


# -- main ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zk", default=None, help="ZooKeeper connect string (default: start a container)")
    ap.add_argument("--sizes", default="10,50", help="comma-separated member counts N")
    ap.add_argument("--partitions-per-member", type=int, default=2)
    ap.add_argument("--heartbeat-ms", type=int, default=500, help="both protocols' heartbeat interval")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--members", type=int, default=1000, help="heartbeats: members")
    ap.add_argument("--groups", type=int, default=100, help="heartbeats: groups")
    ap.add_argument("--connections", type=int, default=20)
    ap.add_argument("--window", type=int, default=4, help="heartbeats in flight per connection")
    ap.add_argument("--seconds", type=float, default=5.0, help="heartbeats: length of one closed-loop run")
    ap.add_argument("--rounds", type=int, default=3, help="heartbeats: alternating runs per listener")
    ap.add_argument("--repeat", type=int, default=3, help="joins measured per N and protocol (median)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupted)
    server = node = client = None
    data = Path(tempfile.mkdtemp(prefix="groupshift-k848-"))
    try:
        zk = args.zk
        if zk is None:
            from testing.zookeeper import ZkServer

            server = ZkServer.start_single()
            zk = server.connect_string
        zk = f"{zk}/bench-kip848-{uuid.uuid4().hex[:8]}"
        node = NodeProcess.start(
            zk,
            1,
            "--kafka-listen",
            "127.0.0.1:0",
            "--data",
            str(data),
            "--group-initial-rebalance-delay-ms",
            "0",
            "--group-consumer-heartbeat-interval-ms",
            str(args.heartbeat_ms),
            "--group-consumer-session-timeout-ms",
            str(SESSION_MS),
            "--log-level",
            "warning",
            "--max-connections",
            "20000",
            log_path=Path(tempfile.gettempdir()) / f"bench-kip848-{uuid.uuid4().hex[:6]}.log",
        )
        client = connect(zk, session_timeout=10.0)
        results = _run(args, node, TopicStore(data, client))
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
        return 0 if results["met"] else 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up is not interrupted again
        if client is not None:
            client.stop()
            client.close()
        if node is not None:
            node.stop()
        if server is not None:
            server.remove()
        import shutil

        shutil.rmtree(data, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)


def _median(runs: list[dict]) -> dict:
    """The run of median time to stable, with every run's time and the worst pause of all runs."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    ok = sorted(runs, key=lambda r: r["time_to_stable_ms"])
    mid = dict(ok[len(ok) // 2])
    mid["runs_ms"] = [round(r["time_to_stable_ms"]) for r in runs]
    mid["kept_pause_ms"] = max(r["kept_pause_ms"] for r in runs)
    mid["lost"] = sum(r["lost"] for r in runs)
    return mid


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _run(args, node: NodeProcess, store: TopicStore) -> dict:
    sizes = [int(s) for s in args.sizes.split(",") if s]
    hb = args.heartbeat_ms
    print("KIP-848 benchmark: one node, librdkafka (confluent-kafka) members on its Kafka listener")
    print(
        f"  consumer protocol: group.protocol=consumer, group.remote.assignor=uniform; node "
        f"--group-consumer-heartbeat-interval-ms {hb} --group-consumer-session-timeout-ms {SESSION_MS}"
    )
    print(
        f"  classic protocol: partition.assignment.strategy=cooperative-sticky, heartbeat.interval.ms={hb}, "
        f"session.timeout.ms={SESSION_MS}",
        flush=True,
    )
    joins: dict[str, dict] = {}
    for n in sizes:
        tries: dict[str, list] = {p: [] for p in PROTOCOLS}
        for _ in range(args.repeat):  # alternating, so that both see the same background load
            for p in PROTOCOLS:
                tries[p].append(one_join(node, store, p, n, args))
        row = joins[str(n)] = {p: _median(got) for p, got in tries.items()}
        for p, r in row.items():
            if "error" in r:
                print(f"  N={n} {p}: {r['error']}", flush=True)
                continue
            print(
                f"  N={n} {p:<8} ({r['partitions']} partitions): time to stable after one join "
                f"{r['time_to_stable_ms']:.0f} ms (median of {r['runs_ms']}), longest kept-partition pause "
                f"{r['kept_pause_ms']:.0f} ms, "
                f"{r['moved']} moved, {r['revocations']} revocations, {r['lost']} lost",
                flush=True,
            )
    print(
        f"heartbeats: {args.members} members in {args.groups} groups, closed loop, "
        f"{args.connections} connections x {args.window} in flight, {args.rounds} alternating runs of "
        f"{args.seconds:g} s per listener",
        flush=True,
    )
    topic = f"k848-hb-{uuid.uuid4().hex[:6]}"
    partitions = 2 * max(1, args.members // args.groups)
    store.create_topic(topic, partitions)
    sides = (
        NativeSide(node.host, node.port, topic, partitions),
        KafkaSide(node.host, node.kafka_port, topic, partitions),
    )
    beats = asyncio.run(heartbeats(sides, args))
    for name, r in beats.items():
        print(
            f"  {name:<6} listener: {r['heartbeats_per_s']:,} heartbeats/s (median of {r['runs']})  "
            f"p50 {r['p50_ms']} ms  p99 {r['p99_ms']} ms  errors {r['errors']}  "
            f"(groups formed in {r['setup_s']} s)",
            flush=True,
        )
    checks = []
    for n in sizes:
        c, k = joins[str(n)]["consumer"], joins[str(n)]["classic"]
        ok = "error" not in c and "error" not in k
        ratio = c["time_to_stable_ms"] / k["time_to_stable_ms"] if ok else None
        shown = f"{ratio:.2f}" if ratio is not None else "-"
        checks.append(
            (
                f"N={n}: consumer / classic time to stable {shown} (target <= {STABLE_RATIO_TARGET:g})",
                ratio is not None and ratio <= STABLE_RATIO_TARGET,
            )
        )
        checks.append(
            (
                f"N={n}: consumer protocol's longest kept-partition pause {c.get('kept_pause_ms', '-')} ms "
                f"(target 0; classic {k.get('kept_pause_ms', '-')} ms)",
                ok and c["kept_pause_ms"] == 0,
            )
        )
    ratio = beats["kafka"]["heartbeats_per_s"] / max(1, beats["native"]["heartbeats_per_s"])
    checks.append(
        (
            f"Kafka / native ConsumerGroupHeartbeat heartbeats/s {ratio:.0%} (target >= "
            f"{HEARTBEAT_RATIO_TARGET:.0%})",
            ratio >= HEARTBEAT_RATIO_TARGET,
        )
    )
    for text, ok in checks:
        print(f"{text}: {_verdict(ok)}")
    met = all(ok for _, ok in checks)
    print(f"targets: {_verdict(met)}")
    return {
        "heartbeat_ms": hb,
        "joins": joins,
        "heartbeats": beats,
        "heartbeat_ratio": round(ratio, 3),
        "met": met,
    }


if __name__ == "__main__":
    sys.exit(main())
