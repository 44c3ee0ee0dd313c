"""The node's copy of Kafka's ACLs (`--authorizer acl`): loaded at start, kept current by watches on
the change notifications, never blocking the event loop.

As Kafka's `AclAuthorizer` does it: at start every resource's ACLs are read
(`security.acl_store.AclStore.load_all`), and a children watch on each change root
(`/kafka-acl-changes`, `/kafka-acl-extended-changes`) reports the notifications writers create;
each new one names a resource whose ACLs are read again. The notifications present when the
watch is set are the baseline (the full load that follows covers them). Reads run in a worker
thread; the decisions (`security.acls.Authorizer`) are updated on the event loop, the only thread
that asks them. Notifications older than 15 minutes are purged, at most once a minute, as Kafka's
brokers do. After a lost ZooKeeper session every ACL is read again (the notifications of the time
away may have been purged meanwhile); until then the node decides on what it had.

    cache = AclCache(zk, super_users=("User:admin",))
    await cache.start()                       # before the listeners accept anyone
    node._spawn(cache.run())
    cache.authorizer.authorize("User:alice", "10.0.0.7", READ, GROUP, "billing")
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState

from core.zk import KAZOO_REFUSALS
from security.acl_store import CHANGE_ROOTS, AclStore, change_seq
from security.acls import AclError, Authorizer, ResourcePattern

log = logging.getLogger("coordinator.node.acls")

PURGE_EVERY_S = 60.0
RETRY_S = 1.0  # after a failed read of changes (ZooKeeper away), the next try


class AclCache:
    """See the module docstring."""

    def __init__(self, zk: KazooClient, super_users: Iterable[str] = ()):
        self.store = AclStore(zk)
        self.authorizer = Authorizer(super_users)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._seen: dict[str, int] = {}  # change root -> highest sequence number applied
        self._children: dict[str, list[str]] = {}  # change root -> its latest listing
        self._wake = asyncio.Event()
        self._purged_at = 0.0
        self._watches: list[object] = []
        self._reload = False  # a full load is due (the session was lost)
        self.changes_applied = 0

    async def start(self) -> None:
        """Create Kafka's ACL roots if missing, watch the change roots, load every ACL."""
        self._loop = asyncio.get_running_loop()
        self.authorizer.replace(await asyncio.to_thread(self._start))
        log.info(
            "ACLs loaded: %d resource patterns",
            len(self.authorizer.acls()),
            extra={"event": "acls_loaded"},
        )

    def _start(self) -> dict:  # a worker thread
        self.store.ensure_layout()
        if not self._watches:
            self.store.zk.add_listener(self._on_session)
        for root in CHANGE_ROOTS.values():
            if root not in self._seen:  # (a retried start keeps the watches it set)
                self._watches.append(self.store.zk.ChildrenWatch(root, self._watcher(root)))
        return self.store.load_all()

    def _watcher(self, root: str):
        def changed(children: list[str]) -> None:  # kazoo's thread (the first call: the caller's)
            if root not in self._seen:  # the baseline: the full load covers these
                self._seen[root] = max((s for s in map(change_seq, children) if s is not None), default=-1)
                self._children[root] = list(children)
                return
            self._loop.call_soon_threadsafe(self._listed, root, list(children))

        return changed

    def _listed(self, root: str, children: list[str]) -> None:
        self._children[root] = children
        self._wake.set()

    def _on_session(self, state: str) -> None:  # kazoo's thread
        if state == KazooState.LOST:
            self._loop.call_soon_threadsafe(self._lost)

    def _lost(self) -> None:
        self._reload = True
        self._wake.set()

    async def run(self) -> None:
        """Apply the notifications as they come (a task of the node); one step at a time, so a
        full load and a notification's read never overtake each other."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._step()
            except KAZOO_REFUSALS:
                raise  # no retry can read them: the node stops rather than enforce stale ACLs
            except (KazooException, AclError, OSError, TimeoutError) as exc:
                log.warning("reading ACL changes failed (%s); trying again", exc)
            except Exception:  # noqa: BLE001 - the ACLs must keep following ZooKeeper
                log.exception("applying ACL changes failed; trying again")
            else:
                continue
            await asyncio.sleep(RETRY_S)
            self._wake.set()

    async def _step(self) -> None:
        if self._reload:
            self._reload = False  # (a session lost again meanwhile asks again)
            try:
                acls = await asyncio.to_thread(self.store.load_all)
            except BaseException:
                self._reload = True
                raise
            self.authorizer.replace(acls)
            log.info("ACLs loaded again after a lost ZooKeeper session", extra={"event": "acls_loaded"})
        listings = dict(self._children)
        changed = await asyncio.to_thread(self._read_changes, listings)
        for root, seq, pattern, entries in changed:
            self.authorizer.set_acls(pattern, entries)
            self._seen[root] = max(self._seen.get(root, -1), seq)
            self.changes_applied += 1
            log.info(
                "ACLs of %s changed: %d entries",
                pattern,
                len(entries),
                extra={"event": "acls_changed", "resource": str(pattern)},
            )

    def _read_changes(self, listings: dict[str, list[str]]) -> list[tuple]:
        """The new notifications of every root, in order, each with its resource's entries now."""
        out = []
        for root, children in listings.items():
            seen = self._seen.get(root, -1)
            new = sorted((s, c) for c in children if (s := change_seq(c)) is not None and s > seen)
            patterns: dict[ResourcePattern, int] = {}
            for seq, child in new:
                change = self.store.read_change(root, child)
                if change is None:
                    continue  # purged already: a later notification or the load covers it
                patterns[change[0]] = seq
            for pattern, seq in patterns.items():
                out.append((root, seq, pattern, self.store.read(pattern)[0]))
        now = time.monotonic()
        if now - self._purged_at > PURGE_EVERY_S:
            self._purged_at = now
            for root, children in listings.items():
                self.store.purge_changes(root, children, int(time.time() * 1000))
        return out
