"""The embedded ZooKeeper (`groupshift zk ...`) and how commands behave when ZooKeeper is down.

Every test runs its own server: its own `GROUPSHIFT_HOME` (data, config, pid) and a free port,
never 2181, so an operator's or another test's embedded ZooKeeper is never touched.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.errors import ZooKeeperUnavailable
from core.four_letter import four_letter
from core.zk import connect, resolve_zk
from tests.ports import free_port, on_a_free_port
from tests.snapshots import dir_tree

REPO = Path(__file__).resolve().parents[3]
NOT_RUNNING = "error: the embedded ZooKeeper is not running; start it with `groupshift zk start` or pass --zk"


def groupshift(
    *args: str, home: Path, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = dict(os.environ, GROUPSHIFT_HOME=str(home), PYTHONPATH=str(REPO), **(env or {}))
    env.pop("GROUPSHIFT_ZK", None)
    env.pop("GROUPSHIFT_DATA", None)
    proc = subprocess.run(
        [sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=90
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def start_on_a_free_port(home: Path) -> int:
    """`zk start --port P` on a free P (another one if something bound P first); returns P."""
    port, proc = on_a_free_port(
        lambda p: groupshift("zk", "start", "--port", str(p), home=home, check=False),
        taken=lambda proc: proc.returncode != 0 and "is already in use" in proc.stderr,
    )
    assert proc.returncode == 0, proc.stderr
    return port


@pytest.fixture
def home(tmp_path):
    """A home of this test's own; its server (if any) is stopped at the end."""
    yield tmp_path
    groupshift("zk", "stop", home=tmp_path, check=False)


