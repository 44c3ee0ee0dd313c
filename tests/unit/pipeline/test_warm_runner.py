"""The stream reader's process started warm (`pipeline.spark.warm_runner`): Spark's start of
`python -m pyspark.sql.streaming.python_streaming_source_runner` through `python_worker.sh` is a
child forked from the driver's server, and stands in for the process Spark started — its
connection back to Spark, its exit status, its signals; a start the server may not fork becomes a
fresh interpreter. The test plays Spark's side of the runner's socket (PySpark's own protocol), so
no JVM is started."""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from pipeline.spark import warm_runner
from pipeline.spark.session import REPO, python_worker, python_worker_env

PYTHONPATH = str(REPO)
WAIT_S = 60


@pytest.fixture
def server():
    path = warm_runner.start(PYTHONPATH)
    assert path is not None
    try:
        yield warm_runner._server
    finally:
        warm_runner.stop()


class Spark:
    """Spark's side of one runner start: the socket it listens on, the process it started."""

    def __init__(self, tmp: Path, pythonpath: str = PYTHONPATH, process_group: int | None = None):
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(tmp / "spark.sock"))
        self.listener.listen(1)
        self.listener.settimeout(WAIT_S)
        env = {**os.environ, **python_worker_env(), "PYTHONPATH": pythonpath}
        env["PYTHON_WORKER_FACTORY_SOCK_PATH"] = str(tmp / "spark.sock")
        env.pop("PYTHON_WORKER_FACTORY_SECRET", None)
        self.process = subprocess.Popen(
            [python_worker(), "-m", warm_runner.RUNNER],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=process_group,
        )
        self.conn, _ = self.listener.accept()
        self.conn.settimeout(WAIT_S)
        (self.runner_pid,) = struct.unpack(">i", self._exactly(4))  # what the runner says it is

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.conn.recv(n - len(data))
            assert chunk, "the runner closed its connection"
            data += chunk
        return data

    def send_python_version(self, version: str) -> bytes:
        """The first thing Spark sends; a mismatch makes the runner report an error and exit."""
        data = version.encode()
        self.conn.sendall(struct.pack(">i", len(data)) + data)
        out = b""
        while chunk := self.conn.recv(65536):
            out += chunk
        return out

    def close(self) -> None:
        self.conn.close()
        self.listener.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(WAIT_S)


def parent_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))


