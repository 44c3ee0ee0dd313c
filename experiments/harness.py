"""The experiments' bench: one run's clusters and coordinator nodes (`Lab`), and one consumer group
of worker processes with a producer and faults (`GroupRun`).

    with Lab(out_dir) as lab:
        run = GroupRun(lab, "hard-kill", "three-eager", workers=4, partitions=8)
        run.start(); run.wait_settled()
        run.kill("m3")                        # SIGKILL, logged in the driver's log
        run.wait_settled(); run.finish()      # stop producing, drain, stop the workers
        summary(run.events(), run.ends(), since=t_fault)

Everything runs for real: ZooKeeper in containers (`testing/`), coordinator nodes as
processes, each member an `experiments.worker` process (a fork of the run's launcher,
`experiments/launcher.py`) reading the Parquet log. The
driver writes its faults (`killed`, `paused`/`resumed`, `cut`/`restored`, `fault`) to
`driver.jsonl` beside the workers' logs, with the same monotonic clock.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from coordinator.layout import shard_path
from coordinator.node.process import CoordinatorNodeError, CoordinatorNodes
from core.errors import GroupshiftError
from core.scheme import Scheme
from core.zk import connect
from experiments import analysis
from experiments.launcher import Launcher, Member
from experiments.worker import ProcessingLog, scheme_of
from testing.ensemble import ZkEnsemble
from testing.leftovers import remove_labelled
from testing.zookeeper import ZkServer
from topics.store import TopicStore
from zk_rebalance.events import read_events

CUT_GID = 64999  # the group id a member runs under when it may be cut off (iptables --gid-owner)
NODE_OPTIONS = dict(
    shards=1,  # one shard: every group has the same coordinator, so one kill hits all of them
    group_min_session_timeout_ms=100,
    group_initial_rebalance_delay_ms=0,
    zk_session_timeout_ms=4000,
    handoff_delay_ms=0,
)


@dataclass(frozen=True)
class RunSettings:
    """Sizes and timeouts of a fault scenario's group (the same for every scheme)."""

    workers: int = 4
    partitions: int = 8
    session_ms: int = 3000
    heartbeat_ms: int = 300
    zk_backoff_ms: int = 2000  # scheme one's rebalance.backoff.ms (Kafka 0.8's default)
    records_per_s: int = 200  # per partition
    process_ms: float = 5.0
    warmup_s: float = 1.5
    settle_quiet_s: float = 1.0
    settle_timeout_s: float = 45.0
    drain_timeout_s: float = 45.0


class LabClosed(GroupshiftError):
    """The run is stopping (interrupted, or closed after an error): nothing new is started."""


LAB_LABEL = "groupshift.lab"  # every container of a Lab carries its tag, for the last sweep in `close`


