"""The active segment: small appends to three append-only files, decoded by readers in one numpy pass.

An active segment holding offsets `base..end-1` is three files in the partition directory:

    segment-<base:020d>.index    16 bytes per record, little-endian: int64 timestamp (µs since the
                                 epoch, UTC); int32 key length (-1: a null key); uint32 value word:
                                 bits 0-30 the value length (0x7FFFFFFF: a null value), bit 31 set
                                 on the last record of each append (its commit mark)
    segment-<base:020d>.keys     the keys' bytes, concatenated in offset order
    segment-<base:020d>.values   the values' bytes, concatenated in offset order

Record `base + i` is entry `i`; where its key and value start follows from the lengths before it.
The partition's writer, holding its lock, appends a batch with one `pwrite` to each file at the
end the index implies: values, then keys, then the index entries. An append is in the log once
its last entry — the one carrying the commit mark — is whole in the index. Readers take no lock:
they read the index entries added since they last looked, keep those up to the last commit mark,
and decode them, however many appends they cover, into one record batch (lengths to offsets with
`np.cumsum`, the key and value bytes read with one `pread` each, wrapped without a copy). Bytes
past the last commit mark — an append being written, or left half-written by a writer that died —
are not there yet. docs/topics.md gives the crash-safety argument.
"""

from __future__ import annotations

import bisect
import os
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from core.errors import GroupshiftError
from topics.arrow import TIMESTAMP_US, int64_array, int64_values, null_mask
from topics.errors import CorruptSegment
from topics.segment import SCHEMA

INDEX_SUFFIX, KEYS_SUFFIX, VALUES_SUFFIX = ".index", ".keys", ".values"
ACTIVE_SUFFIX = INDEX_SUFFIX  # an active segment is named by its index file
ACTIVE_RE = re.compile(r"segment-(\d{20})(\.index|\.keys|\.values)")
ENTRY = np.dtype([("timestamp", "<i8"), ("key", "<i4"), ("value", "<u4")])
ENTRY_BYTES = ENTRY.itemsize
COMMIT = np.uint32(1 << 31)  # in the value word: the last record of an append
NULL_VALUE = 0x7FFFFFFF  # in the value word's length bits: a null value
_LENGTH = np.uint32(NULL_VALUE)
# Decoded chunks next to each other are merged while the result stays this small, so a reader
# that refreshes after every append holds a few chunks, not one per append.
_MERGE_RECORDS = 8192
_MERGE_BYTES = 4 << 20


def active_paths(directory: Path | str, base: int) -> tuple[Path, Path, Path]:
    """The index, keys and values files of the active segment at `base`."""
    stem = os.path.join(directory, f"segment-{base:020d}")
    return Path(stem + INDEX_SUFFIX), Path(stem + KEYS_SUFFIX), Path(stem + VALUES_SUFFIX)


def parse_active_name(name: str) -> int | None:
    """The base offset of an active segment's index file name, or None for any other file."""
    m = ACTIVE_RE.fullmatch(name)
    return int(m.group(1)) if m and m.group(2) == INDEX_SUFFIX else None


def parse_active_part(name: str) -> tuple[int, str] | None:
    """(base, suffix) of any of an active segment's three files, or None for any other file."""
    m = ACTIVE_RE.fullmatch(name)
    return (int(m.group(1)), m.group(2)) if m else None