def wait_gone(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        ready, _, _ = select.select([fd], [], [], WAIT_S)
        assert ready, f"process {pid} still runs after {WAIT_S} s"
    finally:
        os.close(fd)


def test_the_runner_is_forked_from_the_server_and_its_status_is_the_process_spark_started(server, tmp_path):
    spark = Spark(tmp_path)
    try:
        assert spark.runner_pid != spark.process.pid
        assert parent_of(spark.runner_pid) == server.pid
        reply = spark.send_python_version("9.9")  # the runner reads Spark's socket, answers, exits
        assert b"PYTHON_VERSION_MISMATCH" in reply
        assert spark.process.wait(WAIT_S) == 255  # the runner's sys.exit(-1)
    finally:
        spark.close()


def test_a_runner_whose_path_finds_other_modules_starts_fresh_as_without_the_server(server, tmp_path):
    shadow = tmp_path / "shadow" / "pipeline"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    spark = Spark(tmp_path, pythonpath=f"{shadow.parent}:{PYTHONPATH}")
    try:
        assert spark.runner_pid == spark.process.pid  # the client became the interpreter (exec)
        assert b"PYTHON_VERSION_MISMATCH" in spark.send_python_version("9.9")
        assert spark.process.wait(WAIT_S) == 255
        said = spark.process.stderr.read().decode().splitlines()
        why = "the runner's PYTHONPATH finds pipeline elsewhere"
        assert said[0] == f"groupshift: stream reader started cold: {why}"
    finally:
        spark.close()


def test_spark_stopping_the_process_it_started_stops_the_runner(server, tmp_path):
    spark = Spark(tmp_path)
    try:
        spark.process.send_signal(signal.SIGTERM)  # what Spark does to stop a query's reader
        assert spark.process.wait(WAIT_S) == -signal.SIGTERM  # ended as the runner ended
        wait_gone(spark.runner_pid)
    finally:
        spark.close()


def test_a_killed_client_takes_its_runner_with_it(server, tmp_path):
    spark = Spark(tmp_path)
    try:
        spark.process.kill()
        spark.process.wait(WAIT_S)
        wait_gone(spark.runner_pid)
        spark.conn.settimeout(WAIT_S)
        assert spark.conn.recv(1) == b""  # the runner's end of Spark's socket closed with it
    finally:
        spark.close()


def test_the_runner_is_in_the_process_group_of_the_process_spark_started(server, tmp_path):
    spark = Spark(tmp_path, process_group=0)  # a group of its own, as a driver's often is
    try:
        assert os.getpgid(spark.runner_pid) == spark.process.pid
        os.killpg(spark.process.pid, signal.SIGKILL)  # a driver killed with its whole group ...
        wait_gone(spark.runner_pid)  # ... leaves no reader behind to commit for it
    finally:
        spark.close()


def test_the_server_serves_on_after_a_connection_that_sends_nonsense(server, tmp_path):
    def declined(data: bytes, fds: tuple[int, ...] = ()) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bad:
            bad.connect(os.environ[warm_runner.SOCKET_ENV])
            ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
            bad.sendmsg([data], ancillary if fds else [])
            bad.settimeout(WAIT_S)
            return b"declined" in bad.recv(4096)

    assert declined(b"\x00\x00\x00\x05hello")  # no descriptors, no JSON
    with open(os.devnull) as null:
        fds = (null.fileno(),) * 3
        assert declined(b"\x00\x00\x00\x05hello", fds)  # not JSON
        assert declined(b"\x00\x00\x00\x02{}", fds)  # JSON, not a request
        body = b'{"args": ["-m", "x"], "env": {"A": 1}, "cwd": "/"}'  # env values must be strings
        assert declined(struct.pack(">I", len(body)) + body, fds)
    spark = Spark(tmp_path)
    try:
        assert parent_of(spark.runner_pid) == server.pid
    finally:
        spark.close()


def test_stop_waits_for_a_running_runner_then_leaves_nothing(tmp_path):
    path = warm_runner.start(PYTHONPATH)
    server = warm_runner._server
    spark = Spark(tmp_path)
    stopping = threading.Thread(target=warm_runner.stop)
    try:
        stopping.start()
        deadline = time.monotonic() + WAIT_S
        while Path(path).exists():  # the server stops taking starts at once ...
            assert time.monotonic() < deadline, "the server still takes starts"
            time.sleep(0.01)
        assert stopping.is_alive() and server.poll() is None  # ... and waits for its runner
        assert b"PYTHON_VERSION_MISMATCH" in spark.send_python_version("9.9")
        stopping.join(WAIT_S)
        assert not stopping.is_alive()
        assert spark.process.wait(WAIT_S) == 255  # the runner's status still reached its client
    finally:
        spark.close()
        warm_runner.stop()
    assert server.poll() is not None
    assert not Path(path).parent.exists()
    assert warm_runner.SOCKET_ENV not in os.environ


def test_a_start_removes_what_killed_drivers_left_behind(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process has now: a driver killed with its server
    tmp = Path(tempfile.gettempdir())
    stale = tmp / f"{warm_runner.DIR_PREFIX}{gone.pid}-abc"
    alive = tmp / f"{warm_runner.DIR_PREFIX}{os.getpid()}-abc"  # this process's: kept
    for d in (stale, alive):
        d.mkdir()
        (d / "runner.sock").write_text("")
    try:
        warm_runner.start(PYTHONPATH)
        assert not stale.exists() and alive.exists()
    finally:
        warm_runner.stop()
        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(alive, ignore_errors=True)
