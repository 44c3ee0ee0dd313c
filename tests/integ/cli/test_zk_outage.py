"""The CLI and a ZooKeeper that goes away while a command runs (a ZooKeeper container of its own).

* `groups watch` is long-lived: it waits through an outage longer than a one-shot command's
  patience and goes on sampling once ZooKeeper is back.
* A one-shot command (`groups describe`) whose ZooKeeper is gone gives up with one line.
  (A migration that loses ZooKeeper mid-copy: tests/integ/migrate/test_crash.py.)
* A command waiting on a ZooKeeper that accepts but never answers shows where it waits on
  `kill -USR1` (every thread's stack on stderr) and goes on to its one-line error.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from core.types import TopicPartition as TP
from core.zk import connect
from migrate.schemes import zk_store as legacy
from testing.zookeeper import ZkServer
from tests.inspect_helpers import REPO, make_topic, run
from topics.log import Log

pytestmark = pytest.mark.faults  # a ZooKeeper container of its own, stopped and started


@pytest.fixture(scope="module")
def own_zk():
    server = ZkServer.start_single()
    yield server
    server.remove()


def test_watch_outlives_a_zookeeper_outage_and_one_shot_commands_give_up(own_zk, tmp_path):
    root = connect(own_zk.connect_string)
    root.ensure_path("/outage")
    root.stop()
    zk_connect = own_zk.connect_string + "/outage"
    zk = connect(zk_connect)
    log = Log(tmp_path / "data")
    make_topic(zk, log, "t", 2, 5)
    legacy.write_offsets(zk, "g", {TP("t", 0): 3, TP("t", 1): 4}, batch=10)
    zk.stop()
    # A one-shot command's patience is 1 s here (the default is 15 s): an outage of a few seconds
    # is longer than any one-shot command would wait.
    env = dict(os.environ, GROUPSHIFT_HOME=str(tmp_path / "home"), GROUPSHIFT_ZK_GIVE_UP_MS="1000")
    env.pop("GROUPSHIFT_ZK", None)
    cmd = [sys.executable, "-m", "cli", "groups", "watch", "g", "--interval", "0.2", "--zk", zk_connect]
    cmd += ["--data", str(tmp_path / "data")]
    watch = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(watch.stdout), daemon=True).start()
    try:
        deadline = time.monotonic() + 60
        while len(lines) < 3 and watch.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(lines) >= 3, (lines, watch.poll())
        own_zk.stop()
        # a one-shot command facing the dead ZooKeeper: one line, exit 1
        r = run("groups", "describe", "g", zk=zk_connect, data=tmp_path / "data", timeout=60)
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r
        outage_ends = time.monotonic() + 3.0  # three times a one-shot command's patience (1 s)
        while watch.poll() is None and time.monotonic() < outage_ends:
            time.sleep(0.1)
        assert watch.poll() is None, watch.stderr.read()
        seen = len(lines)
        own_zk.start()
        own_zk.wait_until(own_zk.ruok, 60, "ZooKeeper back")
        deadline = time.monotonic() + 60
        while len(lines) < seen + 3 and watch.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(lines) >= seen + 3 and watch.poll() is None, (lines[-3:], watch.poll())
    finally:
        watch.terminate()
        watch.wait(10)


def test_sigusr1_prints_every_threads_stack_and_the_command_goes_on():
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers a handshake
        port = silent.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "groups", "list", "--zk", f"127.0.0.1:{port}"],
            env=dict(os.environ, GROUPSHIFT_ZK_CONNECT_TIMEOUT_MS="2000"),  # gives up after 2 s, not 5 s
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            silent.settimeout(30)
            conn, _ = silent.accept()  # the command is connecting: its handler is installed
            with conn:
                proc.send_signal(signal.SIGUSR1)
                _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 1, err
    assert "(most recent call first)" in err and "cli/main.py" in err, err  # the main thread waits
    assert err.rstrip().splitlines()[-1].startswith("error: cannot reach ZooKeeper"), err
