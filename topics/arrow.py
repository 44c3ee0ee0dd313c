"""Arrow arrays without pandas: built from numpy buffers and bytes, never from Python sequences.

pyarrow imports pandas (~300 ms) through its pandas shim the first time an array is converted
from Python or numpy data (`pa.array`, `pa.table({...: [...]})`, `from_pylist`, `from_pydict`,
`Schema.empty_table()`) or to numpy (`to_numpy`, `np.asarray`). The data path runs in every CLI
process and coordinator node, so it builds its arrays from buffers here instead:

    int64_array(np.arange(3))                  # int64, no nulls
    timestamp_array([1_700_000_000_000_000])   # timestamp[us, UTC] from epoch microseconds
    binary_array([b"k", None, b"v"])           # binary, None -> null
    empty_batch(SCHEMA)                        # a record batch with no rows
    null_mask(keys)                            # numpy bool: which entries are null
    int64_values(batch.column("timestamp"))    # numpy int64 view of int64/timestamp data
    epoch_millis(batch.column("timestamp"))    # Kafka's record timestamps, as Python ints
    timestamps_from_millis(table.column("ts")) # epoch ms -> timestamp[us, UTC]

A tz-aware timestamp's `as_py()`/`to_pylist()` imports pandas too (cast to int64 first), and so
does a pyarrow.compute call with a scalar operand (`pc.divide(ts, 1000)`): scale in numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

TIMESTAMP_US = pa.timestamp("us", tz="UTC")
_MAX_BINARY_BYTES = 2**31 - 1  # a binary array's int32 offsets address at most this much data


def _fixed_width(type_: pa.DataType, values: Any) -> pa.Array:
    a = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(type_, len(a), [None, pa.py_buffer(a)])


def int64_array(values: Any) -> pa.Array:
    """An int64 array (no nulls) of a numpy array or a sequence of ints."""
    return _fixed_width(pa.int64(), values)


def timestamp_array(micros: Any, type_: pa.DataType = TIMESTAMP_US) -> pa.Array:
    """A timestamp array (no nulls) of epoch microseconds, without a cast."""
    return _fixed_width(type_, micros)


def binary_array(values: Sequence[bytes | bytearray | memoryview | None]) -> pa.Array | pa.ChunkedArray:
    """A binary array of byte strings, None as null: offsets and data are built in numpy and one
    `b"".join`. More than 2 GiB of data (beyond int32 offsets) comes back as a chunked array."""
    n = len(values)
    present = [v for v in values if v is not None] if None in values else values
    data = b"".join(present)
    lengths = np.fromiter(map(len, present), dtype=np.int64, count=len(present))
    if int(lengths.sum()) != len(data):  # a memoryview of items wider than a byte
        lengths = np.fromiter((memoryview(v).nbytes for v in present), dtype=np.int64, count=len(present))
    if len(data) > _MAX_BINARY_BYTES:
        if n == 1:
            raise pa.ArrowCapacityError(f"a binary value of {len(data)} bytes is over 2 GiB")
        half = n // 2
        parts = [binary_array(values[:half]), binary_array(values[half:])]
        return pa.chunked_array([c for p in parts for c in _chunks(p)], pa.binary())
    validity = None
    if len(present) < n:
        mask = np.fromiter((v is not None for v in values), dtype=bool, count=n)
        full = np.zeros(n, dtype=np.int64)
        full[mask] = lengths
        lengths = full
        validity = pa.py_buffer(np.packbits(mask, bitorder="little"))
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:], dtype=np.int32)
    return pa.Array.from_buffers(
        pa.binary(),
        n,
        [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=n - len(present),
    )


def _chunks(array: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return array.chunks if isinstance(array, pa.ChunkedArray) else [array]


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    """A record batch of `schema` with no rows."""
    return pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)


def null_mask(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Which entries of `array` are null, as a numpy bool array (read from the validity bitmaps)."""
    if isinstance(array, pa.ChunkedArray):
        parts = [null_mask(c) for c in array.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)
    n = len(array)
    if array.null_count == 0:
        return np.zeros(n, dtype=bool)
    validity = array.buffers()[0]
    if validity is None:  # the null type: every entry is null
        return np.ones(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
    return bits[array.offset : array.offset + n] == 0


def int64_values(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of an int64 or timestamp array as numpy int64 (a view of the buffer for an array
    or a one-chunk chunked array). Entries under nulls are undefined: mask them with `null_mask`."""
    if isinstance(array, pa.ChunkedArray):
        if array.num_chunks == 1:
            return int64_values(array.chunk(0))
        parts = [int64_values(c) for c in array.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if not (pa.types.is_int64(array.type) or pa.types.is_timestamp(array.type)):
        raise TypeError(f"int64_values needs an int64 or timestamp array, not {array.type}")
    data = array.buffers()[1]
    if data is None or len(array) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.frombuffer(data, dtype=np.int64)[array.offset : array.offset + len(array)]


def epoch_millis(timestamps: pa.Array | pa.ChunkedArray) -> list[int | None]:
    """Epoch milliseconds of a timestamp[us] column as Python ints (divided toward zero, as
    `pc.divide` and Java do; None for nulls): the timestamps of Kafka records."""
    if not (pa.types.is_timestamp(timestamps.type) and timestamps.type.unit == "us"):
        raise TypeError(f"epoch_millis needs a timestamp[us] column, not {timestamps.type}")
    us = int64_values(timestamps)
    ms = us // 1000
    ms += (us < 0) & (us % 1000 != 0)
    out = ms.tolist()
    if timestamps.null_count:
        for i in np.flatnonzero(null_mask(timestamps)).tolist():
            out[i] = None
    return out


def timestamps_from_millis(millis: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    """An int64 column of epoch milliseconds as timestamp[us, UTC] (nulls kept; wraps on overflow
    as `pc.multiply` does)."""
    if isinstance(millis, pa.Array):
        millis = pa.chunked_array([millis])
    chunks = []
    for c in millis.chunks:
        us = np.zeros(c.offset + len(c), dtype=np.int64)  # the validity bitmap keeps its offset
        us[c.offset :] = int64_values(c) * 1000
        validity = c.buffers()[0] if c.null_count else None
        chunks.append(
            pa.Array.from_buffers(
                TIMESTAMP_US, len(c), [validity, pa.py_buffer(us)], null_count=c.null_count, offset=c.offset
            )
        )
    return pa.chunked_array(chunks, TIMESTAMP_US)
