"""The coordinator store's access to ZooKeeper: asyncio futures over kazoo, transactions fenced by a
shard's epoch, and the errors a write ends in.

kazoo's async calls complete on its own threads; `_aio` hands their results to the event loop.
`_commit` runs one transaction, led by `check(epoch, version=<its epoch>)` and `check(leader)`
when it writes a shard's groups, and turns its failure into `Fenced` (another node leads the
shard now, or the session that claimed it is gone), `StoreUnavailable` or a `_TxnFailed` the
caller may retry. `ZkAccess` is the base of `CoordinatorStore` (`coordinator/node/store.py`),
which holds the client, the loop and the shard count these methods use.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from coordinator.layout import epoch_path, leader_path
from core.errors import GroupshiftError

log = logging.getLogger("coordinator.node.store")

# ZooKeeper refuses requests above jute.maxbuffer (1 MiB by default) by dropping the connection,
# which would hurt every shard of the node: refuse such writes before sending them.
MAX_WRITE_BYTES = 900_000
WRITE_TIMEOUT_S = 10.0
# A node starting while a ZooKeeper server restarts (its connection reset mid-request) retries the
# steps of its start for this long before it gives up.
STARTUP_RETRY_S = 60.0
_TRANSIENT = (ConnectionLoss, OperationTimeoutError, TimeoutError, KazooTimeoutError)


class StoreError(GroupshiftError):
    """A ZooKeeper write of the coordinator failed; `kafka_error` is the storage error Kafka would see."""

    kafka_error = 15  # COORDINATOR_NOT_AVAILABLE


class Fenced(StoreError):
    """Another node leads the shard now (its epoch moved on): this node must stop serving it."""

    kafka_error = 6  # NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR


class StoreUnavailable(StoreError):
    """ZooKeeper did not answer in time or the session is gone."""

    kafka_error = 7  # REQUEST_TIMED_OUT


class WriteTooLarge(StoreError):
    """The write would exceed ZooKeeper's request size limit."""

    kafka_error = 10  # MESSAGE_TOO_LARGE


class NodeIdInUse(GroupshiftError):
    """Another live coordinator node is registered with the same node id."""


async def _retrying(what: str, step: Callable[[], Awaitable], within: float = STARTUP_RETRY_S):
    """`step()`, again while ZooKeeper's connection is lost or a request times out, for `within` s."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await step()
        except _TRANSIENT as exc:
            if time.monotonic() > deadline:
                raise
            log.warning("%s: ZooKeeper did not answer (%r); trying again", what, exc)
            await asyncio.sleep(0.25)


class ZkAccess:
    """The ZooKeeper plumbing of `CoordinatorStore` (see the module docstring)."""

    zk: KazooClient
    _loop: asyncio.AbstractEventLoop | None

    async def _ensure_paths(self, paths: Iterable[str]) -> None:
        """`ensure_path` for many paths at once: every path and parent is looked up in one pipelined
        round, then what is missing is created parents first, the creates of a depth sent together
        (a fresh namespace costs a round trip per level, not one per znode)."""
        wanted: set[str] = set()
        for path in paths:
            parts = path.strip("/").split("/")
            wanted.update("/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1))
        ordered = sorted(wanted)
        found = await asyncio.gather(*(self._aio(self.zk.exists_async(p)) for p in ordered))
        by_depth: dict[int, list[str]] = {}
        for p, stat in zip(ordered, found, strict=True):
            if stat is None:
                by_depth.setdefault(p.count("/"), []).append(p)
        for depth in sorted(by_depth):
            results = await asyncio.gather(
                *(self._aio(self.zk.create_async(p, b"")) for p in by_depth[depth]), return_exceptions=True
            )
            for r in results:
                if isinstance(r, BaseException) and not isinstance(r, NodeExistsError):
                    raise r

    def _aio(self, async_result, timeout: float = WRITE_TIMEOUT_S) -> asyncio.Future:
        loop = self._loop
        fut = loop.create_future()

        def settle(ar) -> None:
            if fut.done():
                return
            if ar.successful():
                fut.set_result(ar.value)
            else:
                fut.set_exception(ar.exception)

        async_result.rawlink(lambda ar: loop.call_soon_threadsafe(settle, ar))
        return asyncio.ensure_future(asyncio.wait_for(fut, timeout))

    @property
    def session_id(self) -> int | None:
        """The id of the current ZooKeeper session (None while kazoo has none)."""
        client_id = self.zk.client_id
        return client_id[0] if client_id else None

    async def _commit(self, ops: Callable, shard: int | None, epoch: int | None) -> list:
        """Run one transaction (fenced by the shard epoch when given); raise on failure."""
        txn = self.zk.transaction()
        if shard is not None:
            # Our epoch is still current, and our leader znode still exists: it is ephemeral, so
            # after a session expiry the check fails even when no other node has claimed yet.
            txn.check(epoch_path(shard), epoch)
            txn.check(leader_path(shard), -1)
        ops(txn)
        try:
            results = await self._aio(txn.commit_async())
        except (TimeoutError, KazooTimeoutError, ConnectionLoss, OperationTimeoutError) as exc:
            raise StoreUnavailable(f"ZooKeeper did not answer the write: {exc!r}") from None
        except (SessionExpiredError, KazooException) as exc:
            raise StoreUnavailable(f"ZooKeeper write failed: {exc!r}") from None
        failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failures:
            if shard is not None and any(isinstance(r, BadVersionError | NoNodeError) for r in results[:2]):
                raise Fenced(f"shard {shard}: epoch {epoch} is no longer current")
            raise _TxnFailed(failures[0])
        return results


class _TxnFailed(Exception):
    def __init__(self, cause: Exception):
        super().__init__(repr(cause))
        self.cause = cause
