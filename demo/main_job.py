"""The main job (`groupshift demo`): Spark consumers migrated live from scheme one to scheme three.

In a namespace of its own (`demo.namespace.DemoNamespace`: a ZooKeeper chroot and a log
directory, both deleted at the end) the job creates a topic and produces records into it while it
runs, and consumes it with Spark streaming queries (the `groupshift` source into the exactly-once
writer, `pipeline.spark.query.StreamJob`: one Spark session, one query — and one stream-reader
process, the group member — each) in one group, in phases:

1. **scheme one**: two consumers under Kafka 0.8's ZooKeeper rebalancing;
2. **join**: a third one joins (a rebalance during consumption);
3. **bridge**: `migrate run --mode live` bridges the group, and the three legacy consumers are
   replaced one by one by coordinator consumers, which join through the bridge;
4. **scheme three**: the migration finishes once no legacy consumer is left, and the group goes
   on as an ordinary coordinator group; the producer stops and the consumers drain the topic.

Then it checks the output — every record exactly once, no gap — and reports per phase the time
until the group was stable (every partition owned once) and the records/s committed, and draws a
PNG timeline of how many partitions each member owned across the phases.

    result = run_main_job("127.0.0.1:2181", phase_s=8)
    print(format_summary(result))
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from coordinator.node.process import CoordinatorNodes
from core.errors import GroupshiftError
from core.scheme import Rebalancer
from core.types import TopicPartition
from core.zk import connect
from demo.namespace import DemoNamespace
from migrate.migration import live
from pipeline.consumer import Consumer
from pipeline.spark import spark_session
from pipeline.spark.output import outputs
from pipeline.spark.query import StreamJob
from topics.store import TopicStore

# At the end (and on failure or interrupt, with their Spark jobs cancelled), how long the members
# together get to stop.
STOP_S = 30.0

TOPIC = "clicks"
GROUP = "spark-pipeline"


@dataclass
class Phase:
    name: str
    members: int
    started: float  # monotonic
    at_s: float = 0.0  # seconds since the job started
    stable_after_s: float | None = None
    seconds: float = 0.0
    records: int = 0

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


@dataclass
class JobResult:
    partitions: int
    records_in: int
    records_out: int
    duplicates: int
    gaps: int
    migration: str
    seconds: float
    phases: list[Phase] = field(default_factory=list)
    timeline: list[tuple[float, str, int]] = field(default_factory=list)  # (t, member, partitions owned)

    @property
    def exactly_once(self) -> bool:
        return self.duplicates == 0 and self.gaps == 0 and self.records_in == self.records_out


class _Member:
    """One streaming query of the group (its reader process is the member)."""

    def __init__(self, name: str, job: StreamJob):
        self.name, self.job = name, job

    @property
    def error(self) -> BaseException | None:
        return self.job.error

    def assignment(self) -> frozenset[TopicPartition]:
        return self.job.progress().assignment

    def close(self, timeout: float = 120.0) -> None:
        """Stop the query (the batch in flight is abandoned or committed); its reader leaves."""
        self.job.stop()
        if self.job.query.exception() is not None:
            raise GroupshiftError(f"main job: member {self.name} failed: {self.job.query.exception()}")


class MainJob:
    def __init__(
        self,
        ns: DemoNamespace,
        partitions: int,
        rate: int,
        phase_s: float,
        say,
        jvm_log=None,
        master="local[2]",
    ):
        self.ns, self.partitions, self.rate, self.phase_s, self.say = ns, partitions, rate, phase_s, say
        self.jvm_log, self.master = jvm_log, master
        self.tps = {TopicPartition(TOPIC, p) for p in range(partitions)}
        self.out = ns.data / "out"
        self.members: dict[str, _Member] = {}
        self.gone: list[_Member] = []
        self.phases: list[Phase] = []
        self.timeline: list[tuple[float, str, int]] = []
        self.stop_all = threading.Event()
        self.aborted = False
        self.t0 = time.monotonic()

    # -- the parts -------------------------------------------------------------------------------

    def produce(self, log) -> None:
        per_tick = max(1, self.rate // (10 * self.partitions))
        n = 0
        while not self.stop_producing.is_set():
            for p in range(self.partitions):
                log.produce(
                    TOPIC, [(f"user-{(n + i) % 97}".encode(), b"click") for i in range(per_tick)], partition=p
                )
            n += per_tick
            time.sleep(0.1)

    def sample(self) -> None:
        while not self.stop_all.is_set():
            now = time.monotonic() - self.t0
            for name, m in list(self.members.items()):
                self.timeline.append((round(now, 2), name, len(m.assignment())))
            time.sleep(0.25)

    def start_member(self, name: str, rebalancer: Rebalancer, bootstrap: str | None) -> None:
        options = {"sessionTimeoutMs": 6000, "heartbeatIntervalMs": 300, "logRoot": str(self.log.root)}
        if rebalancer is Rebalancer.ZK:
            options["rebalanceBackoffMs"] = 300
        job = StreamJob.start(
            self.spark,
            GROUP,
            [TOPIC],
            out=self.out,
            checkpoint=self.ns.data / "checkpoints" / name,
            zk=self.ns.zk_connect,
            rebalancer=rebalancer,
            bootstrap=bootstrap,
            max_offsets_per_trigger=20_000,
            name=f"main-job-{name}",
            options=options,
        )
        self.members[name] = _Member(name, job)

    def stop_member(self, name: str, timeout: float = 120.0) -> None:
        m = self.members.pop(name)
        self.gone.append(m)
        m.close(timeout)

    def _stop_members(self) -> None:
        """Stop every member — each one even if another fails to — within STOP_S together."""
        deadline = time.monotonic() + STOP_S
        errors = []
        for name in list(self.members):
            try:
                self.stop_member(name, max(deadline - time.monotonic(), 1.0))
            except Exception as exc:
                errors.append(exc)
        if errors and not self.aborted:  # else the failure or interrupt under way is the one to report
            raise errors[0]

    def _abort(self) -> None:
        """A failure or an interrupt (Ctrl-C, SIGTERM): every query stops at once, and the Spark
        jobs in flight are cancelled, so their batches are abandoned (nothing is committed for
        them) instead of being waited for, one member after the other."""
        self.aborted = True
        try:
            self.spark.sparkContext.cancelAllJobs()
        except Exception:  # the JVM may be gone already
            pass

    def committed_records(self) -> int:
        """Records committed and published so far, by the outputs' names. (Not the writers' own
        counts: a member stopped between its commit and its publish leaves the publish to the
        partition's next owner, whose writer did not commit those records.)"""
        return sum(end - start for _, start, end, _ in outputs(self.out, TOPIC))

    def stable(self) -> bool:
        owned = [m.assignment() for m in self.members.values()]
        busy = sum(1 for a in owned if a)
        return (
            sum(len(a) for a in owned) == len(self.tps)
            and set().union(*owned) == self.tps
            and busy == min(len(owned), len(self.tps))
        )

    def phase(self, name: str, run_s: float | None = None) -> Phase:
        """Start a phase: wait until the group is stable, then let it consume for `run_s`."""
        if self.phases:
            self._end(self.phases[-1])
        ph = Phase(name, len(self.members), time.monotonic(), round(time.monotonic() - self.t0, 2))
        ph.records = -self.committed_records()
        self.phases.append(ph)
        self.say(f"phase {len(self.phases)}: {name} ({ph.members} members)")
        deadline = time.monotonic() + 120
        while not self.stable():
            if time.monotonic() > deadline:
                raise GroupshiftError(f"main job: the group did not become stable in phase {name!r}")
            self._check()
            time.sleep(0.05)
        ph.stable_after_s = round(time.monotonic() - ph.started, 2)
        self._sleep(self.phase_s if run_s is None else run_s)
        return ph

    def _end(self, ph: Phase) -> None:
        ph.seconds = round(time.monotonic() - ph.started, 2)
        ph.records += self.committed_records()

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self._check()
            time.sleep(0.1)

    def _check(self) -> None:
        for m in self.members.values():
            if m.error is not None:
                raise m.error

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> JobResult:
        zk = connect(self.ns.zk_connect)
        try:
            store = TopicStore(self.ns.data / "log", zk)
            store.create_topic(TOPIC, partitions=self.partitions)
            self.log = store.log
            # The JVM's own notices go to a file in the namespace (deleted with it), not to stderr.
            self.spark = spark_session(
                "groupshift-main-job", master=self.master, jvm_log=self.jvm_log or self.ns.data / "spark.log"
            )
            self.stop_producing = threading.Event()
            self.producer = producer = threading.Thread(target=self.produce, args=(self.log,), daemon=True)
            sampler = threading.Thread(target=self.sample, daemon=True)
            producer.start()
            sampler.start()
            nodes = CoordinatorNodes(self.ns.zk_connect, count=1, group_initial_rebalance_delay_ms=0).start()
            try:
                return self._phases(zk, nodes.bootstrap)
            except BaseException:
                self._abort()
                raise
            finally:
                self.stop_producing.set()
                self.stop_all.set()
                try:
                    self._stop_members()
                finally:
                    try:
                        # A query an interrupt caught while it was being started is not a member yet.
                        for query in self.spark.streams.active:
                            query.stop()
                    finally:
                        nodes.close()
        finally:
            zk.stop()
            zk.close()

    def _phases(self, zk, bootstrap: str) -> JobResult:
        self.start_member("legacy-1", Rebalancer.ZK, None)
        self.start_member("legacy-2", Rebalancer.ZK, None)
        self.phase("scheme one")
        self.start_member("legacy-3", Rebalancer.ZK, None)
        self.phase("join")
        rec = live.run(zk, GROUP)
        self.say(f"migrate {GROUP} --mode live: {rec.state}")
        for i in (1, 2, 3):
            self.start_member(f"coordinator-{i}", Rebalancer.COORDINATOR, bootstrap)
            self.stop_member(f"legacy-{i}")
            self.phase(f"bridge: legacy-{i} replaced", run_s=self.phase_s / 3)
        rec = live.run(zk, GROUP, wait_s=30, settle_s=60)
        self.say(f"migrate {GROUP} --mode live: {rec.state}")
        if rec.state != "done":
            raise GroupshiftError(f"main job: the live migration stopped at {rec.state}")
        self.phase("scheme three")
        self.stop_producing.set()
        self.producer.join()  # its last round lands before the ends are read
        ends = {tp: self.log.latest(tp) for tp in self.tps}
        drain = self.phase("drain", run_s=0)
        deadline = time.monotonic() + 120
        probe = Consumer(GROUP, rebalancer=Rebalancer.COORDINATOR, zk=self.ns.zk_connect, bootstrap=bootstrap)
        probe.assign(sorted(self.tps))  # no membership: only the group's committed offsets
        while probe.committed(sorted(self.tps)) != ends:
            if time.monotonic() > deadline:
                state = {
                    name: (sorted(str(tp) for tp in m.assignment()), m.job.progress().abandoned)
                    for name, m in self.members.items()
                }
                raise GroupshiftError(
                    f"main job: the consumers did not reach the end of the topic: committed "
                    f"{probe.committed(sorted(self.tps))}, ends {ends}, "
                    f"members (assignment, abandoned) {state}"
                )
            self._check()
            time.sleep(0.2)
        probe.close(autocommit=False)
        self._end(drain)
        seen: Counter = Counter()
        import pyarrow.parquet as pq

        for p, _, _, d in outputs(self.out, TOPIC):
            for f in d.glob("*.parquet"):
                for off in pq.read_table(f, columns=["offset"]).column("offset").to_pylist():
                    seen[(p, off)] += 1
        expected = {(tp.partition, o) for tp, end in ends.items() for o in range(end)}
        return JobResult(
            partitions=self.partitions,
            records_in=sum(ends.values()),
            records_out=len(seen),
            duplicates=sum(n - 1 for n in seen.values() if n > 1),
            gaps=len(expected - set(seen)),
            migration=rec.state,
            seconds=round(time.monotonic() - self.t0, 1),
            phases=self.phases,
            timeline=self.timeline,
        )


