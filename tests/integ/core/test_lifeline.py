"""A child started with `core.lifeline` stops when its parent is SIGKILLed (real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from tests.inspect_helpers import wait_for

REPO = Path(__file__).resolve().parents[3]

CHILD = textwrap.dedent(
    """
    import signal, sys, threading
    from core.lifeline import watch_parent
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    watch_parent(every_s=0.05)
    print("child ready", flush=True)
    stop.wait()
    print("child stopped cleanly", flush=True)
    """
)

PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from core.lifeline import lifeline_env
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env=lifeline_env(os.environ),
                             stdout=open(sys.argv[2], "w"), start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(3600)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[1][0] != "Z"  # a zombie has exited


def test_a_child_stops_cleanly_when_its_parent_is_killed(tmp_path):
    out = tmp_path / "child.out"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD, str(out)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        child = int(parent.stdout.readline())
        wait_for(lambda: "child ready" in out.read_text(), 20, "the child to start watching")
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        wait_for(lambda: not _alive(child), 20, "the child to stop after its parent was killed")
        assert "child stopped cleanly" in out.read_text()  # its SIGTERM path, not a kill
    finally:
        parent.kill()
        parent.wait()
        try:
            os.kill(child, signal.SIGKILL)
        except (ProcessLookupError, UnboundLocalError):
            pass


def test_the_variable_is_not_inherited_and_a_grandchild_does_not_watch(monkeypatch):
    from core import lifeline

    before = {t.name for t in threading.enumerate()}
    monkeypatch.setenv(lifeline.ENV, str(os.getpid()))  # set for a child, seen by a grandchild
    lifeline.watch_parent()
    assert lifeline.ENV not in os.environ  # its own children do not inherit it
    assert "lifeline" not in {t.name for t in threading.enumerate()} - before  # no watch started