class Records:
    """Produce input (a table of key, value, timestamp) encoded for the active segment: index
    entries and the key and value bytes of records `[i, j)` are numpy slices and buffer views."""

    def __init__(self, table: pa.Table):
        self.n = n = table.num_rows
        self.timestamps = int64_values(table.column("timestamp"))
        self.key_lengths, self.key_ends, self.key_data = _binary_parts(table.column("key"), n)
        value_lengths, self.value_ends, self.value_data = _binary_parts(table.column("value"), n)
        if n and int(self.value_ends[-1]) >= NULL_VALUE:
            big = int(value_lengths.max())
            if big >= NULL_VALUE:
                raise GroupshiftError(f"a value of {big} bytes is too large to append")
        self.value_words = value_lengths.view(np.uint32)  # a null's -1 is 0xFFFFFFFF: all length bits
        self.value_words &= _LENGTH  # (a copy: `_binary_parts` made the lengths)
        self.cumulative = self.key_ends + self.value_ends
        self.cumulative += _ENTRY_ENDS[: n + 1] if n < len(_ENTRY_ENDS) else ENTRY_BYTES * np.arange(n + 1)
        self._range: tuple[int, int, int, int] | None = None

    def fitting(self, i: int, room: int) -> int:
        """How many records from `i` fit in `room` bytes."""
        if self.cumulative[self.n] - self.cumulative[i] <= room:
            return self.n - i
        return int(np.searchsorted(self.cumulative, self.cumulative[i] + room, side="right")) - 1 - i

    def entries(self, i: int, j: int) -> np.ndarray:
        """Index entries of records `[i, j)`, the last one carrying the commit mark."""
        out = np.empty(j - i, dtype=ENTRY)
        out["timestamp"] = self.timestamps[i:j]
        out["key"] = self.key_lengths[i:j]
        words = out["value"]
        words[:] = self.value_words[i:j]
        words[-1] |= COMMIT
        return out

    def keys(self, i: int, j: int) -> memoryview:
        return self.key_data[int(self.key_ends[i]) : int(self.key_ends[j])]

    def values(self, i: int, j: int) -> memoryview:
        return self.value_data[int(self.value_ends[i]) : int(self.value_ends[j])]

    def time_range(self, i: int, j: int) -> tuple[int, int]:
        """The oldest and newest timestamps of records `[i, j)`."""
        if self._range is None or self._range[:2] != (i, j):
            ts = self.timestamps[i:j]
            self._range = (i, j, int(ts.min()), int(ts.max()))
        return self._range[2], self._range[3]


_ENTRY_ENDS = ENTRY_BYTES * np.arange(4097, dtype=np.int64)


def _binary_parts(col: Any, n: int) -> tuple[np.ndarray, np.ndarray, memoryview]:
    """A binary column's lengths (int32, -1 for nulls), cumulative byte ends (int64, from 0) and
    data (a view from its first value's byte)."""
    if n == 0:
        return np.zeros(0, np.int32), np.zeros(1, np.int64), memoryview(b"")
    if col.null_count == n:  # e.g. no keys
        return np.full(n, -1, np.int32), np.zeros(n + 1, np.int64), memoryview(b"")
    array = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32, count=array.offset + n + 1)[array.offset :]
    first = int(offsets[0])
    ends = offsets - first if first else offsets
    ends = ends.astype(np.int64)
    lengths = np.subtract(offsets[1:], offsets[:-1])
    if array.null_count:
        lengths[null_mask(array)] = -1  # a null's length is 0 in its offsets
    data = memoryview(buffers[2] if buffers[2] is not None else b"")[first:]
    return lengths, ends, data