def run_main_job(
    zk_connect: str,
    data_parent: Path | None = None,
    *,
    partitions: int = 6,
    rate: int = 20_000,
    phase_s: float = 8.0,
    out: Path | None = None,
    timeline_png: Path | None = None,
    say=lambda line: None,
    jvm_log: Path | None = None,
    spark_master: str = "local[2]",
) -> JobResult:
    """Run the main job in a namespace of its own (deleted before this returns or raises).
    `jvm_log` receives the Spark JVM's own stderr."""
    with DemoNamespace(zk_connect, data_parent) as ns:
        result = MainJob(ns, partitions, rate, phase_s, say, jvm_log, spark_master).run()
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(asdict(result), indent=2, default=str))
    if timeline_png is not None:
        draw_timeline(result, timeline_png)
    return result


def format_summary(result: JobResult) -> str:
    rows = [["phase", "members", "stable after s", "seconds", "records", "records/s"]]
    for ph in result.phases:
        rows.append(
            [
                ph.name,
                str(ph.members),
                str(ph.stable_after_s),
                str(ph.seconds),
                f"{ph.records:,}",
                f"{ph.rate:,.0f}",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.append(
        f"records in {result.records_in:,}, out {result.records_out:,}, duplicates {result.duplicates}, "
        f"gaps {result.gaps}; migration {result.migration}; {result.seconds} s"
    )
    return "\n".join(lines)


def draw_timeline(result: JobResult, path: Path) -> None:
    """Partitions owned by each member over time, phases marked (needs the 'experiments' extra)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    from core.extras import require

    matplotlib = require("matplotlib", "experiments")
    matplotlib.use("Agg")
    pyplot = require("matplotlib.pyplot", "experiments")
    members = sorted({m for _, m, _ in result.timeline}, key=lambda m: (not m.startswith("legacy"), m))
    fig, ax = pyplot.subplots(figsize=(9, 0.6 * len(members) + 1.8))
    cmap = pyplot.get_cmap("viridis", result.partitions + 1)
    for row, member in enumerate(members):
        samples = [(t, n) for t, m, n in result.timeline if m == member]
        for (t, n), (t2, _) in zip(samples, samples[1:] + [(samples[-1][0] + 0.25, 0)], strict=True):
            if n:
                ax.broken_barh([(t, t2 - t)], (row - 0.4, 0.8), facecolors=cmap(n))
    for ph in result.phases:
        x = ph.at_s
        ax.axvline(x, color="grey", linewidth=0.8, linestyle="--")
        ax.text(x, len(members) - 0.4, ph.name, rotation=90, fontsize=7, va="top")
    ax.set_yticks(range(len(members)), members)
    scale = matplotlib.cm.ScalarMappable(matplotlib.colors.Normalize(0, result.partitions), cmap)
    fig.colorbar(scale, ax=ax, label="partitions owned")
    ax.set_xlabel("seconds")
    ax.set_title("partitions owned per member, by phase")
    fig.tight_layout()
    fig.savefig(path)
    pyplot.close(fig)