def time_wait_on(port: int) -> bool:
    """Whether a TCP socket whose local port is `port` is in TIME_WAIT (state 06 in /proc/net/tcp*)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "06":
                return True
    return False


def wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_stop_then_start_at_once_while_the_old_connections_are_in_time_wait(home):
    port = start_on_a_free_port(home)
    client = connect(f"127.0.0.1:{port}")
    try:
        client.ensure_path("/before-restart")
        assert groupshift("zk", "stop", home=home).stdout.strip() == "stopped"
        # The server closed its client's connection first: the port's side sits in TIME_WAIT,
        # which a bind without SO_REUSEADDR took for "port in use" for a minute.
        wait_for(lambda: time_wait_on(port), 10, f"a TIME_WAIT socket on port {port}")
        out = groupshift("zk", "start", "--port", str(port), home=home).stdout
        assert out.startswith(f"started: 127.0.0.1:{port} ")
        wait_for(lambda: client.connected, 20, "the client to reconnect to the restarted server")
        assert client.exists("/before-restart")  # same data directory, same data
    finally:
        client.stop()
        client.close()


def test_start_on_another_port_names_the_address_that_runs(home):
    port, other = start_on_a_free_port(home), free_port()
    proc = groupshift("zk", "start", "--port", str(other), home=home, check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"already runs on 127.0.0.1:{port}" in proc.stderr
    assert f"port {other} was asked for" in proc.stderr
    # Nothing moved: the server still runs where it ran, and nothing listens on the other port.
    assert groupshift("zk", "status", home=home).stdout.startswith(f"running: 127.0.0.1:{port} ")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", other), timeout=1).close()


def test_start_without_port_reports_the_running_address(home):
    port = start_on_a_free_port(home)
    out = groupshift("zk", "start", home=home).stdout
    assert out.startswith(f"already running: 127.0.0.1:{port} ")
    out = groupshift("zk", "start", "--port", str(port), home=home).stdout
    assert out.startswith(f"already running: 127.0.0.1:{port} ")


@pytest.mark.parametrize(
    "command",
    [
        ["topics", "list"],
        ["topics", "create", "t1", "-p", "2"],
        ["topics", "describe", "t1"],
        ["demo", "--partitions", "1", "--records", "10"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_commands_fail_fast_when_the_embedded_zookeeper_is_down(home, command):
    before = dir_tree(home)
    proc = groupshift(*command, home=home, check=False)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [NOT_RUNNING]
    assert dir_tree(home) == before


def test_resolve_zk_fails_fast_when_the_embedded_zookeeper_is_down(home, monkeypatch):
    monkeypatch.setenv("GROUPSHIFT_HOME", str(home))
    monkeypatch.delenv("GROUPSHIFT_ZK", raising=False)
    with pytest.raises(ZooKeeperUnavailable, match="embedded ZooKeeper is not running"):
        resolve_zk()
    # An explicit address is never second-guessed.
    assert resolve_zk("127.0.0.1:1/x") == "127.0.0.1:1/x"


def test_resolve_zk_finds_the_running_embedded_zookeeper(home, monkeypatch):
    port = start_on_a_free_port(home)
    monkeypatch.setenv("GROUPSHIFT_HOME", str(home))
    monkeypatch.delenv("GROUPSHIFT_ZK", raising=False)
    assert resolve_zk() == f"127.0.0.1:{port}"


def test_an_explicit_zk_that_does_not_answer_says_what_it_waits_for(home):
    with socket.socket() as s:
        # Listening but never answering: the connection is accepted by the kernel, so the client
        # cannot tell "nobody there" at once (a refused connection fails fast) and has to wait.
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        port = s.getsockname()[1]
        # 2 s instead of the default 10 s (the notice comes after 1 s)
        env = {"GROUPSHIFT_ZK_CONNECT_TIMEOUT_MS": "2000"}
        proc = groupshift("topics", "list", "--zk", f"127.0.0.1:{port}", home=home, check=False, env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 2, proc.stderr
    assert lines[0] == f"groupshift: waiting up to 2s for ZooKeeper at 127.0.0.1:{port} ..."
    assert lines[1].startswith(f"error: cannot reach ZooKeeper at 127.0.0.1:{port} within 2s;")


# State files the embedded ZooKeeper cannot use: refused by name, never taken for "not running".
CORRUPT_STATES = {
    "not-json": b"pid=123 port=12345\n",
    "empty": b"",
    "blank": b" \n",
    "not-utf8": b"\xff\xfe\x00{",
    "a-json-list": b"[123, 12345]",
    "a-json-string": b'"running"',
    "pid-missing": b'{"port": 12345}',
    "pid-a-string": b'{"pid": "123", "port": 12345}',
    "pid-a-boolean": b'{"pid": true, "port": 12345}',
    "pid-negative": b'{"pid": -1, "port": 12345}',
    "port-a-float": b'{"pid": 123, "port": 12345.0}',
    "port-out-of-range": b'{"pid": 123, "port": 70000}',
    "nested-too-deep": b"[" * 50_000,
    "a-directory": None,
}


@pytest.mark.parametrize(
    "command", [["status"], ["status", "--json"], ["start"], ["stop"], ["topics", "list"]], ids=" ".join
)
@pytest.mark.parametrize("content", list(CORRUPT_STATES.values()), ids=list(CORRUPT_STATES))
def test_a_corrupt_state_file_is_one_line_naming_it_and_changes_nothing(home, content, command):
    state = home / "zk" / "state.json"
    state.parent.mkdir()
    if content is None:
        state.mkdir()
        (state / "left-here").write_text("x")
    else:
        state.write_bytes(content)
    before = dir_tree(home)
    args = command if command[0] == "topics" else ["zk", *command]
    proc = groupshift(*args, home=home, check=False)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    assert f"state file {state} is unusable" in lines[0]
    assert f"no ZooKeeper runs from {state.parent}: remove it (rm" in lines[0]
    assert dir_tree(home) == before  # nothing started (no zoo.cfg, no data), nothing removed


def test_a_corrupt_state_file_of_a_running_server_names_its_pid(home):
    port = start_on_a_free_port(home)
    state = home / "zk" / "state.json"
    good = state.read_bytes()
    pid = json.loads(good)["pid"]
    state.write_bytes(b"{garbage")
    try:
        for command in (["status"], ["stop"], ["start", "--port", str(port)]):
            proc = groupshift("zk", *command, home=home, check=False)
            assert proc.returncode == 1 and proc.stdout == "", proc.stdout + proc.stderr
            assert proc.stderr.count("\n") == 1, proc.stderr
            what_to_do = f"still runs as pid {pid}: stop it (kill {pid}), then remove it (rm {state})"
            assert what_to_do in proc.stderr
        assert state.read_bytes() == b"{garbage"
        assert four_letter("127.0.0.1", port, "ruok") == "imok"  # stop did not stop what it cannot name
    finally:
        state.write_bytes(good)  # the fixture stops it
