"""The log's reading: offsets (earliest, latest, for a time) and records, across segment boundaries.

Readers take no lock: Parquet segments are immutable and published by rename, and readers of the
active segment stop at the last append whose index entries are whole. A file removed under a
reader (retention, a roll) makes it list the partition afresh and try again. `LogReader` is a base
of `topics.log.Log`.
"""

from __future__ import annotations

import bisect
from datetime import datetime
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from core.types import TopicPartition
from topics.active import ACTIVE_SUFFIX
from topics.arrow import empty_batch, int64_values, null_mask
from topics.errors import OffsetOutOfRange, UnknownPartition
from topics.log_index import PARTITION_PREFIX, STALE_LISTING_RETRIES, _Listing
from topics.log_input import _to_micros
from topics.segment import SCHEMA, SegmentInfo

# A read concatenates at most this many slices (row groups, active-segment chunks).
_MAX_READ_PIECES = 4096


class ReadResult(NamedTuple):
    """Records read from one partition (schema `topics.segment.SCHEMA`) and the offset after them."""

    batch: pa.RecordBatch
    next_offset: int


class OffsetAndTimestamp(NamedTuple):
    """Kafka's answer to `offsetsForTimes`: the first offset at or after a time, and its timestamp (ms)."""

    offset: int
    timestamp: int


_EMPTY = empty_batch(SCHEMA)


class LogReader:
    """Reading the log (see the module docstring)."""

    # -- offsets ----------------------------------------------------------------------------

    def segments(self, tp: TopicPartition) -> list[SegmentInfo]:
        """The partition's published segments, oldest first (footers read once, then cached)."""
        return self._segments(tp)[1]

    def earliest(self, tp: TopicPartition) -> int:
        """The log start offset: the base of the oldest segment (0 for an empty partition)."""
        lst = self._listing(tp)
        return lst.bases[0] if lst.bases else 0

    def latest(self, tp: TopicPartition) -> int:
        """The log end offset (the next offset to be written), from the newest segment's footer."""
        return self._latest(tp)

    def _latest(self, tp: TopicPartition, fresh: bool = False) -> int:
        for _ in range(STALE_LISTING_RETRIES):
            lst = self._listing(tp, fresh=fresh)
            if not lst.bases:
                return 0
            try:
                return self._info(tp, lst, len(lst.bases) - 1).end
            except FileNotFoundError:
                fresh = True  # deleted under us (topic deleted, or retention of a newer segment)
        raise UnknownPartition(tp, self.partitions(tp.topic))

    def offset_for_time(self, tp: TopicPartition, timestamp: int | datetime) -> OffsetAndTimestamp | None:
        """The earliest offset whose timestamp is >= `timestamp` (ms or datetime), or None (Kafka's rule)."""
        target = _to_micros(timestamp)
        for info in self.segments(tp):
            if info.max_timestamp is None or info.max_timestamp < target:
                continue  # the footer (or what the active segment holds) rules it out unread
            if info.path.name.endswith(ACTIVE_SUFFIX):
                hit = self._active(info.path, info.inode, info.base, decode=True).offset_for_time(target)
                if hit is not None:
                    return OffsetAndTimestamp(hit[0], hit[1] // 1000)
                continue
            for i in range(len(info.row_group_bases)):
                batch = self._row_group(info, i)
                ts = int64_values(batch.column(3))
                at = ts >= target
                if batch.column(3).null_count:
                    at &= ~null_mask(batch.column(3))
                hits = np.flatnonzero(at)
                if len(hits):
                    hit = int(hits[0])
                    return OffsetAndTimestamp(batch.column(0)[hit].as_py(), int(ts[hit]) // 1000)
        return None

    def offsets_for_times(
        self, timestamps: dict[TopicPartition, int | datetime]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """`offset_for_time` for several partitions, as `KafkaConsumer.offsetsForTimes`."""
        return {tp: self.offset_for_time(tp, ts) for tp, ts in timestamps.items()}

    # -- read -------------------------------------------------------------------------------

    def read(self, tp: TopicPartition, start: int, max_records: int) -> ReadResult:
        """Up to `max_records` records from `start`, across segment boundaries.

        Returns an empty batch at the log end; raises `OffsetOutOfRange` below the earliest or
        beyond the latest offset, and `CorruptSegment` naming a file that cannot be read. One
        slice of a row group or of the active segment is returned as it is (no copy); records from
        several are concatenated (at most `_MAX_READ_PIECES` slices per read).
        """
        fresh = False
        for _ in range(STALE_LISTING_RETRIES):
            lst = self._listing(tp, fresh=fresh)
            try:
                earliest = lst.bases[0] if lst.bases else 0
                # Reading from the active segment: decode it now, not in a second refresh.
                last = len(lst.bases) - 1
                latest = self._info(tp, lst, last, decode=start >= lst.bases[last]).end if lst.bases else 0
                if not earliest <= start <= latest:
                    raise OffsetOutOfRange(tp, start, earliest, latest)
                if start == latest or max_records <= 0:
                    return ReadResult(_EMPTY, start)
                pieces = self._pieces(tp, lst, start, min(max_records, latest - start))
            except FileNotFoundError:
                fresh = True  # retention or a roll removed a file after we listed it
                continue
            n = sum(p.num_rows for p in pieces)
            batch = pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)
            return ReadResult(batch, start + n)
        raise OffsetOutOfRange(tp, start, self.earliest(tp), self.latest(tp))

    def _pieces(self, tp: TopicPartition, lst: _Listing, start: int, want: int) -> list[pa.RecordBatch]:
        """Slices of consecutive records from `start`, `want` at most (at least one record)."""
        pieces: list[pa.RecordBatch] = []
        i = bisect.bisect_right(lst.bases, start) - 1
        while want > 0 and i < len(lst.bases) and len(pieces) < _MAX_READ_PIECES:
            if lst.names[i].endswith(ACTIVE_SUFFIX):  # decoded up to date: one stat, no SegmentInfo
                path = self.root / tp.topic / f"{PARTITION_PREFIX}{tp.partition}" / lst.names[i]
                active = self._active(path, lst.inodes[i], lst.bases[i], decode=True)
                if start >= active.end:
                    i += 1
                    continue
                got = active.slices(start, min(want, active.end - start))[: _MAX_READ_PIECES - len(pieces)]
            else:
                info = self._info(tp, lst, i)
                if start >= info.end:
                    i += 1
                    continue
                rg = bisect.bisect_right(info.row_group_bases, start) - 1
                batch = self._row_group(info, rg)
                skip = start - info.row_group_bases[rg]
                take = min(want, batch.num_rows - skip)
                got = [batch if take == batch.num_rows else batch.slice(skip, take)]
            if not got:
                break
            pieces += got
            n = sum(p.num_rows for p in got)
            start += n
            want -= n
        return pieces