class Lab:
    """One experiment run's shared infrastructure: ZooKeeper (one server, a 3-node ensemble on
    demand), a chroot per run, coordinator nodes per cluster, a data directory, the output tree.

    It is the run's single cleanup path: every group (`GroupRun`), worker process and node process
    is registered here when it starts, and `close` (also on Ctrl-C or SIGTERM turned into an
    exception) first marks the lab as stopping — from then on nothing new starts, in any thread
    (`LabClosed`) — then kills the workers, stops the nodes and removes the containers."""

    def __init__(self, out: Path, zk: str | None = None, kafka: RunSettings | None = None):
        self.out = Path(out)
        # librdkafka members: the nodes open a Kafka listener on the run's log root, and give
        # KIP-848 groups the run's session and heartbeat interval (Kafka clients send neither)
        self.kafka = kafka
        self.out.mkdir(parents=True, exist_ok=True)
        self.external_zk = zk
        self.tag = uuid.uuid4().hex[:6]
        self.data = Path(tempfile.mkdtemp(prefix=f"groupshift-exp-{self.tag}-"))
        self._single: ZkServer | None = None
        self._ensemble: ZkEnsemble | None = None
        self._nodes: dict[str, CoordinatorNodes] = {}
        self._launcher: Launcher | None = None
        self._lock = threading.Lock()  # the single server (held while it starts), the node sets
        self._ensemble_lock = threading.Lock()  # held while the ensemble starts, beside the server
        self._registry = threading.Lock()  # `stopping`, the groups, the node sets (held briefly)
        self.stopping = threading.Event()
        self.runs: list[GroupRun] = []
        self._node_sets: list[CoordinatorNodes] = []
        self.closers: list = []

    @property
    def namespace(self) -> str:
        """The chroot's name: it is in every worker's and node's command line (`--zk`)."""
        return f"groupshift-exp-{self.tag}"

    def check_open(self) -> None:
        if self.stopping.is_set():
            raise LabClosed("the experiment is stopping: nothing new is started")

    def sleep(self, seconds: float) -> None:
        """Sleep, but end at once (`LabClosed`) when the lab starts stopping."""
        if self.stopping.wait(max(0.0, seconds)):
            self.check_open()

    def launcher(self) -> Launcher:
        """The fork server every member process of the run starts from (started on first use;
        `experiments/launcher.py`)."""
        with self._registry:
            self.check_open()
            if self._launcher is None:
                (logs := self.out / "logs").mkdir(exist_ok=True)
                self._launcher = Launcher(self.namespace, log=logs / "launcher.stderr")
            return self._launcher

    # -- clusters ------------------------------------------------------------------------------
    def single(self) -> ZkServer | None:
        with self._lock:
            if self.external_zk is None and self._single is None:
                self.check_open()
                self._single = self._owned(ZkServer.start_single(labels={LAB_LABEL: self.tag}))
            return self._single

    def ensemble(self) -> ZkEnsemble:
        with self._ensemble_lock:
            if self._ensemble is None:
                self.check_open()
                self._ensemble = self._owned(ZkEnsemble.start(labels={LAB_LABEL: self.tag}))
            return self._ensemble

    def _owned(self, cluster):
        """A cluster that finished starting after `close` began is removed at once."""
        if self.stopping.is_set():
            cluster.remove()
            self.check_open()
        return cluster

    def zk_hosts(self, cluster: str = "single") -> str:
        if cluster == "ensemble":
            return self.ensemble().connect_string
        return self.external_zk.partition("/")[0] if self.external_zk else self.single().connect_string

    def addresses(self, cluster: str = "single") -> list[tuple[str, int]]:
        """(host, port) of every server of the cluster, for the four-letter words."""
        out = []
        for hp in self.zk_hosts(cluster).split(","):
            host, _, port = hp.rpartition(":")
            out.append((host, int(port)))
        return out

    def host_port(self, cluster: str = "single") -> tuple[str, int]:
        host, _, port = self.zk_hosts(cluster).split(",")[0].rpartition(":")
        return host, int(port)

    def chroot(self, cluster: str = "single") -> str:
        return f"{self.zk_hosts(cluster)}/{self.namespace}"

    def nodes(self, cluster: str = "single", count: int = 2) -> CoordinatorNodes:
        with self._lock:
            nodes = self._nodes.get(cluster)
        if nodes is None:
            self.check_open()
            zk = connect(self.chroot(cluster))
            zk.ensure_path("/")
            zk.stop()
            zk.close()
            nodes = self.start_nodes(self.chroot(cluster), count, name=cluster, **NODE_OPTIONS)
            with self._lock:
                self._nodes[cluster] = nodes
        return nodes

    def start_nodes(self, zk_connect: str, count: int, name: str, **options) -> CoordinatorNodes:
        """Coordinator node processes registered with the lab (stopped by `close`); their output is
        kept in `logs/nodes/NAME/node-N.log`."""
        if self.kafka is not None:
            kafka = {"kafka_listen": "127.0.0.1:0", "data": str(self.data)}
            kafka["group_consumer_session_timeout_ms"] = self.kafka.session_ms
            kafka["group_consumer_heartbeat_interval_ms"] = self.kafka.heartbeat_ms
            options = {**kafka, **options}
        log_dir = self.out / "logs" / "nodes" / name
        nodes = CoordinatorNodes(zk_connect, count=count, log_dir=log_dir, **options)
        with self._registry:
            self.check_open()
            self._node_sets.append(nodes)
        nodes.start()
        if self.stopping.is_set():  # close() began while they started: it may have missed some
            nodes.close()
            self.check_open()
        return nodes

    def restart_node(self, nodes: CoordinatorNodes, node_id: int, timeout: float = 30.0) -> None:
        """Start a killed node again (same id, same address), unless the lab is stopping; a start
        that fails (its ZooKeeper server restarting under it for longer than the node retries) is
        tried again, three times in all."""
        for attempt in range(3):
            with self._registry:
                self.check_open()
                node = nodes.start_node(node_id, wait=False)
            try:
                node.wait_listening(timeout)
                return
            except CoordinatorNodeError:
                if attempt == 2:
                    raise

    def track(self, run: GroupRun) -> None:
        with self._registry:
            self.check_open()
            self.runs.append(run)

    def coordinator_of(self, cluster: str = "single") -> int | None:
        """The node id leading shard 0, which coordinates every group (`shards=1`)."""
        zk = connect(self.chroot(cluster))
        try:
            data, _ = zk.get(f"{shard_path(0)}/leader")  # /groupshift/shards/0/leader
            return int(json.loads(data)["node"])
        except Exception:
            return None
        finally:
            zk.stop()
            zk.close()

    def close(self) -> None:
        """Stop everything the run started, in order: groups (producers, worker processes),
        coordinator nodes, containers; then the data directory. Safe to call twice, from any
        thread; a second Ctrl-C meanwhile is the caller's to ignore (see cli/cmd_experiment.py)."""
        with self._registry:
            self.stopping.set()
            runs, node_sets = list(self.runs), list(self._node_sets)
        for run in runs:
            run.close()
        for close in reversed(self.closers):
            try:
                close()
            except Exception:
                pass
        for nodes in node_sets:
            nodes.close()
        if self._launcher is not None:
            self._launcher.close()
        if self._ensemble is not None:
            self._ensemble.remove()
        if self._single is not None:
            self._single.remove()
        remove_labelled(LAB_LABEL, self.tag)  # one still starting in another thread, say
        shutil.rmtree(self.data, ignore_errors=True)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Producer(threading.Thread):
    """Appends `rate` records per second to every partition of a topic (new partitions included)."""

    def __init__(self, store: TopicStore, topic: str, rate: int, tick: float = 0.05):
        super().__init__(daemon=True, name=f"producer-{topic}")
        self.store, self.topic, self.tick = store, topic, tick
        self.per_tick = max(1, int(rate * tick))
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        table = pa.table({"value": pa.array([b"r"] * self.per_tick, pa.binary())})
        try:
            while not self.stopped.wait(self.tick):
                for p in range(self.store.log.partitions(self.topic)):
                    self.store.log.produce(self.topic, table, partition=p)
        except BaseException as exc:  # reported by GroupRun.finish
            self.error = exc


