"""A child process that stops when the process that started it is gone, even after a SIGKILL.

Tests, benchmarks and experiments start coordinator nodes and members as child processes in
sessions of their own (so a Ctrl-C meant for the parent's terminal reaches the parent, which
stops them in order). A parent killed with SIGKILL cannot stop anything; a child started with
`lifeline_env` watches its parent and sends itself SIGTERM — its own clean shutdown — once the
parent is gone (it is reparented).

    subprocess.Popen(cmd, env=lifeline_env(os.environ), start_new_session=True)   # the parent
    watch_parent()                                  # the child, early; a no-op unless started so
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Mapping

ENV = "GROUPSHIFT_PARENT_PID"
CHECK_EVERY_S = 1.0


def lifeline_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a child that should stop when this process is gone."""
    return {**env, ENV: str(os.getpid())}


def watch_parent(every_s: float = CHECK_EVERY_S) -> None:
    """When started by `lifeline_env`'s parent: SIGTERM to this process once that parent is gone.

    The variable is removed from this process's environment, so its own children do not inherit
    a parent id that is not theirs."""
    value = os.environ.pop(ENV, "")
    if not value.isdigit():
        return
    parent = int(value)
    if os.getppid() != parent:
        return  # not started by that process directly: nothing to watch

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()
