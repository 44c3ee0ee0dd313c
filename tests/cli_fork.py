"""`python -m cli` for many short commands at the cost of one interpreter start.

A server process imports the CLI and its libraries once, then forks a child per command. The
child runs `python -m cli` as the interpreter's `-m` does (`runpy`, `__main__`) with the command's
arguments, environment, working directory and stdin; its stdout and stderr go to files the server
sends back. The child exits as an interpreter does: threads joined, exit functions run, streams
flushed, its exit status the command's.

    forks = CliForks()                                   # or shared(): this process's one
    done = forks.run(["topics", "create", "a/b"], env)   # a subprocess.CompletedProcess
    done.returncode, done.stderr                         # bytes, as subprocess.run gives them
    forks.close()

What differs from a fresh `python -m cli`: the CLI's modules, kazoo, numpy and pyarrow are imported
already (each module still imports on its own: tests/unit/repo/test_import_layers.py), so an
import-time failure would not show here; none of them reads its environment at import time, and
PySpark is not among them (a `consume` imports it, and starts its driver, in the child). Meant for
commands that exit by themselves — refusals, reads, a `consume --until-idle`; a command that serves
until stopped (`zk start`, `coordinator serve`) belongs in a `python -m cli` process the test
manages. A command that overstays its timeout is killed with its process group. The server reads
its requests from a pipe of its own and stops when the pipe closes (the test process ended,
however it ended).
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from core.forked_main import become_main

REPO = Path(__file__).resolve().parents[1]
# The CLI and the libraries its commands import: what a fresh interpreter spends its start on.
PRELOAD = (
    "cli.main",
    "cli.cmd_topics",
    "cli.cmd_offsets",
    "cli.cmd_groups",
    "cli.cmd_acls",
    "cli.cmd_users",
    "cli.cmd_zk",
    "cli.cmd_coordinator",
    "cli.cmd_migrate",
    "cli.cmd_consume",
    "cli.cmd_demo",
    "cli.cmd_experiment",
    "topics.store",
    "core.zk",
    "kazoo.client",
    "pyarrow",
    "pyarrow.parquet",
    "numpy",
    "msgspec",
)
MAX_MESSAGE = 64 << 20


def _send(fd: int, message: dict) -> None:
    body = json.dumps(message).encode()
    data = struct.pack(">I", len(body)) + body
    while data:
        data = data[os.write(fd, data) :]


def _receive(fd: int) -> dict | None:
    def exactly(n: int) -> bytes | None:
        chunks, left = [], n
        while left:
            chunk = os.read(fd, left)
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    head = exactly(4)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size > MAX_MESSAGE:
        raise ValueError(f"a message of {size} bytes")
    body = exactly(size)
    return None if body is None else json.loads(body)


class CliForks:
    """The client: one server process, one command at a time (callers on several threads wait)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        req_r, self._req = os.pipe()
        self._rep, rep_w = os.pipe()
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.server = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_fork", str(req_r), str(rep_w)],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            pass_fds=(req_r, rep_w),
        )
        os.close(req_r)
        os.close(rep_w)

    def run(
        self,
        args: list[str],
        env: dict[str, str],
        stdin: bytes | str | None = None,
        timeout: float = 60,
        cwd: str | os.PathLike | None = None,
        text: bool = False,
    ) -> subprocess.CompletedProcess:
        """`subprocess.run([python, "-m", "cli", *args], env=env, cwd=cwd, input=stdin,
        capture_output=True, timeout=timeout, text=text)`, in a forked child."""
        if isinstance(stdin, str):
            stdin = stdin.encode()
        request = {
            "args": list(args),
            "env": dict(env),
            "stdin": base64.b64encode(stdin or b"").decode(),
            "timeout": timeout,
            "cwd": str(cwd or REPO),
        }
        with self._lock:
            _send(self._req, request)
            reply = _receive(self._rep)
        if reply is None:
            raise RuntimeError(f"the CLI fork server exited ({self.server.wait()})")
        argv = [sys.executable, "-m", "cli", *args]
        out, err = base64.b64decode(reply["stdout"]), base64.b64decode(reply["stderr"])
        if reply["timed_out"]:
            raise subprocess.TimeoutExpired(argv, timeout, out, err)
        if text:
            out, err = out.decode(errors="replace"), err.decode(errors="replace")
        return subprocess.CompletedProcess(argv, reply["returncode"], out, err)

    def close(self) -> None:
        os.close(self._req)
        os.close(self._rep)
        try:
            self.server.wait(10)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()


_shared: CliForks | None = None
_shared_lock = threading.Lock()


def shared() -> CliForks:
    """This test process's server, started on first use; it stops when the process exits."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.server.poll() is not None:
            _shared = CliForks()
        return _shared


# ---------------------------------------------------------------------------------------- server


def _child(request: dict, stdin: str, stdout: str, stderr: str, keep: tuple[int, ...]) -> None:
    """In the forked child: become `python -m cli ARGS` and exit with its status. Never returns."""
    try:
        os.setpgid(0, 0)  # the server kills the command's whole group if it overstays
        for fd, path, flags in (
            (0, stdin, os.O_RDONLY),
            (1, stdout, os.O_WRONLY | os.O_TRUNC),
            (2, stderr, os.O_WRONLY | os.O_TRUNC),
        ):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        for fd in keep:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(1)
    become_main("cli", request["args"])


def _serve(req_fd: int, rep_fd: int) -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    work = Path(tempfile.mkdtemp(prefix="cli-fork-"))
    paths = {name: str(work / name) for name in ("stdin", "stdout", "stderr")}
    try:
        while (request := _receive(req_fd)) is not None:
            Path(paths["stdin"]).write_bytes(base64.b64decode(request["stdin"]))
            for name in ("stdout", "stderr"):
                Path(paths[name]).write_bytes(b"")
            pid = os.fork()
            if pid == 0:
                _child(request, paths["stdin"], paths["stdout"], paths["stderr"], (req_fd, rep_fd))
            pidfd = os.pidfd_open(pid)
            try:
                ready, _, _ = select.select([pidfd], [], [], request["timeout"])
                timed_out = not ready
                if timed_out:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                _, status = os.waitpid(pid, 0)
            finally:
                os.close(pidfd)
            _send(
                rep_fd,
                {
                    "returncode": os.waitstatus_to_exitcode(status),
                    "timed_out": timed_out,
                    "stdout": base64.b64encode(Path(paths["stdout"]).read_bytes()).decode(),
                    "stderr": base64.b64encode(Path(paths["stderr"]).read_bytes()).decode(),
                },
            )
    finally:
        for path in paths.values():
            Path(path).unlink(missing_ok=True)
        work.rmdir()


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))
