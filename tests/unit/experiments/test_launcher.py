"""The member launcher (`experiments/launcher.py`): each member is a fork that runs
`experiments.worker.main` as a process of its own (its own session, stderr and group id) and is
watched like a `subprocess.Popen`; members stop once their launcher is gone.

The long-running member here is a librdkafka member waiting for its gate file: it needs no server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from experiments.harness import CUT_GID
from experiments.launcher import Launcher

pytest.importorskip("confluent_kafka")


def waiting(tmp_path: Path, name: str) -> list[str]:
    """A member that logs `start` and `ready`, then waits for a gate file that never comes."""
    return ["--scheme", "kafka-classic", "--zk", "127.0.0.1:1/x", "--data", str(tmp_path)] + [
        "--group", "g", "--topic", "t", "--member", name, "--log", str(tmp_path / f"{name}.jsonl"),
        "--bootstrap", "127.0.0.1:1", "--gate", str(tmp_path / "never"),
    ]  # fmt: skip


def events(tmp_path: Path, name: str) -> list[str]:
    path = tmp_path / f"{name}.jsonl"
    return [json.loads(line)["ev"] for line in path.read_text().splitlines()] if path.exists() else []


def until(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    launcher = Launcher("test", log=tmp_path_factory.mktemp("launcher") / "launcher.stderr")
    yield launcher
    launcher.close()


def test_a_member_runs_the_worker_in_a_session_of_its_own_and_answers_like_popen(launcher, tmp_path):
    member = launcher.spawn(waiting(tmp_path, "m0"), stderr=tmp_path / "m0.stderr")
    until(lambda: "ready" in events(tmp_path, "m0"))
    assert os.getsid(member.pid) == member.pid and member.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        member.wait(0.05)
    member.send_signal(signal.SIGSTOP)
    until(lambda: Path(f"/proc/{member.pid}/stat").read_text().rpartition(")")[2].split()[0] == "T")
    member.send_signal(signal.SIGCONT)
    member.terminate()  # the worker's SIGTERM: a clean stop
    assert member.wait(20) == 0 and member.returncode == 0
    assert events(tmp_path, "m0") == ["start", "ready", "stop"]


def test_exit_codes_are_popens_and_stderr_goes_to_the_members_file(launcher, tmp_path):
    bad = launcher.spawn(["--scheme", "nosuch"], stderr=tmp_path / "bad.stderr")
    assert bad.wait(20) == 2
    assert "invalid choice: 'nosuch'" in (tmp_path / "bad.stderr").read_text()
    member = launcher.spawn(waiting(tmp_path, "m1"), stderr=tmp_path / "m1.stderr")
    until(lambda: "ready" in events(tmp_path, "m1"))
    member.kill()
    assert member.wait(20) == -signal.SIGKILL
    member.kill()  # a member that is gone is not signalled again (its pid may be another's)


@pytest.mark.skipif(os.geteuid() != 0, reason="a group id of its own needs root")
def test_a_member_can_run_under_the_cut_off_group_id(launcher, tmp_path):
    member = launcher.spawn(waiting(tmp_path, "m2"), stderr=tmp_path / "m2.stderr", gid=CUT_GID)
    until(lambda: "ready" in events(tmp_path, "m2"))
    gids = next(
        line for line in Path(f"/proc/{member.pid}/status").read_text().splitlines() if line[:4] == "Gid:"
    )
    assert gids.split()[1:] == [str(CUT_GID)] * 4
    member.kill()
    member.wait(20)


def test_members_stop_once_their_launcher_is_gone(tmp_path):
    launcher = Launcher("test", log=tmp_path / "launcher.stderr")
    member = launcher.spawn(waiting(tmp_path, "m3"), stderr=tmp_path / "m3.stderr")
    until(lambda: "ready" in events(tmp_path, "m3"))
    launcher.close()  # as when the run's process is killed: the launcher's stdin closes
    until(lambda: events(tmp_path, "m3")[-1:] == ["stop"])  # the lifeline's SIGTERM, a clean stop
    assert member.wait(20) is not None
