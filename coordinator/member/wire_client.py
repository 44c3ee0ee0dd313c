"""A small blocking client for the coordinator wire protocol: admin tools, tests, benchmarks.

For code that speaks the wire protocol (docs/protocol.md) request by request: `groupshift groups`
and `migrate` use it as their admin client. The consumer-side member logic is
`coordinator/member/consumer_member.py` (on `group_member.py`); node processes to talk to are in
`coordinator/node/process.py`.
Requests may be pipelined: `send` returns the correlation id, `recv` returns the next
`(id, body)` in the order the node answers.

    with WireClient(host, port, client_id="c1") as c:
        c.request(API_VERSIONS, {})                       # -> {"error_code": 0, "api_keys": [...]}
        body = c.request(JOIN_GROUP, join_body("g", member_id=""))
"""

from __future__ import annotations

import itertools
import select
import socket
import time
from typing import Any

from coordinator.wire import codec as P
from core.errors import GroupshiftError


class WireError(GroupshiftError):
    """The connection to a coordinator node failed or it answered out of order."""


class WireClient:
    """One TCP connection to a coordinator node."""

    def __init__(self, host: str, port: int, client_id: str = "wire-client", timeout: float = 10.0):
        self.address = (host, port)
        self.client_id = client_id
        self.timeout = timeout
        self.sock = socket.create_connection(self.address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._ids = itertools.count(1)
        self._decoder = P.FrameDecoder(max_frame_bytes=64 << 20)
        self._frames: list[bytes] = []

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, api: int, body: Any, v: int = P.VERSION, id: int | None = None) -> int:
        rid = next(self._ids) if id is None else id
        self.sock.sendall(P.encode_request(api, rid, body, self.client_id, v))
        return rid

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, timeout: float | None = None) -> tuple[int, dict[str, Any]]:
        """The next response; raises `WireError` on timeout or when the node closed the connection."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self._frames:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WireError(f"no response from {self.address} in time")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                raise WireError(f"no response from {self.address} in time") from None
            except OSError as exc:
                raise WireError(f"connection to {self.address} failed: {exc}") from None
            if not data:
                raise WireError(f"{self.address} closed the connection")
            self._frames.extend(self._decoder.feed(data))
        return P.decode_response(self._frames.pop(0))

    def request(
        self, api: int, body: Any, timeout: float | None = None, v: int = P.VERSION
    ) -> dict[str, Any]:
        rid = self.send(api, body, v=v)
        got, resp = self.recv(timeout)
        if got != rid:
            raise WireError(f"answer to request {got} arrived while waiting for {rid}")
        return resp

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True once the node has closed this connection (reads until EOF or `timeout`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                continue
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                return True
            if not data:
                return True
        return False


# ---------------------------------------------------------------------------------------------
# Request bodies with every key of docs/protocol.md present


def join_body(
    group_id: str,
    member_id: str = "",
    protocols: list[tuple[str, bytes]] | None = None,
    session_timeout_ms: int = 10_000,
    rebalance_timeout_ms: int = 10_000,
    group_instance_id: str | None = None,
    protocol_type: str = "consumer",
    reason: str | None = None,
) -> dict[str, Any]:
    return {
        "group_id": group_id,
        "session_timeout_ms": session_timeout_ms,
        "rebalance_timeout_ms": rebalance_timeout_ms,
        "member_id": member_id,
        "group_instance_id": group_instance_id,
        "protocol_type": protocol_type,
        "protocols": [{"name": n, "metadata": m} for n, m in (protocols or [("range", b"")])],
        "reason": reason,
    }


def sync_body(
    group_id: str,
    generation_id: int,
    member_id: str,
    assignments: dict[str, bytes] | None = None,
    protocol_type: str | None = "consumer",
    protocol_name: str | None = None,
    group_instance_id: str | None = None,
) -> dict[str, Any]:
    return {
        "group_id": group_id,
        "generation_id": generation_id,
        "member_id": member_id,
        "group_instance_id": group_instance_id,
        "protocol_type": protocol_type,
        "protocol_name": protocol_name,
        "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
    }


def heartbeat_body(group_id: str, generation_id: int, member_id: str, group_instance_id: str | None = None):
    return {
        "group_id": group_id,
        "generation_id": generation_id,
        "member_id": member_id,
        "group_instance_id": group_instance_id,
    }


def commit_body(
    group_id: str,
    generation_id: int,
    member_id: str,
    offsets: dict[tuple[str, int], int],
    metadata: str | None = "",
    group_instance_id: str | None = None,
) -> dict[str, Any]:
    topics: dict[str, list] = {}
    for (t, p), off in offsets.items():
        topics.setdefault(t, []).append(
            {"partition_index": p, "committed_offset": off, "committed_metadata": metadata}
        )
    return {
        "group_id": group_id,
        "generation_id": generation_id,
        "member_id": member_id,
        "group_instance_id": group_instance_id,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }


def fetch_body(group_id: str, partitions: dict[str, list[int]] | None = None) -> dict[str, Any]:
    topics = None
    if partitions is not None:
        topics = [{"name": t, "partition_indexes": ps} for t, ps in partitions.items()]
    return {"group_id": group_id, "topics": topics}


def leave_body(group_id: str, *member_ids: str) -> dict[str, Any]:
    return {
        "group_id": group_id,
        "members": [{"member_id": m, "group_instance_id": None, "reason": None} for m in member_ids],
    }


def committed(fetch_response: dict[str, Any]) -> dict[tuple[str, int], int]:
    """OffsetFetch response -> {(topic, partition): committed offset} (-1 entries left out)."""
    return {
        (t["name"], p["partition_index"]): p["committed_offset"]
        for t in fetch_response["topics"]
        for p in t["partitions"]
        if p["committed_offset"] >= 0
    }
