"""The stream reader's process, started warm: Spark starts one Python process per query run for its
stream reader (`python -m pyspark.sql.streaming.python_streaming_source_runner`, on the driver's
host), and a fresh interpreter spends 0.3 s of CPU on importing PySpark, pyarrow, numpy, the reader,
the consumer and the member of its scheme before the reader can join its group — 0.8-1 s of a
join's time to its first batch while the driver's other queries keep both cores busy.

`start()` (from `spark_session`, once per driver process) runs a server that imports all that once
and forks the runner for each start: `python_worker.sh` hands the start to `warm_client.py`, which
passes the server its standard streams, environment, directory and arguments, and stands for the
forked runner (signals forwarded, the runner's exit status its own).

What the forked runner shares with the server: the modules in `PRELOAD`, imported already, with the
server's PYTHONPATH. A start whose PYTHONPATH would find one of them elsewhere is declined, and the
client becomes a fresh interpreter; so is any start of another module. None of the preloaded
modules reads its environment at import time in a way the runner depends on (PySpark's
`SPARK_TESTING` and `PYSPARK_ENABLE_NAMEDTUPLE_PATCH` are the server's, as set by the driver).

The server is single-threaded (it forks), serves until the driver's end of its control pipe closes
(`stop()`, at the driver's exit however it ends), then waits for its runners, at most `DRAIN_S`,
before it ends them (SIGTERM, then SIGKILL after `DRAIN_S` more). If a client is killed, its runner
gets SIGTERM (the reader leaves its group), as Spark's own runner would from Spark. The server and
its runners stay in the driver's process group, as Spark's runners are: killing the group (a
driver that must die at once) kills them too, and leaves no reader behind to commit for it.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.machinery
import os
import select
import selectors
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

from pipeline.backends import MEMBER_MODULES
from pipeline.spark.warm_client import SOCKET_ENV, receive, send

RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
# What a runner imports before its reader joins: PySpark's runner, the reader, the consumer and
# every scheme's member (scheme one's, scheme two's both forms, scheme three's, the bridge's check).
PRELOAD = (
    RUNNER,
    "pipeline.spark.source",
    "pipeline.spark.reader",
    "pipeline.spark.segments",
    *MEMBER_MODULES,
    "kazoo.client",
)
DRAIN_S = 10.0  # how long a stopping server waits for its runners before it ends them
STOP_WAIT_S = 2 * DRAIN_S + 5  # how long the driver waits for the server at exit
DIR_PREFIX = "groupshift-warm-"  # + the driver's pid: its socket's directory, under the temp dir
READY_S = 5.0  # how long the driver waits for the server's socket
REQUEST_S = 5.0  # how long a client may take to send its request once connected


# ---------------------------------------------------------------------------------- the driver

_server: subprocess.Popen | None = None
_control: int | None = None
_lock = threading.Lock()


def start(pythonpath: str, python: str = sys.executable) -> str | None:
    """The server for this process's runners, started once; returns its socket's path (also put in
    `os.environ[SOCKET_ENV]` for the JVM about to start), or None where forking is not available."""
    global _server, _control
    if not hasattr(os, "pidfd_open") or not hasattr(os, "fork"):
        return None
    with _lock:
        if _server is not None and _server.poll() is None:
            return os.environ.get(SOCKET_ENV)
        _sweep(Path(tempfile.gettempdir()))
        path = str(Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-")) / "runner.sock")
        control_r, control_w = os.pipe()
        ready_r, ready_w = os.pipe()
        _server = subprocess.Popen(
            [python, "-m", "pipeline.spark.warm_runner", path, str(control_r), str(ready_w)],
            env={**os.environ, "PYTHONPATH": pythonpath},
            stdin=subprocess.DEVNULL,
            pass_fds=(control_r, ready_w),
        )
        os.close(control_r)
        os.close(ready_w)
        _control = control_w
        try:  # its socket is bound (a start before then would go to a fresh interpreter)
            select.select([ready_r], [], [], READY_S)
        finally:
            os.close(ready_r)
        os.environ[SOCKET_ENV] = path
        atexit.register(stop)
        return path


def _sweep(tmp: Path) -> None:
    """Remove the socket directories of drivers that are gone: one killed with its process group
    (SIGKILL) took its server along before either could remove it."""
    for stale in tmp.glob(f"{DIR_PREFIX}*-*"):
        pid = stale.name[len(DIR_PREFIX) :].partition("-")[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(stale, ignore_errors=True)
        except OSError:
            pass  # another user's driver, alive


def stop() -> None:
    """End the server: its runners get `DRAIN_S` to end with their queries, then are ended."""
    global _server, _control
    with _lock:
        server, control, _server, _control = _server, _control, None, None
        path = os.environ.pop(SOCKET_ENV, None) if server is not None else None
    if control is not None:
        os.close(control)
    if server is not None:
        try:
            server.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    if path is not None:  # the server removes it; not if it was killed
        shutil.rmtree(Path(path).parent, ignore_errors=True)


# ---------------------------------------------------------------------------------- the server


class _Fd:
    """A bare descriptor the forked runner closes with the server's sockets."""

    def __init__(self, fd: int):
        self.fd = fd

    def close(self) -> None:
        os.close(self.fd)


class _Runner:
    def __init__(self, pid: int, conn: socket.socket):
        self.pid, self.conn = pid, conn
        self.pidfd = os.pidfd_open(pid)
        self.terminated = False  # sent SIGTERM after the drain: SIGKILL next


