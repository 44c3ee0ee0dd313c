"""The active segment: small appends to one Arrow IPC stream file, parsed incrementally by readers.

`segment-<base:020d>.arrows` in a partition directory is an Arrow IPC *stream* — the schema
message, then one record-batch message per append, no end-of-stream marker — holding offsets
`base..end-1` in the segment schema (`topics.segment.SCHEMA`). The partition's writer, holding
its lock, appends each batch as one message with one write. Readers take no lock: they parse only
the bytes added since they last looked and stop at the last *complete* message, so a message
still being written, or left half-written by a writer that died, is not there yet. The next
writer truncates such a tail before it appends (see `topics.log`).

A message is `0xFFFFFFFF, int32 metadata length, metadata (a flatbuffer), body`; the body length
is a field of the metadata. `message_ends` reads just those lengths to find where complete
messages end; Arrow's own stream reader then decodes them.
"""

from __future__ import annotations

import bisect
import os
import re
import struct
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa

from topics.arrow import int64_values
from topics.errors import CorruptSegment
from topics.segment import SCHEMA

ACTIVE_SUFFIX = ".arrows"
ACTIVE_RE = re.compile(r"segment-(\d{20})\.arrows")
SCHEMA_MESSAGE = SCHEMA.serialize().to_pybytes()
_CONTINUATION = 0xFFFFFFFF
_HEAD = struct.Struct("<Ii")
_U32, _I32, _U16, _I64 = struct.Struct("<I"), struct.Struct("<i"), struct.Struct("<H"), struct.Struct("<q")
_BODY_LENGTH_SLOT = 4 + 2 * 3  # Message.bodyLength is field 3 (version, header_type, header, bodyLength)


def active_name(base: int) -> str:
    return f"segment-{base:020d}{ACTIVE_SUFFIX}"


def parse_active_name(name: str) -> int | None:
    """The base offset of an active segment's file name, or None for any other file."""
    m = ACTIVE_RE.fullmatch(name)
    return int(m.group(1)) if m else None


def message_ends(buf: bytes, pos: int = 0) -> list[int]:
    """Where each complete IPC message in `buf` from `pos` ends; an incomplete tail is left out.

    Raises ValueError for bytes that cannot be the start of a message (a damaged file).
    """
    ends = []
    n = len(buf)
    while n - pos >= 8:
        marker, meta_len = _HEAD.unpack_from(buf, pos)
        if marker != _CONTINUATION or meta_len < 8 or meta_len % 8:
            raise ValueError(f"no Arrow IPC message starts at byte {pos}")
        meta = pos + 8
        if n < meta + meta_len:
            break
        end = meta + meta_len + _body_length(buf, meta, meta_len, pos)
        if n < end:
            break
        ends.append(end)
        pos = end
    return ends


def _body_length(buf: bytes, meta: int, meta_len: int, pos: int) -> int:
    """Message.bodyLength from the flatbuffer at `buf[meta:meta + meta_len]`."""
    limit = meta + meta_len
    try:
        table = meta + _U32.unpack_from(buf, meta)[0]
        if not meta < table <= limit - 4:
            raise ValueError
        vtable = table - _I32.unpack_from(buf, table)[0]
        if not meta <= vtable <= limit - 4:
            raise ValueError
        if _U16.unpack_from(buf, vtable)[0] < _BODY_LENGTH_SLOT + 2:
            return 0  # the field is absent: its default, 0
        slot = _U16.unpack_from(buf, vtable + _BODY_LENGTH_SLOT)[0]
        if slot == 0:
            return 0
        if table + slot + 8 > limit:
            raise ValueError
        length = _I64.unpack_from(buf, table + slot)[0]
    except (struct.error, ValueError):
        raise ValueError(f"the Arrow IPC message at byte {pos} has damaged metadata") from None
    if length < 0 or length % 8:
        raise ValueError(f"the Arrow IPC message at byte {pos} has a bad body length {length}")
    return length


