"""The stream reader's process, started warm: what Spark runs as `python -m
pyspark.sql.streaming.python_streaming_source_runner` when a warm-runner server is up
(`pipeline.spark.warm_runner`, started by `spark_session`; `python_worker.sh` routes the start here).

    python -I -S warm_client.py -m pyspark.sql.streaming.python_streaming_source_runner

It hands its standard streams, environment, directory and arguments to the server, which forks the
runner from an interpreter that imported it already; then it stands for that child, the way Spark
expects its worker process to: the signals it gets (Spark stops the runner with SIGTERM) go to the
child, and it exits with the child's status. If the server cannot be reached or declines (it
serves one module, for one PYTHONPATH), it becomes a fresh interpreter (`exec`), as without it.
Only the standard library, without `site` (`-S`): its own start is what it saves on.
"""

import json
import os
import signal
import socket
import struct
import sys

SOCKET_ENV = "GROUPSHIFT_WARM_RUNNER"  # the server's Unix socket
PYTHON_ENV = "GROUPSHIFT_SPARK_PYTHON"  # the interpreter to become when the server is not used
CONNECT_S = 5.0
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
MAX_MESSAGE = 1 << 20


def send(sock, message, fds=()):
    body = json.dumps(message).encode()
    data = struct.pack(">I", len(body)) + body
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))] if fds else []
    sent = sock.sendmsg([data], ancillary)
    sock.sendall(data[sent:])


def receive(sock, data=b""):
    """The next message (`data`: its first bytes, read already), or None at the end of the stream."""
    while len(data) < 4:
        chunk = sock.recv(4 - len(data))
        if not chunk:
            return None
        data += chunk
    (size,) = struct.unpack(">I", data[:4])
    if size > MAX_MESSAGE:
        raise OSError(f"a message of {size} bytes")
    body = data[4:]
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return json.loads(body)


def fresh(args):
    """Become the interpreter Spark would have started."""
    python = os.environ.get(PYTHON_ENV) or sys.executable
    os.execv(python, [python, *args])


def main(args):
    child = []  # the runner's pid, once the server sent it
    pending = []  # signals that came before it

    def forward(signum, frame):
        if child:
            try:
                os.kill(child[0], signum)
            except ProcessLookupError:
                pass
        else:
            pending.append(signum)

    for sig in FORWARDED:
        if signal.getsignal(sig) is not signal.SIG_IGN:  # one Spark ignores stays ignored
            signal.signal(sig, forward)
    path = os.environ.get(SOCKET_ENV)
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(CONNECT_S)
        sock.connect(path)
        ignored = [sig for sig in FORWARDED if signal.getsignal(sig) is signal.SIG_IGN]
        request = {"args": args, "env": dict(os.environ), "cwd": os.getcwd(), "ignored": ignored}
        send(sock, request, fds=(0, 1, 2))
        reply = receive(sock)
    except (OSError, TypeError, ValueError):
        reply = None
    if not reply or "pid" not in reply:
        if reply and "declined" in reply:  # one line in Spark's log of the worker, then a cold start
            print(f"groupshift: stream reader started cold: {reply['declined']}", file=sys.stderr, flush=True)
        for sig in FORWARDED:
            if signal.getsignal(sig) is forward:
                signal.signal(sig, signal.SIG_DFL)
        for signum in pending:
            os.kill(os.getpid(), signum)
        fresh(args)
    sock.settimeout(None)
    child.append(reply["pid"])
    for signum in pending:
        forward(signum, None)
    while True:
        try:
            reply = receive(sock)
            break
        except InterruptedError:
            continue
    if reply is None or "exit" not in reply:
        return 1  # the server went away before the runner ended
    code = reply["exit"]
    if code < 0:  # killed by a signal: end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