def _runner_path(env: dict[str, str]) -> list[str]:
    """The runner's sys.path: its PYTHONPATH first, then the server's own entries."""
    entries = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e]
    return [*entries, *(p for p in sys.path if p not in entries)]


def _declined(request: dict, preloaded: dict[str, str]) -> str | None:
    """Why this start is not one to fork, or None."""
    if request.get("args") != ["-m", RUNNER]:
        return f"it serves only -m {RUNNER}"
    path = _runner_path(request["env"])
    for top, origin in preloaded.items():
        spec = importlib.machinery.PathFinder.find_spec(top, path)
        if spec is None or spec.origin != origin:
            return f"the runner's PYTHONPATH finds {top} elsewhere"
    return None


def _become_runner(request: dict, fds: list[int], conn: socket.socket, client: int, closing: list) -> None:
    """In the forked child: the runner, with the client's streams, environment, directory and
    process group (where the session allows: a signal to Spark's group reaches it)."""
    try:
        for thing in closing:
            thing.close()
        try:
            os.setpgid(0, os.getpgid(client))
        except OSError:
            pass  # the server's group: the driver's
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[:] = _runner_path(request["env"])
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
            ignored = int(sig) in request.get("ignored", ())
            signal.signal(sig, signal.SIG_IGN if ignored else signal.SIG_DFL)
        conn.settimeout(None)
        threading.Thread(target=_end_with_client, args=(conn,), daemon=True).start()
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(1)
    from core.forked_main import become_main

    become_main(RUNNER, [])


def _end_with_client(conn: socket.socket) -> None:
    """The client ends only after the runner, unless it is killed: then the runner is ended too."""
    try:
        while conn.recv(1024):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def _accept(listener: socket.socket, preloaded: dict[str, str], closing: list) -> _Runner | None:
    conn, _ = listener.accept()
    conn.settimeout(REQUEST_S)
    fds: list[int] = []
    try:
        request, fds = _request(conn)
        why = "not a request" if request is None else _declined(request, preloaded)
        if why is not None:
            send(conn, {"declined": why})
            conn.close()
            return None
        client = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        pid = os.fork()
        if pid == 0:
            _become_runner(request, fds, conn, client, [*closing, listener])
        runner = _Runner(pid, conn)  # reaped whatever happens to its client
        conn.settimeout(None)
        try:
            send(conn, {"pid": pid})
        except OSError:
            pass  # the client is gone: the runner sees it too and ends
        return runner
    except (OSError, ValueError) as exc:
        print(f"warm runner: a start failed: {exc}", file=sys.stderr)
        conn.close()
        return None
    finally:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


def _request(conn: socket.socket) -> tuple[dict | None, list[int]]:
    """The client's first message and the three descriptors that came with it."""
    head, ancillary, _, _ = conn.recvmsg(4, socket.CMSG_SPACE(3 * 4))
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += list(memoryview(data).cast("i")[: len(data) // 4])
    if not head or len(fds) != 3:
        return None, fds
    try:
        request = receive(conn, head)
    except ValueError:  # not JSON
        return None, fds
    well_formed = (
        isinstance(request, dict)
        and isinstance(request.get("args"), list)
        and isinstance(request.get("env"), dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in request["env"].items())
        and isinstance(request.get("cwd"), str)
        and isinstance(request.get("ignored", []), list)
    )
    return (request if well_formed else None), fds


def serve(path: str, control: int, ready: int) -> None:
    # In the driver's process group, as Spark's own runners are: a kill of the group takes the
    # runners with it. Ctrl-C and SIGTERM are the driver's to handle; it stops the server at exit.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)  # clients that come before the imports end wait in the backlog
    listener.listen(64)
    os.write(ready, b".")
    os.close(ready)
    preloaded = {}
    for name in PRELOAD:
        importlib.import_module(name)
        top = name.partition(".")[0]
        preloaded[top] = sys.modules[top].__spec__.origin
    runners: dict[int, _Runner] = {}
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(control, selectors.EVENT_READ, "control")
    deadline = None
    try:
        while deadline is None or runners:
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0)
            events = sel.select(timeout)
            if not events and deadline is not None:  # draining, and runners are still there
                _end(runners)
                deadline += DRAIN_S
                continue
            for key, _ in events:
                if key.data == "accept":
                    keep = [sel, _Fd(control), *(r.conn for r in runners.values())]
                    runner = _accept(listener, preloaded, keep)
                    if runner is not None:
                        runners[runner.pidfd] = runner
                        sel.register(runner.pidfd, selectors.EVENT_READ, "runner")
                elif key.data == "control":
                    sel.unregister(listener)
                    sel.unregister(control)
                    listener.close()
                    Path(path).unlink(missing_ok=True)
                    deadline = time.monotonic() + DRAIN_S
                else:
                    _reap(runners.pop(key.fd), sel)
    finally:
        Path(path).unlink(missing_ok=True)
        try:
            Path(path).parent.rmdir()
        except OSError:
            pass


def _reap(runner: _Runner, sel: selectors.BaseSelector) -> None:
    sel.unregister(runner.pidfd)
    _, status = os.waitpid(runner.pid, 0)
    os.close(runner.pidfd)
    try:
        send(runner.conn, {"exit": os.waitstatus_to_exitcode(status)})
    except OSError:
        pass  # the client is gone
    runner.conn.close()


def _end(runners: dict[int, _Runner]) -> None:
    """Runners that outlived the drain: SIGTERM first, SIGKILL the next time."""
    for runner in runners.values():
        sig = signal.SIGKILL if runner.terminated else signal.SIGTERM
        runner.terminated = True
        try:
            os.kill(runner.pid, sig)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
