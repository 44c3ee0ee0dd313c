"""Spark's standalone cluster manager on loopback, for tests and benchmarks: a master and
workers started from pyspark's own distribution (`spark-class`), so jobs run on executors that
are processes of their own, not inside the driver as with `local[N]`.

    with SparkCluster.start(workers=2, cores=1, memory="1g") as cluster:
        spark = spark_session("job", master=cluster.master_url)   # spark://127.0.0.1:PORT
        ...
        spark.stop()
    # every process of the cluster is gone, and its directory (work dirs, logs) removed

A keeper process (this module run by the owner, in a session of its own) starts the master,
waits for it to be up, starts the workers and waits for each to register; then it waits for its
owner. It stops the cluster when the owner stops it (`stop()`, leaving the `with`, also on an
exception), and when the owner is gone however it ended — Ctrl-C, SIGTERM or SIGKILL: the owner's
end closes the keeper's stdin, and `core.lifeline` covers the rest. To stop the cluster it stops
every process that carries the cluster's mark in its environment (the master, the workers, the
executors they start and the Python workers of those: each inherits it) or belongs to the session
of the master or a worker: SIGTERM, then SIGKILL after a grace period.

Everything binds to 127.0.0.1 (RPC and web UIs on free ports; the master's REST server is off).
The work dirs and logs live in a temporary directory, removed when the cluster stops; when the
start fails, the logs are kept and the error names the one to read.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from core.errors import GroupshiftError
from core.lifeline import lifeline_env, watch_parent

REPO = Path(__file__).resolve().parent.parent
MAX_WORKERS = 8
MAX_CORES = 64
MEMORY = re.compile(r"[1-9]\d*[mg]")
# Every process of a cluster has this in its environment, its value the cluster's directory.
MARK = "GROUPSHIFT_SPARK_CLUSTER"
# What the master and the workers write once they are up.
MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
MASTER_ALIVE = re.compile(r"New state: ALIVE")
WORKER_REGISTERED = re.compile(r"Successfully registered with master")
# The daemons (master, workers) are small: a small heap and a JVM tuned for start-up.
DAEMON_MEMORY = "256m"
DAEMON_JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
POLL_S = 0.1
STOP_GRACE_S = 10.0  # SIGTERM, then SIGKILL for what is left after this long
# How long the owner waits for the keeper beyond the start-up timeouts, and for its stop.
KEEPER_SLACK_S = 30.0


class SparkClusterError(GroupshiftError):
    """The cluster could not be started; the message names the process and its log."""


@dataclass(frozen=True)
class Plan:
    """What the keeper starts: `workers` workers of `cores` cores and `memory` each, in `dir`."""

    dir: str
    spark_home: str
    workers: int
    cores: int
    memory: str
    timeout: float


class SparkCluster:
    """A running standalone cluster: `master_url`, `dir` (its work dirs and logs), `processes()`."""

    def __init__(self, plan: Plan, keeper: subprocess.Popen):
        self.plan = plan
        self.dir = Path(plan.dir)
        self.keeper = keeper
        self.master_url = ""
        self.pids: list[int] = []  # the master's, then each worker's
        self._messages: queue.Queue[dict] = queue.Queue()
        self._stopped = False
        self._clean = False  # the keeper said it stopped everything and tidied up
        threading.Thread(target=self._read_keeper, name="spark-cluster-keeper", daemon=True).start()

    @property
    def cores(self) -> int:
        """The cores of all workers together (for `spark.cores.max`)."""
        return self.plan.workers * self.plan.cores

    # -- lifecycle -------------------------------------------------------------------------
    @classmethod
    def start(
        cls, workers: int = 2, cores: int = 1, memory: str = "1g", timeout: float = 60.0
    ) -> SparkCluster:
        """Start a master and `workers` workers; returns once every worker registered with the
        master. On a failure or an interruption every process started so far is stopped."""
        workers = _bounded("workers", workers, MAX_WORKERS)
        cores = _bounded("cores", cores, MAX_CORES)
        memory = _memory(memory)
        home = spark_home()
        _require_java()
        workdir = tempfile.mkdtemp(prefix="groupshift-spark-")
        plan = Plan(workdir, home, workers, cores, memory, float(timeout))
        try:
            keeper = _start_keeper(plan)
        except BaseException:
            shutil.rmtree(plan.dir, ignore_errors=True)
            raise
        cluster = cls(plan, keeper)
        try:
            cluster._wait_ready()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _read_keeper(self) -> None:
        for line in self.keeper.stdout:
            try:
                self._messages.put(json.loads(line))
            except ValueError:
                continue
        self._messages.put({"gone": self.keeper.wait()})

    def _next(self, timeout: float) -> dict | None:
        try:
            return self._messages.get(timeout=max(timeout, 0))
        except queue.Empty:
            return None

    def _wait_ready(self) -> None:
        # The keeper bounds each step by plan.timeout; this only guards against a keeper that hangs.
        budget = 2 * self.plan.timeout + KEEPER_SLACK_S
        msg = self._next(budget)
        if msg is None:
            raise SparkClusterError(f"the spark cluster did not start within {budget:g} s; {self._logs()}")
        if "ready" in msg:
            self.master_url, self.pids = msg["master_url"], msg["pids"]
            return
        if "error" in msg:
            self._finish(self._next(KEEPER_SLACK_S))
            raise SparkClusterError(msg["error"])
        self._finish(msg)
        raise SparkClusterError(
            f"the spark cluster's keeper exited with code {msg.get('gone')} before the cluster was up; "
            f"{self._logs()}"
        )

    def _logs(self) -> str:
        return f"the logs: {self.dir / 'logs'}"

    def stop(self) -> None:
        """Stop every process of the cluster and remove its directory; again does nothing."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.keeper.stdin.close()  # the keeper's signal to stop
        except OSError:
            pass
        while not self._clean:
            msg = self._next(STOP_GRACE_S + KEEPER_SLACK_S)
            if msg is None or "gone" in msg:
                break
            self._finish(msg)
        try:
            self.keeper.wait(timeout=KEEPER_SLACK_S)
        except subprocess.TimeoutExpired:
            self.keeper.kill()
            self.keeper.wait()
        if not self._clean:  # the keeper died or hung: do its work here
            stop_processes(str(self.dir), self.pids)
            shutil.rmtree(self.dir, ignore_errors=True)

    def _finish(self, msg: dict | None) -> None:
        if msg and "stopped" in msg:
            self._clean = True

    def processes(self) -> list[int]:
        """The pids of every live process of the cluster: master, workers, executors and theirs."""
        return sorted(_marked(str(self.dir)) | _in_sessions(self.pids))

    def __enter__(self) -> SparkCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _start_keeper(plan: Plan) -> subprocess.Popen:
    """This module's `keep()` in a child of this process, in a session of its own (so that a Ctrl-C
    meant for this process does not reach it first), with a lifeline to this process."""
    logs = Path(plan.dir) / "logs"
    logs.mkdir()
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); from testing.spark_cluster import keep; keep()"
    with open(logs / "keeper.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", code, json.dumps(plan.__dict__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env=lifeline_env(os.environ),
            start_new_session=True,
        )


def spark_home() -> str:
    """pyspark's own distribution (its `bin/spark-class` and jars), found without importing it."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SparkClusterError(
            "a Spark cluster needs the 'spark' extra: pip install 'groupshift[spark]' (pyspark is missing)"
        )
    home = Path(list(spec.submodule_search_locations)[0])
    if not (home / "bin" / "spark-class").is_file():
        raise SparkClusterError(f"pyspark at {home} has no bin/spark-class; reinstall the 'spark' extra")
    return str(home)


def _require_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").is_file():
        return
    if shutil.which("java") is None:
        raise SparkClusterError(
            "a Spark cluster needs a Java runtime: java is not on PATH and JAVA_HOME is not set "
            "(scripts/setup.sh installs Java 17)"
        )


def _bounded(what: str, value: int, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise SparkClusterError(f"{what} must be a whole number from 1 to {most}, not {value!r}")
    return value


def _memory(value: str) -> str:
    if not isinstance(value, str) or not MEMORY.fullmatch(value):
        raise SparkClusterError(f"memory must be a size such as 512m or 1g, not {value!r}")
    return value


# -- finding and stopping a cluster's processes (Linux /proc) ---------------------------------


def _marked(mark: str) -> set[int]:
    """Live processes whose environment holds `MARK=mark` (a zombie's environment reads empty)."""
    needle = f"{MARK}={mark}".encode() + b"\0"
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if needle in f.read() + b"\0":
                        found.add(int(entry.name))
            except OSError:
                continue
    return found


def _in_sessions(leaders: list[int]) -> set[int]:
    """Live (not zombie) processes in the sessions of `leaders`."""
    sessions, found = set(leaders), set()
    if not sessions:
        return found
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[3]) in sessions:  # state, ppid, pgrp, session
                found.add(int(entry.name))
    return found


def _signal(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_processes(mark: str, leaders: list[int], children: list[subprocess.Popen] = ()) -> None:
    """SIGTERM to every process of the cluster, SIGKILL after `STOP_GRACE_S` to what is left;
    returns once none is left (`children`, this process's own, are reaped on the way)."""

    def left() -> set[int]:
        for child in children:
            child.poll()
        return (_marked(mark) | _in_sessions(leaders)) - {os.getpid()}

    for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
        pids = left()
        if not pids:
            return
        _signal(pids, sig)
        deadline = time.monotonic() + grace
        while (pids := left()) and time.monotonic() < deadline:
            _signal(pids, sig)  # processes started meanwhile (a worker starting an executor)
            time.sleep(POLL_S)
    for child in children:
        try:
            child.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass


# -- the keeper: the owner's child that starts the cluster and stops it -----------------------


class OwnerGone(Exception):
    """The owner closed the keeper's stdin (`stop()`) or ended."""


def keep() -> None:
    """The keeper's main: start the cluster, report, wait for the owner, stop the cluster."""

    def on_signal(signum, frame):
        raise OwnerGone(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    watch_parent()  # SIGTERM to this process once the owner is gone (reparented)
    plan = Plan(**json.loads(sys.argv[1]))
    keeper = _Keeper(plan)
    kept = None
    try:
        keeper.start()
        _say(ready=True, master_url=keeper.master_url, pids=[p.pid for p in keeper.procs])
        keeper.wait_for_owner()
    except OwnerGone:
        pass
    except Exception as exc:  # the logs are kept for the error to name
        kept = str(Path(plan.dir) / "logs")
        if isinstance(exc, SparkClusterError):
            _say(error=str(exc))
        else:
            _say(error=f"the spark cluster's keeper failed: {exc!r}; the logs: {kept}")
            raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stop_processes(plan.dir, [p.pid for p in keeper.procs], keeper.procs)
        if kept:
            shutil.rmtree(Path(plan.dir) / "work", ignore_errors=True)
        else:
            shutil.rmtree(plan.dir, ignore_errors=True)
        _say(stopped=True, kept=kept)


def _say(**msg) -> None:
    try:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass  # the owner is gone


class _Keeper:
    def __init__(self, plan: Plan):
        self.plan = plan
        self.dir = Path(plan.dir)
        self.procs: list[subprocess.Popen] = []
        self.master_url = ""
        self.env = {
            **os.environ,
            "SPARK_HOME": plan.spark_home,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            # The mark also on the command line, so that `ps` shows whose daemons these are.
            "SPARK_DAEMON_JAVA_OPTS": f"{DAEMON_JAVA_OPTS} -Dgroupshift.cluster={plan.dir}",
            # Spark's REST submission server listens on the fixed port 6066: two clusters would collide.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            MARK: plan.dir,
        }

    def log(self, name: str) -> Path:
        return self.dir / "logs" / f"{name}.log"

    def launch(self, name: str, args: list[str], **env: str) -> subprocess.Popen:
        """`spark-class ARGS` in a session of its own, its output in `logs/NAME.log`."""
        with open(self.log(name), "ab") as log:
            proc = subprocess.Popen(
                [str(Path(self.plan.spark_home) / "bin" / "spark-class"), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**self.env, **env},
                cwd=self.dir,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        """The master, then the workers (started together); each step within the plan's timeout."""
        ui = ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"]
        master = self.launch("master", ["org.apache.spark.deploy.master.Master", *ui])
        deadline = time.monotonic() + self.plan.timeout
        for pattern in (MASTER_URL, MASTER_ALIVE):
            found = self.wait_for(master, "master", "spark master did not start", pattern, deadline)
            self.master_url = self.master_url or found.group(1)
        workers = []
        for i in range(1, self.plan.workers + 1):
            work = self.dir / "work" / f"worker-{i}"
            work.mkdir(parents=True)
            args = ["--cores", str(self.plan.cores), "--memory", self.plan.memory, "--work-dir", str(work)]
            cls = "org.apache.spark.deploy.worker.Worker"
            proc = self.launch(f"worker-{i}", [cls, *ui, *args, self.master_url], SPARK_WORKER_DIR=str(work))
            workers.append(proc)
        deadline = time.monotonic() + self.plan.timeout
        for i, proc in enumerate(workers, 1):
            what = f"spark worker {i} did not register with the master"
            self.wait_for(proc, f"worker-{i}", what, WORKER_REGISTERED, deadline)

    def wait_for(
        self, proc: subprocess.Popen, name: str, what: str, pattern: re.Pattern, deadline: float
    ) -> re.Match:
        """The first match of `pattern` in the log of `proc`, waiting until `deadline`; the owner
        closing stdin ends the wait (OwnerGone)."""
        path = self.log(name)
        while True:
            if found := pattern.search(path.read_text(errors="replace")):
                return found
            if proc.poll() is not None:
                raise SparkClusterError(f"{what}: it exited with code {proc.returncode}; its log: {path}")
            if time.monotonic() >= deadline:
                raise SparkClusterError(f"{what} within {self.plan.timeout:g} s; its log: {path}")
            self.check_owner(POLL_S)

    def check_owner(self, timeout: float | None) -> None:
        """Wait up to `timeout` (None: for ever) for the owner to close stdin; OwnerGone if it did."""
        readable, _, _ = select.select([sys.stdin], [], [], timeout)
        if readable and not os.read(sys.stdin.fileno(), 4096):
            raise OwnerGone("stdin closed")

    def wait_for_owner(self) -> None:
        while True:
            self.check_owner(None)