class ActiveSegment:
    """What one process knows of an active segment file: its complete messages, parsed so far.

    `parsed` is the byte length of the complete messages (schema included), `chunks` their record
    batches and `ends` the offset after each chunk. `refresh` parses what was appended since;
    `write` appends the writer's own batch (kept, not read back).
    """

    def __init__(self, path: Path, base: int, inode: int):
        self.path, self.base, self.inode = path, base, inode
        self.parsed = 0
        self.chunks: list[pa.RecordBatch] = []
        self.ends: list[int] = []
        self.min_timestamp: int | None = None
        self.max_timestamp: int | None = None
        self.lock = threading.Lock()

    @property
    def end(self) -> int:
        return self.ends[-1] if self.ends else self.base

    @property
    def count(self) -> int:
        return self.end - self.base

    def refresh(self, fd: int, size: int) -> None:
        """Parse the complete messages among bytes `[parsed, size)` of the file open as `fd`."""
        with self.lock:
            if size <= self.parsed:
                return
            data = _pread_all(fd, size - self.parsed, self.parsed)
            try:
                ends = message_ends(data)
            except ValueError as exc:
                raise CorruptSegment(self.path, f"{exc} (counting from byte {self.parsed})") from None
            if not ends:
                return
            complete = ends[-1]
            stream = data[:complete] if self.parsed == 0 else SCHEMA_MESSAGE + data[:complete]
            try:
                reader = pa.ipc.open_stream(stream)
                if reader.schema.remove_metadata() != SCHEMA.remove_metadata():
                    raise CorruptSegment(self.path, f"schema is {reader.schema}, expected {SCHEMA}")
                table = reader.read_all()  # decoded in C++: one batch per message, then one batch
                batches = table.combine_chunks().to_batches() if table.num_rows else []
            except pa.ArrowException as exc:
                raise CorruptSegment(self.path, f"undecodable record batch ({exc})") from None
            if batches:
                self._add(batches[0])
            self.parsed += complete

    def write(self, fd: int, batch: pa.RecordBatch, message: pa.Buffer) -> None:
        """Append `batch`, serialized as `message`, after the complete messages (the schema first
        into an empty file) with one write. Only the writer holding the partition lock calls it."""
        with self.lock:
            data = message if self.parsed else SCHEMA_MESSAGE + message.to_pybytes()
            _write_all(fd, data, self.parsed)
            self.parsed += len(data) if self.parsed == 0 else message.size
            self._add(batch)

    def _add(self, batch: pa.RecordBatch) -> None:
        offsets = int64_values(batch.column(0))
        first, last = int(offsets[0]), int(offsets[-1])
        if first != self.end or last != first + batch.num_rows - 1:
            raise CorruptSegment(
                self.path, f"offsets {first}..{last} do not follow offset {self.end - 1} consecutively"
            )
        ts = int64_values(batch.column(3))
        lo, hi = int(ts.min()), int(ts.max())
        self.min_timestamp = lo if self.min_timestamp is None else min(self.min_timestamp, lo)
        self.max_timestamp = hi if self.max_timestamp is None else max(self.max_timestamp, hi)
        self.chunks.append(batch)
        self.ends.append(first + batch.num_rows)

    def slices(self, start: int, max_records: int) -> list[pa.RecordBatch]:
        """Record batches (zero-copy slices) holding up to `max_records` records from `start`."""
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
        with self.lock:
            return pa.Table.from_batches(self.chunks, schema=SCHEMA)

    def offset_for_time(self, target_us: int) -> tuple[int, int] | None:
        """The first (offset, timestamp µs) at or after `target_us`, or None."""
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


def _write_all(fd: int, data: bytes | pa.Buffer, offset: int) -> None:
    view = memoryview(data)
    while len(view):
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _pread_all(fd: int, n: int, offset: int) -> bytes:
    data = os.pread(fd, n, offset)
    while len(data) < n:  # a short read: a regular file returns less only at its end
        more = os.pread(fd, n - len(data), offset + len(data))
        if not more:
            break
        data += more
    return data