class ActiveSegment:
    """What one process knows of an active segment: the records up to its last commit mark.

    `count` records (`end` = base + count) whose key and value bytes end at `key_end` and
    `value_end`. `refresh` takes in what other processes appended, counting it (cheap: the index
    alone) or decoding it too; the writer's own appends (`append`) are counted at once and decoded,
    like everyone else's, when read. `chunks` hold the decoded records (offsets up to `ends[-1]`).
    """

    def __init__(self, path: Path, base: int, inode: int):
        self.path, self.base, self.inode = path, base, inode
        _, self.keys_path, self.values_path = active_paths(path.parent, base)
        self.count = self.key_end = self.value_end = 0
        # The index's (size, mtime) when last looked at; the mtime is None after this process's
        # own append. A new index at the same name may reuse the inode (after a writer died in
        # the first append of a segment, which is then closed empty); its mtime tells it apart.
        self.seen: tuple[int, int | None] = (0, None)
        self.min_timestamp: int | None = None
        self.max_timestamp: int | None = None
        self.chunks: list[pa.RecordBatch] = []
        self.ends: list[int] = []
        self.sizes: list[int] = []  # key and value bytes of each chunk
        self.decoded = self.decoded_keys = self.decoded_values = 0
        self.lock = threading.Lock()

    @property
    def end(self) -> int:
        return self.base + self.count

    @property
    def index_end(self) -> int:
        return self.count * ENTRY_BYTES

    @property
    def size(self) -> int:
        """The bytes its records take in the three files."""
        return self.index_end + self.key_end + self.value_end

    def stale(self, st: os.stat_result, decode: bool) -> bool:
        """Whether the index (`st`) may hold records not counted (or decoded) yet."""
        size, mtime = self.seen
        return (
            st.st_size != size
            or (mtime is not None and st.st_mtime_ns != mtime)
            or (decode and self.decoded < self.count)
        )

    def open(self, flags: int = os.O_RDONLY) -> tuple[int, int, int]:
        """Its three files, opened (FileNotFoundError once rolled, or if the index was replaced)."""
        fds: list[int] = []
        try:
            fds.append(os.open(self.path, flags))
            st = os.fstat(fds[0])
            if st.st_ino != self.inode or st.st_nlink == 0:
                raise FileNotFoundError(self.path)
            for path in (self.keys_path, self.values_path):
                try:
                    fds.append(os.open(path, flags))
                except FileNotFoundError:
                    if os.fstat(fds[0]).st_nlink == 0:
                        raise  # rolled meanwhile: the index goes first, then the keys and values
                    raise CorruptSegment(self.path, f"{path.name} is missing") from None
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds[0], fds[1], fds[2]

    def refresh(
        self, fds: tuple[int, int, int], decode: bool = True, st: os.stat_result | None = None
    ) -> None:
        """Take in the records up to the last commit mark in the index (`st`: its fstat, if taken)
        whose key and value bytes are all in their files: counted, and with `decode`, everything
        not decoded yet (this process's own appends too) decoded into one chunk."""
        with self.lock:
            st = st or os.fstat(fds[0])
            self._take_in(fds, st.st_size, decode)
            self.seen = (st.st_size, st.st_mtime_ns)  # (not after a CorruptSegment: raised again)

    def _take_in(self, fds: tuple[int, int, int], index_size: int, decode: bool) -> None:
        whole = index_size // ENTRY_BYTES
        if whole < self.count:
            raise CorruptSegment(self.path, f"the index holds {whole} records, not {self.count} or more")
        first = self.decoded if decode else self.count
        if whole <= first:
            return
        raw = _pread_all(fds[0], (whole - first) * ENTRY_BYTES, first * ENTRY_BYTES)
        entries = np.frombuffer(raw, dtype=ENTRY, count=len(raw) // ENTRY_BYTES)
        key_lengths, words = entries["key"], entries["value"]
        if len(key_lengths) and int(key_lengths.min()) < -1:
            raise CorruptSegment(self.path, f"a negative key length after record {self.base + first}")
        value_lengths = words & _LENGTH
        value_nulls = value_lengths == NULL_VALUE
        key_ends = np.cumsum(np.maximum(key_lengths, 0), dtype=np.int64)
        value_ends = np.cumsum(np.where(value_nulls, 0, value_lengths), dtype=np.int64)
        key_pos = self.decoded_keys if decode else self.key_end
        value_pos = self.decoded_values if decode else self.value_end
        # Read after the index, the bytes of its whole entries are in the files (unless a
        # machine crash lost them): with `decode` they are read, else their presence checked.
        if decode:
            keys = _pread_upto(fds[1], int(key_ends[-1]), key_pos)
            values = _pread_upto(fds[2], int(value_ends[-1]), value_pos)
            key_have, value_have = len(keys), len(values)
        else:
            key_have = os.fstat(fds[1]).st_size - key_pos
            value_have = os.fstat(fds[2]).st_size - value_pos
        marks = np.flatnonzero(words & COMMIT)
        ok = marks[(key_ends[marks] <= key_have) & (value_ends[marks] <= value_have)]
        n = max(int(ok[-1]) + 1 if len(ok) else 0, self.count - first)  # own appends are whole
        if n == 0:
            return
        if key_ends[n - 1] > key_have or value_ends[n - 1] > value_have:
            raise CorruptSegment(self.path, "the keys or values file is shorter than its index says")
        ts = np.ascontiguousarray(entries["timestamp"][:n])
        self._span(int(ts.min()), int(ts.max()))
        if first + n > self.count:
            self.count = first + n
            self.key_end = key_pos + int(key_ends[n - 1])
            self.value_end = value_pos + int(value_ends[n - 1])
        if not decode:
            return
        batch = pa.RecordBatch.from_arrays(
            [
                int64_array(np.arange(self.base + first, self.base + first + n, dtype=np.int64)),
                _binary(keys, key_lengths[:n] >= 0, key_ends[:n]),
                _binary(values, ~value_nulls[:n], value_ends[:n]),
                pa.Array.from_buffers(TIMESTAMP_US, n, [None, pa.py_buffer(ts)]),
            ],
            schema=SCHEMA,
        )
        self.decoded += n
        self.decoded_keys += int(key_ends[n - 1])
        self.decoded_values += int(value_ends[n - 1])
        self._add(batch, int(key_ends[n - 1] + value_ends[n - 1]))

    def append(self, fds: tuple[int, int, int], records: Records, i: int, j: int, fsync: bool) -> None:
        """Append records `[i, j)` of `records` (the writer, holding the partition lock): values,
        then keys, then the index entries, each with one write where the index says its file ends."""
        _write_all(fds[2], records.values(i, j), self.value_end)
        _write_all(fds[1], records.keys(i, j), self.key_end)
        if fsync:
            os.fsync(fds[2])
            os.fsync(fds[1])
        entries = records.entries(i, j)
        with self.lock:  # a reader in this process sees the entries and the count change together
            _write_all(fds[0], entries, self.index_end)
            self.count += j - i
            self.key_end += int(records.key_ends[j] - records.key_ends[i])
            self.value_end += int(records.value_ends[j] - records.value_ends[i])
            self.seen = (self.index_end, None)
            self._span(*records.time_range(i, j))
        if fsync:
            os.fsync(fds[0])

    def _span(self, lo: int, hi: int) -> None:
        self.min_timestamp = lo if self.min_timestamp is None else min(self.min_timestamp, lo)
        self.max_timestamp = hi if self.max_timestamp is None else max(self.max_timestamp, hi)

    def _add(self, batch: pa.RecordBatch, size: int) -> None:
        self.chunks.append(batch)
        self.ends.append(self.base + self.decoded)
        self.sizes.append(size)
        while len(self.chunks) > 1:  # merge equal-ish neighbours: few chunks, each record copied a few times
            a, b = self.chunks[-2], self.chunks[-1]
            rows, size = a.num_rows + b.num_rows, self.sizes[-2] + self.sizes[-1]
            if a.num_rows > 2 * b.num_rows or rows > _MERGE_RECORDS or size > _MERGE_BYTES:
                break
            self.chunks[-2:] = [pa.concat_batches([a, b])]
            self.sizes[-2:] = [size]
            del self.ends[-2]

    def slices(self, start: int, max_records: int) -> list[pa.RecordBatch]:
        """Record batches (zero-copy slices) holding up to `max_records` decoded records from `start`."""
        out = []
        with self.lock:
            i = bisect.bisect_right(self.ends, start)
            while max_records > 0 and i < len(self.chunks):
                chunk = self.chunks[i]
                skip = start - (self.ends[i] - chunk.num_rows)
                take = min(max_records, chunk.num_rows - skip)
                out.append(chunk if take == chunk.num_rows else chunk.slice(skip, take))
                start += take
                max_records -= take
                i += 1
        return out

    def table(self) -> pa.Table:
        """Its decoded records (all of them once `refresh` caught up with `count`)."""
        with self.lock:
            return pa.Table.from_batches(self.chunks, schema=SCHEMA)

    def offset_for_time(self, target_us: int) -> tuple[int, int] | None:
        """The first decoded (offset, timestamp µs) at or after `target_us`, or None."""
        with self.lock:
            if self.max_timestamp is None or self.max_timestamp < target_us:
                return None
            chunks, ends = list(self.chunks), list(self.ends)
        for chunk, end in zip(chunks, ends, strict=True):
            ts = int64_values(chunk.column(3))
            hits = np.flatnonzero(ts >= target_us)
            if len(hits):
                hit = int(hits[0])
                return end - chunk.num_rows + hit, int(ts[hit])
        return None


def _binary(data: bytes, valid: np.ndarray, ends: np.ndarray) -> pa.Array:
    """A binary array over `data` (no copy) from the cumulative byte ends of its values."""
    n = len(ends)
    offsets = np.empty(n + 1, dtype=np.int32)
    offsets[0] = 0
    offsets[1:] = ends
    nulls = n - int(np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )


def _write_all(fd: int, data: Any, offset: int) -> None:
    view = memoryview(data).cast("B")
    while len(view):
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _pread_upto(fd: int, n: int, offset: int) -> bytes:
    """`n` bytes from `offset`, or as many as the file holds (lengths read from a damaged index
    may add up to more than exists)."""
    return _pread_all(fd, max(0, min(n, os.fstat(fd).st_size - offset)), offset)


def _pread_all(fd: int, n: int, offset: int) -> bytes:
    if n == 0:
        return b""
    data = os.pread(fd, n, offset)
    while len(data) < n:  # a short read: a regular file returns less only at its end
        more = os.pread(fd, n - len(data), offset + len(data))
        if not more:
            break
        data += more
    return data
