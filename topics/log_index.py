"""The log's index of a partition: which segments its directory holds, their footers, their row groups.

A partition's listing (`_Listing`: the bases, names and inodes of its Parquet and active segments,
and the stale files a writer that died left) is cached while the directory's mtime is unchanged,
the segments' footers (`SegmentInfo`) by path and inode, active segments (`ActiveSegment`) as far
as their index is whole, and decoded row groups in an LRU bounded by `cache_bytes`. Every entry is
revalidated against the file system, so changes made by other processes are seen on the next
call. `LogIndex` is a base of `topics.log.Log`; the directory layout's names are defined here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from core.types import TopicPartition
from topics.active import ACTIVE_SUFFIX, INDEX_SUFFIX, ActiveSegment, parse_active_part
from topics.errors import OffsetOutOfRange
from topics.segment import TMP_SUFFIX, SegmentInfo, parse_segment_name, read_info, read_row_group

PARTITION_PREFIX = "partition="


TOPIC_ID_NAME = ".topic-id"


# A listing is trusted while the directory's mtime is unchanged, but only if it was taken well
# after that mtime: file systems stamp mtimes with a coarse clock, so two renames within one
# tick would otherwise look like one.
_RACY_NS = 1_000_000_000

# How many times a reader lists a partition again when a file it listed is gone: a roll or
# retention moved on in between, so every retry means a writer made progress. Two writers rolling
# every few appends on a loaded machine can beat a handful of retries; a partition still changing
# after this many is reported as the error each reading method documents.
STALE_LISTING_RETRIES = 50


class _Listing(NamedTuple):
    topic_id: str  # a deleted and re-created topic is a new one, even if inodes are reused
    mtime: int
    listed_at: int
    bases: list[int]
    names: list[str]
    inodes: list[int]
    stale: list[str]  # hidden temporary files, active files rolled already or orphaned (a writer died)


class LogIndex:
    """The caches of `Log` (see the module docstring); `Log.__init__` creates their dicts."""

    def _listing(self, tp: TopicPartition, fresh: bool = False) -> _Listing:
        directory = self.root / tp.topic / f"{PARTITION_PREFIX}{tp.partition}"
        try:
            st = os.stat(directory)
        except FileNotFoundError:
            self.partition_dir(tp)  # raises UnknownTopic / UnknownPartition
            raise
        with self._lock:
            cached = self._listings.get(tp)
        mtime = st.st_mtime_ns
        if not fresh and cached and cached.mtime == mtime and cached.listed_at - mtime > _RACY_NS:
            return cached
        parquet, active, parts, stale = {}, {}, {}, []
        with os.scandir(directory) as it:
            for e in it:
                name = e.name
                base = parse_segment_name(name)
                if base is not None:
                    parquet[base] = (name, e.inode())
                elif (part := parse_active_part(name)) is not None:
                    if part[1] == INDEX_SUFFIX:
                        active[part[0]] = (name, e.inode())
                    else:
                        parts.setdefault(part[0], []).append(name)
                elif name.startswith(".segment-") and name.endswith(TMP_SUFFIX):
                    stale.append(name)
        rolled = set(parquet)
        for base, entry in active.items():  # a roll's Parquet segment replaces its active segment
            if base in rolled:
                stale.append(entry[0])
            else:
                parquet[base] = entry
        for base, names in parts.items():  # keys and values files without a live index
            if base in rolled or base not in active:
                stale += sorted(names)
        found = sorted((base, name, inode) for base, (name, inode) in parquet.items())
        listing = _Listing(
            _topic_id(self.root / tp.topic),
            mtime,
            time.time_ns(),
            [f[0] for f in found],
            [f[1] for f in found],
            [f[2] for f in found],
            stale,
        )
        with self._lock:
            self._listings[tp] = listing
            if cached and cached.topic_id != listing.topic_id:
                prefix = str(directory) + os.sep
                for key in [k for k in self._infos if k[0].startswith(prefix)]:
                    del self._infos[key]
                for key in [k for k in self._batches if k[0].startswith(prefix)]:
                    self._cached_bytes -= self._batches.pop(key).nbytes
                for key in [k for k in self._actives if k[0].startswith(prefix)]:
                    del self._actives[key]
            elif cached and cached.names != listing.names:
                gone = {str(directory / n) for n in set(cached.names) - set(listing.names)}
                for key in [k for k in self._infos if k[0] in gone]:
                    del self._infos[key]
                for key in [k for k in self._actives if k[0] in gone]:
                    del self._actives[key]
        return listing

    def _info(self, tp: TopicPartition, lst: _Listing, i: int, decode: bool = False) -> SegmentInfo:
        path = self.root / tp.topic / f"{PARTITION_PREFIX}{tp.partition}" / lst.names[i]
        if lst.names[i].endswith(ACTIVE_SUFFIX):
            a = self._active(path, lst.inodes[i], lst.bases[i], decode)
            return SegmentInfo(
                path, a.base, a.end, a.size, a.min_timestamp, a.max_timestamp, (a.base,), a.inode
            )
        key = (str(path), lst.inodes[i])
        with self._lock:
            info = self._infos.get(key)
        if info is None:
            info = read_info(path, lst.bases[i])
            with self._lock:
                self._infos[key] = info
        return info

    def _active(self, path: Path, inode: int, base: int, decode: bool) -> ActiveSegment:
        """An active segment, counted (and with `decode`, decoded) up to what its index holds now
        (FileNotFoundError once rolled)."""
        key = (str(path), inode)
        with self._lock:
            a = self._actives.get(key)
            if a is None:
                a = self._actives[key] = ActiveSegment(path, base, inode)
        st = os.stat(path)
        if st.st_ino != inode:
            raise FileNotFoundError(path)  # another file by that name now: the listing is stale
        if a.stale(st, decode):
            fds = a.open()
            try:
                a.refresh(fds, decode)
            finally:
                for fd in fds:
                    os.close(fd)
        return a

    def _segments(self, tp: TopicPartition, fresh: bool = False) -> tuple[_Listing, list[SegmentInfo]]:
        for _ in range(STALE_LISTING_RETRIES):
            lst = self._listing(tp, fresh=fresh)
            try:
                return lst, [self._info(tp, lst, i) for i in range(len(lst.bases))]
            except FileNotFoundError:
                fresh = True
        raise OffsetOutOfRange(tp, 0, 0, 0)  # the partition kept changing under us; caller retries

    def _row_group(self, info: SegmentInfo, index: int) -> pa.RecordBatch:
        key = (str(info.path), info.inode, index)
        with self._lock:
            batch = self._batches.get(key)
            if batch is not None:
                self._batches.move_to_end(key)
                return batch
        batch = read_row_group(info, index)
        with self._lock:
            if key not in self._batches:
                self._batches[key] = batch
                self._cached_bytes += batch.nbytes
                while self._cached_bytes > self._cache_bytes and len(self._batches) > 1:
                    _, old = self._batches.popitem(last=False)
                    self._cached_bytes -= old.nbytes
        return batch


def _topic_id(topic_dir: Path) -> str:
    """The id written when the topic was created ("" for a directory made by other tools)."""
    try:
        return (topic_dir / TOPIC_ID_NAME).read_text()
    except FileNotFoundError:
        return ""
