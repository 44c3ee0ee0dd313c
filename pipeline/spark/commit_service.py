"""How a batch's output reaches the group member that planned it: a commit service on loopback.

The `groupshift` source's member lives in Spark's stream-reader process (one per query, on the
driver's host), not in the process that runs `foreachBatch`. The reader opens this service and
writes its address and a per-reader secret into every offset it plans; the exactly-once writer
asks it to commit a batch once the batch's output is staged. The member commits with the same
call, fenced the same way, as any consumer of the group (`Consumer.commit_planned`).

    service = CommitService(settle, planned)     # settle(offset) -> Settled, in the reader
    settled = request_commit(offset)             # in the writer: Settled(Outcome.COMMITTED, refused)

A commit can be refused for some partitions only (scheme one fences each partition on its own):
`Settled.refused` names them, and only their output is discarded. Outcomes are definite except
`UNKNOWN` (the reader could not be asked, or its commit failed for a
reason other than the fence): the writer then leaves its staged output for `output.recover`,
which publishes it once the group's offset shows it committed and removes it otherwise.
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener

from core.types import TopicPartition
from pipeline.spark.offsets import StreamOffset, decode, encode

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 16 << 20  # an offset of 1,000 topics x 1,000 partitions fits
COMMIT_TIMEOUT_S = 120.0  # a commit retries an unavailable coordinator for its request timeout


class Outcome(StrEnum):
    COMMITTED = "committed"  # the group holds the batch's ends: publish
    FENCED = "fenced"  # the group moved on; the records go to the partitions' owner: discard
    NOT_PLANNER = "not-planner"  # a replay of a batch planned by a reader that is gone: discard
    UNKNOWN = "unknown"  # not known: leave the staged output to recover()


@dataclass(frozen=True)
class Settled:
    outcome: Outcome
    refused: frozenset[TopicPartition] = frozenset()  # with COMMITTED: partitions refused all the same

    def committed(self, tp: TopicPartition) -> bool:
        return self.outcome is Outcome.COMMITTED and tp not in self.refused


class CommitService:
    """The reader's side: a thread answering commit requests on 127.0.0.1 with `settle`."""

    def __init__(
        self,
        settle: Callable[[StreamOffset], Settled],
        planned: Callable[[StreamOffset], bool],
        host: str = "127.0.0.1",
    ):
        self.secret = secrets.token_hex(16)
        self._settle, self._planned = settle, planned
        self._listener = Listener((host, 0), authkey=self.secret.encode())
        host, port = self._listener.address
        self.address = f"{host}:{port}"
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="groupshift-commit-service", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn = self._listener.accept()
            except OSError:  # closed, or a client that failed the secret
                if self._closed.is_set():
                    return
                continue
            _no_delay(conn)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn) -> None:
        with conn:
            try:
                request = json.loads(conn.recv_bytes(MAX_REQUEST_BYTES))
                offset = decode(request["offset"])
                if request.get("op") == "check":
                    settled = Settled(Outcome.COMMITTED if self._planned(offset) else Outcome.NOT_PLANNER)
                else:
                    settled = self._settle(offset)
            except Exception as exc:  # noqa: BLE001 - the writer learns "unknown" and why
                log.warning("commit request failed: %s", exc)
                settled = Settled(Outcome.UNKNOWN)
            answer = {
                "outcome": settled.outcome.value,
                "refused": [list(tp) for tp in sorted(settled.refused)],
            }
            try:
                conn.send_bytes(json.dumps(answer).encode())
            except OSError:
                pass

    def close(self) -> None:
        self._closed.set()
        self._listener.close()


def _no_delay(conn: Connection) -> None:
    """TCP_NODELAY on a connection whose handshake is done. The handshake's last message (the
    client's WELCOME) is followed by the request, a second small write before any answer: with
    Nagle's algorithm on, it waited for the reader's delayed ACK, 40 ms of every commit."""
    sock = socket.socket(fileno=conn.fileno())
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass  # not TCP after all: nothing to turn off
    finally:
        sock.detach()


def planned_by_live_reader(offset: StreamOffset) -> bool:
    """Is the reader that planned `offset` still running (else the batch is a replay after a restart,
    and its records will be planned again from the group's offsets)?"""
    return _ask(offset, "check", 10.0).outcome is Outcome.COMMITTED


def request_commit(offset: StreamOffset, timeout: float = COMMIT_TIMEOUT_S) -> Settled:
    """Ask the reader that planned `offset` to commit it; see `Outcome`."""
    return _ask(offset, "commit", timeout)


def _ask(offset: StreamOffset, op: str, timeout: float) -> Settled:
    host, _, port = offset.address.rpartition(":")
    if not host or not port.isdigit():
        return Settled(Outcome.NOT_PLANNER)
    try:
        conn = Client((host, int(port)), authkey=offset.secret.encode())
    except (ConnectionRefusedError, AuthenticationError):
        return Settled(Outcome.NOT_PLANNER)  # the reader is gone, or another reader took its port
    except OSError as exc:
        log.info("batch planned by %s: its reader does not answer (%s)", offset.member, exc)
        return Settled(Outcome.UNKNOWN)
    _no_delay(conn)
    with conn:
        try:
            conn.send_bytes(json.dumps({"op": op, "offset": encode(offset)}).encode())
            if not conn.poll(timeout):
                return Settled(Outcome.UNKNOWN)
            answer = json.loads(conn.recv_bytes(MAX_REQUEST_BYTES))
            refused = frozenset(TopicPartition(t, int(p)) for t, p in answer.get("refused", []))
            return Settled(Outcome(answer["outcome"]), refused)
        except (OSError, EOFError, ValueError, KeyError, TypeError):
            return Settled(Outcome.UNKNOWN)