class GroupRun:
    """One scheme's group in one scenario: a topic, a producer, worker processes, their logs."""

    def __init__(
        self,
        lab: Lab,
        scenario: str,
        scheme: str,
        settings: RunSettings = RunSettings(),
        cluster: str = "single",
        zk_options: dict | None = None,
        zk: str | None = None,
        bootstrap: str | None = None,
        cut_victim: bool = False,
        logdir: Path | None = None,
    ):
        self.lab, self.scenario, self.scheme, self.settings = lab, scenario, scheme, settings
        self.cluster = cluster
        self.zk_options = zk_options or {}
        name = f"{scenario}-{scheme}"
        self.topic, self.group = name, f"g-{name}"
        self.logdir = logdir or lab.out / "logs" / scenario / scheme
        shutil.rmtree(self.logdir, ignore_errors=True)
        self.logdir.mkdir(parents=True)
        self.driver = ProcessingLog(str(self.logdir / "driver.jsonl"), "driver")
        self.zk_connect = zk or lab.chroot(cluster)  # the members' connect string
        self.cut_victim = cut_victim  # the first member runs under CUT_GID, to be cut off (iptables)
        self.kafka = scheme_of(scheme).kafka  # librdkafka members, on the nodes' Kafka listeners
        if scheme_of(scheme) is Scheme.ONE:
            self.bootstrap = None
        elif self.kafka:
            self.bootstrap = bootstrap or lab.nodes(cluster).kafka_bootstrap
        else:
            self.bootstrap = bootstrap or lab.nodes(cluster).bootstrap
        self.admin = connect(self.zk_connect)
        self.store = TopicStore(lab.data, self.admin)
        self.store.create_topic(self.topic, partitions=settings.partitions)
        self.producer = Producer(self.store, self.topic, settings.records_per_s)
        self.procs: dict[str, Member] = {}
        self.t0 = time.monotonic()
        self._next = 0
        self._tail = LogTail(self.logdir)
        self._committed: dict[str, int] = {}
        self._closed = False
        lab.track(self)

    # -- members ---------------------------------------------------------------------------------
    def start(self, workers: int | None = None) -> None:
        self.producer.start()
        count = workers or self.settings.workers
        if self.cut_victim:
            self.spawn("cut", cut_gid=True)
            count -= 1
        for _ in range(count):
            self.spawn()

    def spawn(
        self,
        member: str | None = None,
        zk: str | None = None,
        cut_gid: bool = False,
        gate: Path | None = None,
    ) -> str:
        if member is None:
            member, self._next = f"m{self._next}", self._next + 1
        log = self.logdir / f"{member}.jsonl"
        zk_options = {"rebalance_backoff_ms": self.settings.zk_backoff_ms} | self.zk_options
        argv = [
            "--scheme", Scheme.ONE.value if scheme_of(self.scheme) is Scheme.ONE else self.scheme,
            "--zk", zk or self.zk_connect, "--data", str(self.lab.data),
            "--group", self.group, "--topic", self.topic, "--member", member, "--log", str(log),
            "--session-ms", str(self.settings.session_ms),
            "--heartbeat-ms", str(self.settings.heartbeat_ms),
            "--process-ms", str(self.settings.process_ms),
            "--zk-options", json.dumps(zk_options),
        ]  # fmt: skip
        if self.bootstrap:
            argv += ["--bootstrap", self.bootstrap]
        if gate is not None:  # a librdkafka member subscribes once the driver creates the file
            argv += ["--gate", str(gate)]
        launcher = self.lab.launcher()
        launcher.wait_ready()  # not under the lock below: close() takes it
        with self.lab._registry:  # not once the lab is stopping: close() would miss it
            self.lab.check_open()
            # logged first: a fork logs its own lines at once (its pid is in its "start" line), and
            # a member counts as joined only by an assignment after its "spawned"
            self.driver.emit("spawned", victim=member)
            self.procs[member] = launcher.spawn(
                argv, stderr=self.logdir / f"{member}.stderr", gid=CUT_GID if cut_gid else None
            )
        return member

    def live(self) -> list[str]:
        return [m for m, p in self.procs.items() if p.poll() is None]

    def kill(self, member: str) -> None:
        self.procs[member].kill()
        self.driver.emit("killed", victim=member)
        self.procs[member].wait()

    def terminate(self, member: str, timeout: float = 30.0) -> None:
        proc = self.procs[member]
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(member)

    def pause(self, member: str) -> None:
        self.procs[member].send_signal(signal.SIGSTOP)
        self.driver.emit("paused", victim=member)

    def resume(self, member: str) -> None:
        self.procs[member].send_signal(signal.SIGCONT)
        self.driver.emit("resumed", victim=member)

    def mark(self, what: str, **fields) -> float:
        t = time.monotonic()
        self.driver.emit("fault", what=what, **fields)
        return t

    # -- observation -----------------------------------------------------------------------------
    def events(self) -> list[dict]:
        return read_events(p for p in self.logdir.glob("*.jsonl") if not p.name.endswith(".zk.jsonl"))

    def zk_events(self) -> list[dict]:
        return read_events(self.logdir.glob("*.zk.jsonl"))

    def partitions(self) -> list[str]:
        return [f"{self.topic}-{p}" for p in range(self.store.log.partitions(self.topic))]

    def holders(self, events: list[dict]) -> dict[str, set[str]]:
        """Who holds each partition now, counting only live, unpaused members."""
        held: dict[str, set[str]] = defaultdict(set)
        paused: set[str] = set()
        gone = {m for m, p in self.procs.items() if p.poll() is not None}
        for e in events:
            ev, m = e["ev"], e["member"]
            if ev == "assigned":
                held[m].update(e["partitions"])
            elif ev in ("revoked", "lost"):
                held[m].difference_update(e["partitions"])
            elif ev in ("stop", "killed"):
                held.pop(e.get("victim", m), None)
            elif ev == "paused":
                paused.add(e["victim"])
            elif ev == "resumed":
                paused.discard(e["victim"])
        owners: dict[str, set[str]] = defaultdict(set)
        for m, tps in held.items():
            if m not in gone and m not in paused:
                for tp in tps:
                    owners[tp].add(m)
        return owners

    def wait_settled(self, quiet_s: float | None = None, timeout: float | None = None) -> bool:
        """Every partition held by exactly one live member, and no ownership change for `quiet_s`."""
        quiet = self.settings.settle_quiet_s if quiet_s is None else quiet_s
        deadline = time.monotonic() + (timeout or self.settings.settle_timeout_s)
        while time.monotonic() < deadline:
            if self.settled(self.events(), quiet):
                return True
            self.lab.sleep(0.2)
        return False

    def settled(self, events: list[dict], quiet_s: float = 0.0) -> bool:
        owners = self.holders(events)
        last = max((e["t"] for e in events if e["ev"] in ("assigned", "revoked", "lost")), default=0.0)
        return (
            all(len(owners.get(tp, ())) == 1 for tp in self.partitions())
            and self._all_joined(events)
            and time.monotonic() - last >= quiet_s
        )

    def _all_joined(self, events: list[dict]) -> bool:
        """Every live, unpaused member received an assignment (possibly empty) since it started."""
        spawned, joined, paused = {}, set(), set()
        for e in events:
            if e["ev"] == "spawned":
                spawned[e["victim"]] = e["t"]
                joined.discard(e["victim"])
            elif e["ev"] == "assigned":
                joined.add(e["member"])
            elif e["ev"] == "paused":
                paused.add(e["victim"])
            elif e["ev"] == "resumed":
                paused.discard(e["victim"])
        return all(m in joined or m in paused for m in self.live())

    def ends(self) -> dict[str, int]:
        log = self.store.log
        return {
            f"{self.topic}-{p}": log.latest(_tp(self.topic, p)) for p in range(log.partitions(self.topic))
        }

    def committed_ends(self, events: list[dict] | None = None) -> dict[str, int]:
        """The highest successful commit of each partition: from `events`, or (None) from the logs'
        lines written since the last call (read incrementally: cheap to poll)."""
        if events is None:
            events, best = self._tail.read(), self._committed
        else:
            best = {}
        for e in events:
            if e["ev"] == "commit" and e.get("ok"):
                for tp, o in e["offsets"].items():
                    best[tp] = max(best.get(tp, 0), o)
        return dict(best)

    def stop_producing(self) -> dict[str, int]:
        """Stop the producer; the log ends it left."""
        self.producer.stopped.set()
        if self.producer.is_alive():
            self.producer.join()
        if self.producer.error is not None:
            raise self.producer.error
        return self.ends()

    def finish(self) -> dict:
        """Stop producing, wait until every record is committed (or the drain timeout), stop the
        workers (SIGTERM, SIGKILL after 30 s). Returns the log ends and whether it drained."""
        ends = self.stop_producing()
        deadline = time.monotonic() + self.settings.drain_timeout_s
        drained = False
        while time.monotonic() < deadline:
            if not analysis.behind(ends, self.committed_ends()):
                drained = True
                break
            self.lab.sleep(0.3)
        self.stop_all()
        return {"ends": ends, "drained": drained}

    def signal_stop(self) -> None:
        """SIGCONT then SIGTERM to every live member (a paused member cannot act on SIGTERM)."""
        for m in self.live():
            self.procs[m].send_signal(signal.SIGCONT)
            self.procs[m].send_signal(signal.SIGTERM)

    def stop_all(self, grace_s: float = 30.0, deadline: float | None = None) -> None:
        """Stop every member: SIGTERM, SIGKILL to those still running after `grace_s` (or at
        `deadline`, a monotonic time shared by several groups stopped together)."""
        self.signal_stop()
        deadline = deadline if deadline is not None else time.monotonic() + grace_s
        for m in list(self.procs):
            try:
                self.procs[m].wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(m)
        self.admin.stop()
        self.admin.close()
        self.driver.close()

    def close(self) -> None:
        """Stop the producer and kill whatever still runs (after an error or an interruption);
        reaps the killed processes. Safe to call again and from another thread."""
        self.producer.stopped.set()
        for p in list(self.procs.values()):
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in list(self.procs.values()):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        if self._closed:
            return
        self._closed = True
        try:
            self.admin.stop()
            self.admin.close()
        except Exception:
            pass


class LogTail:
    """The complete lines added to a run's processing logs since the last `read` (the member logs
    and the driver's; not scheme one's ZooKeeper logs), as events in time order."""

    def __init__(self, logdir: Path):
        self.logdir = logdir
        self.offsets: dict[Path, int] = {}

    def read(self) -> list[dict]:
        out = []
        for path in self.logdir.glob("*.jsonl"):
            if path.name.endswith(".zk.jsonl"):
                continue
            start = self.offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read()
            complete = data.rfind(b"\n") + 1  # a line being written is read next time
            self.offsets[path] = start + complete
            for line in data[:complete].splitlines():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return sorted(out, key=lambda e: e["t"])


def _tp(topic: str, p: int):
    from core.types import TopicPartition

    return TopicPartition(topic, p)
