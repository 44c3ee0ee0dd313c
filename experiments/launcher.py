"""Member processes started in milliseconds: forks of one process that has already imported what an
experiment member needs (a fork server).

A member is a process of its own: scenarios kill, pause and cut off single members, and each has its
own ZooKeeper session and sockets. Started as `python -m experiments.worker`, most of its start-up
is Python importing pyarrow, kazoo and the consumer (1–3 s when ten members start at once on two
cores). The launcher imports them once; a member is then a fork of it that runs the same
`experiments.worker.main` with its own pid, session (`setsid`), group id, stderr file and
clients — what `python -m experiments.worker ARGS` would run, without the imports.

    launcher = Launcher("groupshift-exp-1a2b3c", log=Path("logs/launcher.stderr"))
    member = launcher.spawn(["--scheme", "one", ...], stderr=Path("m0.stderr"))
    member.pid; member.poll(); member.send_signal(signal.SIGSTOP); member.kill(); member.wait(10)
    launcher.close()

`Member` answers as `subprocess.Popen` does (`poll`, `wait` raising `TimeoutExpired`, `returncode`
negative for a signal). Protocol, one JSON line each way: on the launcher's stdin
`{"argv": [...], "stderr": PATH, "gid": N or null}`, answered on its stdout by `{"pid": N}` (or
`{"error": ...}`); `{"ready": true}` once its imports are done; `{"exit": PID, "code": N}` when a
member ends. The launcher exits when its stdin closes (its owner closed it, or died); its members
watch the launcher (`core.lifeline`) and stop as on SIGTERM once it is gone.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import queue
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import NoReturn

from core import lifeline
from core.errors import GroupshiftError
from pipeline.backends import MEMBER_MODULES

REPO = Path(__file__).resolve().parent.parent
#: What a member imports: `experiments.worker` and what its consumer loads for each scheme, some of it
#: lazily (`pipeline.backends` imports migrate's bridge when it builds a member); named here only to be
#: imported ahead. A module that is not installed (confluent_kafka without the kafka extra) is left
#: to the member.
PRELOAD = (
    "experiments.worker",
    *MEMBER_MODULES,
    "topics.log",
    "core.zk",
    "experiments.kafka_worker",
    "confluent_kafka",
)


class LauncherError(GroupshiftError):
    """The launcher could not start a member (or is gone); its stderr is in the run's logs."""


# -- the launcher process ---------------------------------------------------------------------------


def _send(message: dict) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


