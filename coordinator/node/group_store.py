"""The coordinator store's groups and offsets: load a shard's groups, write them fenced by its epoch.

A group is `/groupshift/groups/<g>` (its metadata, `coordinator.layout.encode_group`) and its
offsets `<g>/offsets/<t>/<p>`. The store remembers which of these znodes exist for the groups of
the shards it leads (`_existing`, filled when a shard is loaded and by every write), so that an
OffsetCommit is a single transaction of `create`s and `set_data`s; a transaction that finds that
memory wrong (NodeExists, NoNode) re-reads the znodes it names and is sent once more. Every write
goes through `ZkAccess._commit` with the shard and its epoch (`coordinator/node/zk_async.py`).
`GroupData` is a base of `CoordinatorStore` (`coordinator/node/store.py`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

import msgspec
from kazoo.exceptions import NodeExistsError, NoNodeError

from coordinator.group.records import GroupRecord, GroupSnapshot, OffsetRecord
from coordinator.layout import (
    GROUPS,
    decode_group,
    decode_offset,
    encode_group,
    encode_offset,
    group_path,
    name_from_znode,
    offset_path,
    offsets_dir,
    shard_of,
    znode_name,
)
from coordinator.node.zk_async import MAX_WRITE_BYTES, StoreError, WriteTooLarge, ZkAccess, _TxnFailed
from core.types import TopicPartition

log = logging.getLogger("coordinator.node.store")


class GroupData(ZkAccess):
    """The groups and offsets of the shards a node leads (see the module docstring)."""

    shards: int
    _existing: set[str]

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
            topics = await self._aio(self.zk.get_children_async(offsets_dir(gpath)))
        except NoNodeError:
            return loaded
        self._existing.add(offsets_dir(gpath))
        for tz in topics:
            tpath = f"{offsets_dir(gpath)}/{tz}"
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


def _parents(path: str, _stop_at: str | None = None) -> list[str]:
    """Ancestors of an offset path from the group znode down (`/groupshift/groups/<g>` first)."""
    parts = path[len(GROUPS) + 1 :].split("/")
    out = []
    for i in range(1, len(parts)):
        out.append(f"{GROUPS}/{'/'.join(parts[:i])}")
    return out
