"""zkclient's `retryUntilConnected` over kazoo: blocking ZooKeeper calls that survive disconnects.

Kafka 0.8 wraps every ZooKeeper call in zkclient, which retries on connection loss and session
expiry until it is connected again, with no time limit. kazoo's blocking calls, by contrast, can
hang forever when a request is queued in a session that then expires (a kazoo behaviour). `ZkCalls`
issues async requests, waits in short slices, re-issues after connection loss or a lost session,
and aborts only when its owner closes. ZooKeeper's refusals (`NoAuth` under a znode's ACL, or
`AuthFailed` for the credential) are not retried: they raise `core.zk.ZooKeeperNoAuth`, one line
naming the znode and what to do, which the member turns into a clean stop. Every request is
written to the event log (`zk` events: op and path, plus the rebalance round and attempt when made
by a rebalance), which is what H3 counts.

    calls = ZkCalls(kazoo_client, event_log, closing=threading.Event())
    calls.read_maybe("/consumers/g/offsets/t/0")     # ("42", ZnodeStat) or None
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.protocol.states import KazooState, KeeperState

from core.zk import KAZOO_REFUSALS, ZooKeeperNoAuth, refused_by_acl
from zk_rebalance.events import EventLog

_RETRYABLE = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)


class Closing(Exception):
    """The owner is closing: a blocked ZooKeeper call was abandoned."""


class ZkCalls:
    """Counted, retry-until-connected ZooKeeper operations on one kazoo client."""

    def __init__(self, client: KazooClient, events: EventLog, closing: threading.Event):
        self.client = client
        self.events = events
        self.closing = closing
        self.connected = threading.Event()
        self.lost_count = 0
        self.context = threading.local()  # {"round": r, "attempt": a} on the rebalancing thread
        if client.connected:
            self.connected.set()
        client.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self.connected.set()
        else:
            self.connected.clear()
            if state == KazooState.LOST:
                self.lost_count += 1

    def call(self, op: str, path: str, fn: Callable, *args, **kw):
        """One logical request, re-issued until it completes; application errors (NoNode...) raise,
        ZooKeeper's refusals as `ZooKeeperNoAuth`."""
        while True:
            while not self.connected.is_set():
                if self.closing.is_set():
                    raise Closing()
                if self.client.client_state == KeeperState.AUTH_FAILED:
                    # kazoo stops reconnecting once the server refused the credential
                    raise self.refused(op, path, AuthFailedError())
                self.connected.wait(0.1)
            if self.closing.is_set():
                raise Closing()
            lost = self.lost_count
            self.events.emit("zk", op=op, path=path, **(getattr(self.context, "value", None) or {}))
            try:
                result = fn(*args, **kw)
                while not result.wait(0.1):
                    if self.closing.is_set():
                        raise Closing()
                    if self.lost_count != lost:
                        break  # queued in a session that expired: kazoo dropped it; re-issue
                else:
                    return result.get()
            except KAZOO_REFUSALS as exc:
                raise self.refused(op, path, exc) from None
            except _RETRYABLE:
                self.connected.wait(0.1)
            except ConnectionClosedError:
                if self.closing.is_set():
                    raise Closing() from None
                time.sleep(0.1)

    def refused(self, op: str, path: str, exc: Exception) -> ZooKeeperNoAuth:
        """The one-line error for a refused request, logged as a `zk_refused` event."""
        self.events.emit("zk_refused", op=op, path=path, error=type(exc).__name__)
        return refused_by_acl(exc, path)

    def get_children(self, path: str, watch=None) -> list[str]:
        return self.call("getChildren", path, self.client.get_children_async, path, watch=watch)

    def children_maybe(self, path: str, watch=None) -> list[str]:
        """`getChildrenParentMayNotExist`."""
        try:
            return self.get_children(path, watch)
        except NoNodeError:
            return []

    def read(self, path: str, watch=None):
        return self.call("getData", path, self.client.get_async, path, watch=watch)

    def read_maybe(self, path: str):
        """`readDataMaybeNull`: (text, stat) or None."""
        try:
            data, stat = self.read(path)
        except NoNodeError:
            return None
        return data.decode("utf-8"), stat

    def exists(self, path: str, watch=None):
        return self.call("exists", path, self.client.exists_async, path, watch=watch)

    def create(self, path: str, data: bytes, ephemeral: bool = False) -> None:
        """Create, making persistent empty parents on NoNode (`createParentPath`)."""
        self.call("create", path, self.client.create_async, path, data, ephemeral=ephemeral, makepath=True)

    def set(self, path: str, data: bytes):
        return self.call("setData", path, self.client.set_async, path, data)

    def delete(self, path: str) -> None:
        """`ZkUtils.deletePath`: unconditional, NoNode ignored."""
        try:
            self.call("delete", path, self.client.delete_async, path)
        except NoNodeError:
            pass

    def ensure(self, path: str) -> None:
        self.call("ensure", path, self.client.ensure_path_async, path)

    def sync(self, path: str) -> None:
        self.call("sync", path, self.client.sync_async, path)

    def multi(self, path: str, build: Callable) -> list:
        """A transaction built by `build(tx)`; returns kazoo's per-op results (exceptions on failure).
        An op refused by a znode's ACL raises `ZooKeeperNoAuth` instead."""

        def commit_async():
            tx = self.client.transaction()
            build(tx)
            return tx.commit_async()

        results = self.call("multi", path, commit_async)
        refused = next((r for r in results if isinstance(r, KAZOO_REFUSALS)), None)
        if refused is not None:
            raise self.refused("multi", path, refused)
        return results


def failed(results: list) -> list[Exception]:
    """The errors of a failed `multi` (kazoo reports each op's result or exception)."""
    return [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
