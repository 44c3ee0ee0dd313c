"""The coordinator's shared metadata in ZooKeeper: registration, shard leadership, groups and offsets.

The znodes, their names and payloads are `coordinator/layout.py`'s (pure; documented in
`docs/coordinator.md`); this is the node's asyncio access to them through one kazoo client.

A node becomes leader of shard `s` with one transaction that creates the ephemeral `leader` znode
and bumps `epoch` (expected version = the version it read), so the new epoch is the version after
the bump. Every later write of the leader is a transaction that starts with
`check(epoch, version=<its epoch>)` and `check(leader)` (it exists): once another node has taken
the shard (and bumped the epoch), or the leader znode is gone because the session that created it
expired, a stale leader's writes fail as a whole and it learns it was fenced (`Fenced`). A leader
epoch is therefore valid only in the ZooKeeper session that claimed it: after a session expiry the
node must claim again, which gives it a new epoch. A node whose session survived an outage but
that gave its shards up meanwhile reclaims its own leader znode in one transaction (delete it,
create it again, bump the epoch), so that reclaim also yields a new epoch.

    store = CoordinatorStore(zk, node_id=1, shards=50)
    await store.start()
    await store.register("127.0.0.1", 9092)
    epoch = await store.claim_shard(7, "127.0.0.1", 9092)   # None when another node leads it
    snapshots = await store.load_shard(7)                    # list[GroupSnapshot]
    await store.commit_offsets(7, epoch, "g", [OffsetRecord("t", 0, 42, "", now_ms)], generation=3)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import msgspec
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
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from coordinator.group.records import GroupRecord, GroupSnapshot, OffsetRecord
from coordinator.layout import (
    BROKERS,
    COORDINATORS,
    DEFAULT_SHARDS,
    GROUPS,
    MAX_NODES,
    CoordinatorRecord,
    KafkaEndpoint,
    LeaderRecord,
    broker_json,
    decode_coordinator,
    decode_group,
    decode_leader,
    decode_offset,
    encode_coordinator,
    encode_group,
    encode_leader,
    encode_offset,
    group_path,
    name_from_znode,
    offset_path,
    shard_of,
    shard_path,
    znode_name,
)
from core.errors import GroupshiftError
from core.types import TopicPartition

log = logging.getLogger(__name__)

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


def _kafka_fields(kafka: KafkaEndpoint | None) -> dict:
    return {} if kafka is None else {"kafka_host": kafka[0], "kafka_port": kafka[1]}


# ---------------------------------------------------------------------------------------------
# The store


class CoordinatorStore:
    """Async (asyncio) access to the coordinator's znodes through one kazoo client.

    kazoo's async calls complete on its own threads; results are handed to the event loop. The
    store remembers which offset znodes exist for the groups of the shards it leads, so that an
    OffsetCommit is a single transaction of `create`s and `set_data`s.
    """

    def __init__(self, zk: KazooClient, node_id: int, shards: int = DEFAULT_SHARDS):
        self.zk = zk
        self.node_id = node_id
        self.shards = shards
        self._loop: asyncio.AbstractEventLoop | None = None
        self._existing: set[str] = set()  # znodes known to exist (groups of shards we lead)
        self.leaders: dict[int, LeaderRecord | None] = {}
        self.coordinators: set[int] = set()
        # The live nodes' registrations (their addresses), for DescribeCluster: a member keeps its
        # list of nodes current from it. Written by kazoo's threads; readers copy it.
        self.registrations: dict[int, CoordinatorRecord] = {}
        self._watches: list[object] = []
        self._listeners: list[Callable[[], None]] = []

    # -- plumbing ----------------------------------------------------------------------------

    async def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Create the persistent znodes of the layout that are missing (every shard's `epoch`)."""
        self._loop = loop or asyncio.get_running_loop()
        paths = [COORDINATORS, GROUPS, BROKERS, *(f"{shard_path(s)}/epoch" for s in range(self.shards))]
        await _retrying("creating the layout", lambda: self._ensure_paths(paths))

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
            txn.check(f"{shard_path(shard)}/epoch", epoch)
            txn.check(f"{shard_path(shard)}/leader", -1)
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

    def add_listener(self, fn: Callable[[], None]) -> None:
        """`fn` runs on the event loop whenever shard leaders or live coordinators change."""
        self._listeners.append(fn)

    def _notify(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            for fn in self._listeners:
                loop.call_soon_threadsafe(fn)

    # -- registration and watches ------------------------------------------------------------

    async def register(
        self, host: str, port: int, wait_s: float = 30.0, kafka: KafkaEndpoint | None = None
    ) -> None:
        """Register this node under `/groupshift/coordinators/ids` and `/brokers/ids` (ephemeral).

        A znode left by a previous process with the same id (killed, session not yet expired) is
        waited for up to `wait_s`; a live one raises `NodeIdInUse`. A lost connection is retried (a
        create that landed before it is found again as this session's own znode).
        """
        await _retrying("registering", lambda: self._register(host, port, wait_s, kafka))

    async def _register(self, host: str, port: int, wait_s: float, kafka: KafkaEndpoint | None) -> None:
        now = int(time.time() * 1000)
        mine = encode_coordinator(CoordinatorRecord(host, port, now, **_kafka_fields(kafka)))
        for path, data in (
            (f"{COORDINATORS}/{self.node_id}", mine),
            (f"{BROKERS}/{self.node_id}", broker_json(host, port, now, kafka)),
        ):
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    await self._aio(self.zk.create_async(path, data, ephemeral=True))
                    break
                except NodeExistsError:
                    try:
                        _, stat = await self._aio(self.zk.get_async(path))
                    except NoNodeError:
                        continue
                    if stat.ephemeralOwner == self.zk.client_id[0]:
                        await self._aio(self.zk.set_async(path, data))
                        break
                    if time.monotonic() > deadline:
                        raise NodeIdInUse(
                            f"{path} is held by another live ZooKeeper session; "
                            "give this coordinator a different --node-id"
                        ) from None
                    await asyncio.sleep(0.2)

    async def unregister(self) -> None:
        for path in (f"{COORDINATORS}/{self.node_id}", f"{BROKERS}/{self.node_id}"):
            try:
                await self._aio(self.zk.delete_async(path))
            except (NoNodeError, KazooException, TimeoutError):
                pass

    def watch(self) -> None:
        """Keep `leaders` (per shard) and `coordinators` (live node ids) current from watches."""

        def on_coordinators(children) -> None:
            ids = {int(c) for c in children if c.isdigit()}
            self.coordinators = ids
            for gone in set(self.registrations) - ids:
                self.registrations.pop(gone, None)
            # Every registration is read again: a node replaced under the same id between two
            # events leaves the same children but a new address.
            for node in sorted(ids)[:MAX_NODES]:
                self.zk.get_async(f"{COORDINATORS}/{node}").rawlink(self._registration_read(node))
            self._notify()

        self._watches.append(ChildrenWatch(self.zk, COORDINATORS, on_coordinators))

        def leader_watcher(s: int) -> Callable:
            # kazoo calls a DataWatch function with (data, stat, event) when it accepts three
            # arguments, so the shard must not be a defaulted third parameter: bind it here.
            def on_leader(data, stat, event=None) -> None:
                record = None
                if data:
                    try:
                        record = decode_leader(data)
                    except (msgspec.DecodeError, msgspec.ValidationError):
                        log.warning("unreadable leader znode of shard %d: %r", s, data[:100])
                self.leaders[s] = record
                self._notify()

            return on_leader

        def leader_watch(s: int) -> DataWatch:
            return DataWatch(self.zk, f"{shard_path(s)}/leader", leader_watcher(s))

        # A DataWatch reads its znode before it returns (one or two round trips): the shards' are
        # set up side by side, so their reads travel together.
        with ThreadPoolExecutor(min(self.shards, 8), thread_name_prefix="leader-watch") as pool:
            self._watches.extend(pool.map(leader_watch, range(self.shards)))

    def _registration_read(self, node: int) -> Callable:
        def done(result) -> None:
            try:
                record = decode_coordinator(result.get()[0])
            except (NoNodeError, KazooException, msgspec.DecodeError, msgspec.ValidationError):
                self.registrations.pop(node, None)
                return
            if node in self.coordinators:
                self.registrations[node] = record

        return done

    # -- shard leadership --------------------------------------------------------------------

    async def claim_shard(
        self, shard: int, host: str, port: int, kafka: KafkaEndpoint | None = None
    ) -> int | None:
        """Become leader of `shard`; return the new epoch, or None when another node leads it.

        A leader znode of this node created in the current session (left from before the node
        gave the shard up, e.g. while ZooKeeper was away) is replaced in the same transaction, so
        the node reclaims the shard with a new epoch.
        """
        epoch_path = f"{shard_path(shard)}/epoch"
        leader_path = f"{shard_path(shard)}/leader"
        try:
            _, stat = await self._aio(self.zk.get_async(epoch_path))
        except NoNodeError:
            await self._aio(self.zk.create_async(epoch_path, b"", makepath=True))
            _, stat = await self._aio(self.zk.get_async(epoch_path))
        stale = await self._own_leader_stat(shard)
        if stale is False:
            return None
        epoch = stat.version + 1
        record = LeaderRecord(self.node_id, epoch, host, port, **_kafka_fields(kafka))
        leader = encode_leader(record)
        txn = self.zk.transaction()
        if stale is not None:
            txn.delete(leader_path, version=stale.version)
        txn.create(leader_path, leader, ephemeral=True)
        txn.set_data(epoch_path, str(self.node_id).encode(), version=stat.version)
        results = await self._aio(txn.commit_async())
        if any(isinstance(r, Exception) for r in results):
            return None
        self.leaders[shard] = record
        return epoch

    async def _own_leader_stat(self, shard: int):
        """None when `shard` has no leader znode; its stat when the znode is this node's, in this
        session; False when it belongs to another node or another session (leave it alone)."""
        try:
            data, stat = await self._aio(self.zk.get_async(f"{shard_path(shard)}/leader"))
        except NoNodeError:
            return None
        try:
            record = decode_leader(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return False
        if record.node != self.node_id or stat.ephemeralOwner != self.session_id:
            return False
        return stat

    async def release_stale(self, shard: int) -> None:
        """Delete this node's leader znode of a shard it no longer serves (created in this session),
        so that the shard's preferred node can take it at once."""
        stat = await self._own_leader_stat(shard)
        if stat:
            try:
                await self._aio(self.zk.delete_async(f"{shard_path(shard)}/leader", version=stat.version))
            except (NoNodeError, BadVersionError):
                pass

    async def release_shard(self, shard: int, epoch: int) -> None:
        """Give up `shard` (delete our leader znode if it is still ours) and forget its znodes."""
        path = f"{shard_path(shard)}/leader"
        self._forget(lambda g: shard_of(g, self.shards) == shard)
        try:
            data, stat = await self._aio(self.zk.get_async(path))
            record = decode_leader(data)
            if record.node == self.node_id and record.epoch == epoch:
                await self._aio(self.zk.delete_async(path, version=stat.version))
        except (NoNodeError, BadVersionError, msgspec.DecodeError, KazooException, TimeoutError):
            pass

    async def read_leader(self, shard: int) -> LeaderRecord | None:
        """The shard's leader as ZooKeeper has it now (not the watched copy)."""
        try:
            data, _ = await self._aio(self.zk.get_async(f"{shard_path(shard)}/leader"))
        except NoNodeError:
            return None
        try:
            return decode_leader(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None

    def forget_shard(self, shard: int) -> None:
        """Forget which znodes exist for the groups of `shard` (we no longer lead it)."""
        self._forget(lambda g: shard_of(g, self.shards) == shard)

    def _forget(self, which: Callable[[str], bool]) -> None:
        prefix = GROUPS + "/"
        self._existing = {
            p for p in self._existing if not which(name_from_znode(p[len(prefix) :].split("/", 1)[0]))
        }

    # -- loading -----------------------------------------------------------------------------

    async def load_shard(self, shard: int) -> list[GroupSnapshot]:
        """Every group of `shard` with its metadata and offsets (and remember which znodes exist)."""
        names = await self._aio(self.zk.get_children_async(GROUPS))
        mine = [n for n in names if shard_of(name_from_znode(n), self.shards) == shard]
        loaded = await asyncio.gather(*(self._load_group(n) for n in mine))
        return [g for g in loaded if g is not None]

    async def _load_group(self, znode: str) -> GroupSnapshot | None:
        gpath = f"{GROUPS}/{znode}"
        group_id = name_from_znode(znode)
        try:
            data, _ = await self._aio(self.zk.get_async(gpath))
        except NoNodeError:
            return None
        try:
            record = decode_group(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.warning("group %r: unreadable metadata znode ignored", group_id)
            record = None
        self._existing.add(gpath)
        loaded = GroupSnapshot(group_id, record, [])
        try:
            topics = await self._aio(self.zk.get_children_async(f"{gpath}/offsets"))
        except NoNodeError:
            return loaded
        self._existing.add(f"{gpath}/offsets")
        for tz in topics:
            tpath = f"{gpath}/offsets/{tz}"
            try:
                parts = await self._aio(self.zk.get_children_async(tpath))
            except NoNodeError:
                continue
            self._existing.add(tpath)
            datas = await asyncio.gather(
                *(self._aio(self.zk.get_async(f"{tpath}/{p}")) for p in parts if p.lstrip("-").isdigit()),
                return_exceptions=True,
            )
            for p, result in zip([p for p in parts if p.lstrip("-").isdigit()], datas, strict=True):
                if isinstance(result, BaseException):
                    continue
                try:
                    loaded.offsets.append(decode_offset(name_from_znode(tz), int(p), result[0]))
                except (msgspec.DecodeError, msgspec.ValidationError):
                    log.warning("group %r: unreadable offset znode %s/%s ignored", group_id, tpath, p)
                    continue
                self._existing.add(f"{tpath}/{p}")
        return loaded

    # -- writes (all fenced by the shard epoch) ----------------------------------------------

    async def write_group(self, shard: int, epoch: int, record: GroupRecord) -> None:
        """Persist the group metadata (on an accepted assignment, or when the group turns Empty)."""
        path = group_path(record.group_id)
        data = encode_group(record)
        if len(data) > MAX_WRITE_BYTES:
            raise WriteTooLarge(f"group {record.group_id!r} metadata is {len(data)} bytes")

        def ops(txn) -> None:  # asks at each attempt: `_retrying` re-reads what exists after a miss
            if path in self._existing:
                txn.set_data(path, data)
            else:
                txn.create(path, data)

        await self._retrying(shard, epoch, [path], ops)
        self._existing.add(path)

    async def commit_offsets(
        self, shard: int, epoch: int, group_id: str, offsets: list[OffsetRecord], generation: int = -1
    ) -> None:
        """Write every offset of one OffsetCommit in one transaction."""
        gpath = group_path(group_id)
        writes = [
            (offset_path(group_id, r.topic, r.partition), encode_offset(r, generation)) for r in offsets
        ]
        size = sum(len(p) + len(d) + 40 for p, d in writes)
        if size > MAX_WRITE_BYTES:
            raise WriteTooLarge(f"offset commit of {len(writes)} partitions is about {size} bytes")
        paths = [p for p, _ in writes]

        def ops(txn) -> None:
            made = set()
            for path, data in writes:
                if path in self._existing:
                    txn.set_data(path, data)
                    continue
                for parent in _parents(path, gpath):
                    if parent not in self._existing and parent not in made:
                        txn.create(parent, b"")
                        made.add(parent)
                txn.create(path, data)

        await self._retrying(shard, epoch, [gpath, *paths], ops)
        for path in paths:
            self._existing.update(_parents(path, gpath))
            self._existing.add(path)

    async def delete_offsets(
        self, shard: int, epoch: int, group_id: str, partitions: Iterable[TopicPartition]
    ) -> None:
        """Delete the listed offsets of a group (OffsetDelete, retention) in one transaction."""
        paths = [offset_path(group_id, t, p) for t, p in partitions]
        paths = [p for p in paths if p in self._existing]
        if not paths:
            return

        def ops(txn) -> None:
            for path in paths:
                txn.delete(path)

        await self._retrying(shard, epoch, [group_path(group_id), *paths], ops)
        self._existing.difference_update(paths)

    async def delete_group(self, shard: int, epoch: int, group_id: str) -> None:
        """Delete the group's znode and all its offsets (DeleteGroups, expiry of an Empty group)."""
        gpath = group_path(group_id)
        for attempt in range(3):
            paths = await self._subtree(gpath)
            if not paths:
                break
            batches = [paths[i : i + 500] for i in range(0, len(paths), 500)]
            try:
                for batch in batches:

                    def ops(txn, batch=batch) -> None:
                        for path in batch:
                            txn.delete(path)

                    await self._commit(ops, shard, epoch)
                break
            except _TxnFailed:
                if attempt == 2:
                    raise StoreError(f"could not delete group {group_id!r}") from None
        self._existing = {p for p in self._existing if p != gpath and not p.startswith(gpath + "/")}

    async def _subtree(self, path: str) -> list[str]:
        """`path` and its descendants, children before parents."""
        try:
            children = await self._aio(self.zk.get_children_async(path))
        except NoNodeError:
            return []
        out: list[str] = []
        for child in children:
            out.extend(await self._subtree(f"{path}/{child}"))
        out.append(path)
        return out

    async def _retrying(self, shard: int, epoch: int, paths: list[str], ops: Callable) -> None:
        """Commit; if our idea of which znodes exist was wrong, re-read them and try once more."""
        try:
            await self._commit(ops, shard, epoch)
            return
        except _TxnFailed as exc:
            if not isinstance(exc.cause, NodeExistsError | NoNodeError):
                raise StoreError(f"ZooKeeper refused the write: {exc.cause!r}") from None
        for path in paths:
            for p in [*_parents(path, None), path]:
                exists = await self._aio(self.zk.exists_async(p))
                if exists is None:
                    self._existing.discard(p)
                else:
                    self._existing.add(p)
        try:
            await self._commit(ops, shard, epoch)
        except _TxnFailed as exc:
            raise StoreError(f"ZooKeeper refused the write: {exc.cause!r}") from None

    async def read_group(self, group_id: str) -> GroupSnapshot | None:
        """A group as stored (for tools and tests; not used when serving)."""
        return await self._load_group(znode_name(group_id))


class _TxnFailed(Exception):
    def __init__(self, cause: Exception):
        super().__init__(repr(cause))
        self.cause = cause


def _parents(path: str, _stop_at: str | None = None) -> list[str]:
    """Ancestors of an offset path from the group znode down (`/groupshift/groups/<g>` first)."""
    parts = path[len(GROUPS) + 1 :].split("/")
    out = []
    for i in range(1, len(parts)):
        out.append(f"{GROUPS}/{'/'.join(parts[:i])}")
    return out