def serve() -> int:
    """Import what members need, then fork a member per request until stdin closes."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # its own session; its owner stops it
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd reports it to the loop
    signal.set_wakeup_fd(wake_w)
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    inherited = [wake_r, wake_w, selector.fileno()]
    _send({"ready": True})
    pending = b""
    try:
        while True:
            for key, _ in selector.select():
                if key.fd == wake_r:
                    os.read(wake_r, 4096)
                    _reap()
                    continue
                data = os.read(0, 65536)
                if not data:
                    return 0  # the owner closed the pipe, or is gone
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    _fork(json.loads(line), inherited)
    except BrokenPipeError:
        return 0  # the owner is gone


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _fork(request: dict, inherited: list[int]) -> None:
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError as exc:
        _send({"error": f"fork: {exc}"})
        return
    if pid == 0:
        _member(request, inherited)
    _send({"pid": pid})


def _member(request: dict, inherited: list[int]) -> NoReturn:
    """In the fork: become the member `python -m experiments.worker ARGV` would be, run it, exit."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in inherited:
            os.close(fd)
        os.setsid()  # a session of its own, as `start_new_session=True`
        if request.get("gid") is not None:
            os.setregid(request["gid"], request["gid"])  # as `Popen(group=)`
        null = os.open(os.devnull, os.O_RDWR)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        for fd, target in ((null, 0), (null, 1), (err, 2)):
            os.dup2(fd, target)
        os.close(null)
        os.close(err)
        os.environ[lifeline.ENV] = str(os.getppid())  # stop once the launcher is gone
        from experiments.worker import main

        code = main(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        traceback.print_exc()
    finally:
        try:  # what the interpreter does at exit: non-daemon threads, atexit, buffered output
            threading._shutdown()  # type: ignore[attr-defined]
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


# -- the owner's side -------------------------------------------------------------------------------


class Launcher:
    """A launcher process of this process's: `spawn` members from it, `close` it last."""

    def __init__(self, name: str = "", log: Path | None = None, timeout_s: float = 120.0):
        self.timeout_s = timeout_s
        self._log = log
        err = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - the child's
        try:
            self._proc = subprocess.Popen(
                # `name` only marks the process (and its members) in `ps`: the run's namespace
                [sys.executable, "-m", "experiments.launcher", *([name] if name else [])],
                cwd=REPO,
                env=dict(os.environ, PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
        finally:
            if log:
                err.close()
        self._replies: queue.Queue[dict] = queue.Queue()
        self._exits: dict[int, int] = {}
        self._changed = threading.Condition()
        self._gone = False
        self._requests = threading.Lock()  # one request, one reply
        self._ready = threading.Event()
        threading.Thread(target=self._read, name="launcher-reader", daemon=True).start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            message = json.loads(line)
            if "exit" in message:
                with self._changed:
                    self._exits[message["exit"]] = message["code"]
                    self._changed.notify_all()
            elif "ready" in message:
                self._ready.set()
            else:
                self._replies.put(message)
        with self._changed:
            self._gone = True
            self._changed.notify_all()
        self._ready.set()
        self._replies.put({"error": "the launcher exited"})

    def wait_ready(self) -> None:
        """Until the launcher has done its imports (a spawn before that waits as long)."""
        if not self._ready.wait(self.timeout_s) or self._gone:
            raise LauncherError(f"the member launcher did not start; see {self._log or 'its stderr'}")

    def spawn(self, argv: list[str], stderr: Path, gid: int | None = None) -> Member:
        """A member running `experiments.worker.main(argv)`, its stderr appended to `stderr`."""
        self.wait_ready()
        request = {"argv": list(argv), "stderr": str(stderr), "gid": gid}
        with self._requests:
            try:
                self._proc.stdin.write((json.dumps(request) + "\n").encode())
                self._proc.stdin.flush()
            except (BrokenPipeError, ValueError) as exc:
                raise LauncherError(f"the member launcher is gone: {exc}") from None
            try:
                reply = self._replies.get(timeout=self.timeout_s)
            except queue.Empty:
                raise LauncherError(f"the member launcher did not answer in {self.timeout_s:g}s") from None
        if "pid" not in reply:
            raise LauncherError(f"the member launcher could not start a member: {reply.get('error')}")
        return Member(self, reply["pid"], argv)

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            return self._exit_code(pid)

    def _exit_code(self, pid: int) -> int | None:
        if pid in self._exits:
            return self._exits[pid]
        if self._gone and not _exists(pid):
            return -signal.SIGKILL  # ended after its launcher: reaped by init, its code unknown
        return None

    def wait(self, pid: int, timeout: float | None) -> int | None:
        """The member's exit code, or None if it still runs after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while (code := self._exit_code(pid)) is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._changed.wait(min(left or 0.1, 0.1) if self._gone else left)
            return code

    def close(self, timeout: float = 10.0) -> None:
        """Close its stdin (it exits; members still running stop once they notice) and reap it."""
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Member:
    """A launched member, as much of `subprocess.Popen` as the experiments use."""

    def __init__(self, launcher: Launcher, pid: int, args: list[str]):
        self.pid, self.args, self._launcher = pid, args, launcher
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._launcher.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.poll() is None:
            self.returncode = self._launcher.wait(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not a pid that may have been reused since
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass  # it exited and was reaped after the launcher last reported it running

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(serve())
