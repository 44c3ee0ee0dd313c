"""The coordinator's shared metadata in ZooKeeper: registration, shard leadership, groups and offsets.

The znodes, their names and payloads are `coordinator/layout.py`'s (pure; documented in
`docs/coordinator.md`); `CoordinatorStore` is the node's asyncio access to them through one kazoo
client, built of three modules, one job each:

* this one — the node's registration, its watches (shard leaders, live nodes) and shard leadership;
* `coordinator/node/group_store.py` — a shard's groups and offsets: loaded, written, deleted;
* `coordinator/node/zk_async.py` — kazoo's calls as asyncio futures, the epoch-fenced transaction
  every write goes through, and the store's errors (`StoreError`, `Fenced`, `StoreUnavailable`,
  `WriteTooLarge`, `NodeIdInUse`).

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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import msgspec
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

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
    broker_path,
    coordinator_path,
    decode_coordinator,
    decode_leader,
    encode_coordinator,
    encode_leader,
    epoch_path,
    leader_path,
    shard_of,
)
from coordinator.node.group_store import GroupData
from coordinator.node.zk_async import NodeIdInUse, _retrying
from core.zk import KAZOO_REFUSALS

log = logging.getLogger(__name__)


def _kafka_fields(kafka: KafkaEndpoint | None) -> dict:
    return {} if kafka is None else {"kafka_host": kafka[0], "kafka_port": kafka[1]}


def _protocol_fields(protocol: str, kafka_protocol: str, kafka: KafkaEndpoint | None) -> dict:
    """The listeners' security protocols a registration names: only those that are not PLAINTEXT."""
    out = {"protocol": protocol, "kafka_protocol": kafka_protocol if kafka is not None else "PLAINTEXT"}
    return {k: v for k, v in out.items() if v != "PLAINTEXT"}


# ---------------------------------------------------------------------------------------------
# The store


class CoordinatorStore(GroupData):
    """Async (asyncio) access to the coordinator's znodes through one kazoo client.

    kazoo's async calls complete on its own threads; results are handed to the event loop
    (`ZkAccess`, coordinator/node/zk_async.py). The store remembers which offset znodes exist for
    the groups of the shards it leads, so that an OffsetCommit is a single transaction of
    `create`s and `set_data`s (`GroupData`, coordinator/node/group_store.py). This class itself is
    the node's registration, its watches and shard leadership.
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
        # The last registration's host, port, Kafka endpoint and protocols (`register_again`).
        self._registered: tuple[str, int, KafkaEndpoint | None, dict[str, str]] | None = None

    # -- start and listeners -----------------------------------------------------------------

    async def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Create the persistent znodes of the layout that are missing (every shard's `epoch`)."""
        self._loop = loop or asyncio.get_running_loop()
        paths = [COORDINATORS, GROUPS, BROKERS, *(epoch_path(s) for s in range(self.shards))]
        await _retrying("creating the layout", lambda: self._ensure_paths(paths))

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
        self,
        host: str,
        port: int,
        wait_s: float = 30.0,
        kafka: KafkaEndpoint | None = None,
        protocol: str = "PLAINTEXT",
        kafka_protocol: str = "PLAINTEXT",
    ) -> None:
        """Register this node under `/groupshift/coordinators/ids` and `/brokers/ids` (ephemeral),
        with each listener's security protocol (`protocol`: the native one's).

        A znode left by a previous process with the same id (killed, session not yet expired) is
        waited for up to `wait_s`; a live one raises `NodeIdInUse`. A lost connection is retried (a
        create that landed before it is found again as this session's own znode).
        """
        protocols = _protocol_fields(protocol, kafka_protocol, kafka)
        self._registered = (host, port, kafka, protocols)
        await _retrying("registering", lambda: self._register(host, port, wait_s, kafka, protocols))

    async def register_again(self, wait_s: float = 30.0) -> None:
        """Register as the last `register` did, each listener's security protocol included: after a
        new ZooKeeper session (the registrations, ephemeral, went with the old one)."""
        if self._registered is None:
            raise RuntimeError("register_again before register")
        host, port, kafka, protocols = self._registered
        await _retrying("registering", lambda: self._register(host, port, wait_s, kafka, protocols))

    async def _register(
        self, host: str, port: int, wait_s: float, kafka: KafkaEndpoint | None, protocols: dict
    ) -> None:
        now = int(time.time() * 1000)
        mine = encode_coordinator(CoordinatorRecord(host, port, now, **_kafka_fields(kafka), **protocols))
        broker = broker_json(host, port, now, kafka, protocols.get("kafka_protocol", "PLAINTEXT"))
        for path, data in ((coordinator_path(self.node_id), mine), (broker_path(self.node_id), broker)):
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
        for path in (coordinator_path(self.node_id), broker_path(self.node_id)):
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
                self.zk.get_async(coordinator_path(node)).rawlink(self._registration_read(node))
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
            return DataWatch(self.zk, leader_path(s), leader_watcher(s))

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
        epoch_znode = epoch_path(shard)
        leader_znode = leader_path(shard)
        try:
            _, stat = await self._aio(self.zk.get_async(epoch_znode))
        except NoNodeError:
            await self._aio(self.zk.create_async(epoch_znode, b"", makepath=True))
            _, stat = await self._aio(self.zk.get_async(epoch_znode))
        stale = await self._own_leader_stat(shard)
        if stale is False:
            return None
        epoch = stat.version + 1
        record = LeaderRecord(self.node_id, epoch, host, port, **_kafka_fields(kafka))
        leader = encode_leader(record)
        txn = self.zk.transaction()
        if stale is not None:
            txn.delete(leader_znode, version=stale.version)
        txn.create(leader_znode, leader, ephemeral=True)
        txn.set_data(epoch_znode, str(self.node_id).encode(), version=stat.version)
        results = await self._aio(txn.commit_async())
        refused = [r for r in results if isinstance(r, KAZOO_REFUSALS)]
        if refused:
            raise refused[0]  # not another node's lead: ZooKeeper's ACL, which no retry changes
        if any(isinstance(r, Exception) for r in results):
            return None
        self.leaders[shard] = record
        return epoch

    async def _own_leader_stat(self, shard: int):
        """None when `shard` has no leader znode; its stat when the znode is this node's, in this
        session; False when it belongs to another node or another session (leave it alone)."""
        try:
            data, stat = await self._aio(self.zk.get_async(leader_path(shard)))
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
                await self._aio(self.zk.delete_async(leader_path(shard), version=stat.version))
            except (NoNodeError, BadVersionError):
                pass

    async def release_shard(self, shard: int, epoch: int) -> None:
        """Give up `shard` (delete our leader znode if it is still ours) and forget its znodes."""
        path = leader_path(shard)
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
            data, _ = await self._aio(self.zk.get_async(leader_path(shard)))
        except NoNodeError:
            return None
        try:
            return decode_leader(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
