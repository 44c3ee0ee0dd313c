"""The log's input: what `Log.produce` accepts, normalised to one Arrow table.

`to_table` turns an Arrow table or record batch (a `value` column, optional `key` and `timestamp`
columns), or an iterable of values, `(key, value[, timestamp])` tuples or dicts, into a table
`key binary, value binary, timestamp timestamp[us, UTC]`; keys and values may be bytes or str
(UTF-8), timestamps datetimes or Kafka's epoch milliseconds (default: now). `_to_micros` is the
time conversion the log's readers and retention share.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from core.errors import GroupshiftError
from topics.arrow import (
    TIMESTAMP_US,
    binary_array,
    int64_values,
    null_mask,
    timestamp_array,
    timestamps_from_millis,
)

_TS_TYPE = TIMESTAMP_US


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_table(records: Any) -> pa.Table:
    """Normalise produce input to a table `key binary, value binary, timestamp timestamp[us, UTC]`."""
    if isinstance(records, pa.RecordBatch):
        records = pa.Table.from_batches([records])
    if isinstance(records, pa.Table):
        n = records.num_rows
        names = records.column_names
        if "value" not in names:
            raise GroupshiftError(f"records need a 'value' column; got columns {names}")
        value = _binary(records.column("value"))
        key = _binary(records.column("key")) if "key" in names else pa.nulls(n, pa.binary())
        if "timestamp" in names:
            ts = _timestamps(records.column("timestamp"))
        else:
            ts = timestamp_array(np.full(n, time.time_ns() // 1000, dtype=np.int64))
        return pa.table({"key": key, "value": value, "timestamp": ts})
    if isinstance(records, bytes | bytearray | str):
        raise GroupshiftError("records must be an iterable of records, not a single bytes/str value")
    keys: list[Any] = []
    values: list[Any] = []
    stamps: list[Any] = []
    now_us = time.time_ns() // 1000
    for r in _iter(records):
        if isinstance(r, bytes | bytearray | memoryview | str):
            k, v, t = None, r, None
        elif isinstance(r, dict):
            k, v, t = r.get("key"), r["value"], r.get("timestamp")
        elif isinstance(r, tuple | list) and len(r) in (2, 3):
            k, v, t = r[0], r[1], (r[2] if len(r) == 3 else None)
        else:
            raise GroupshiftError(
                f"cannot produce {r!r}: expected a value, (key, value[, timestamp]) or a dict"
            )
        keys.append(k.encode() if isinstance(k, str) else k)
        values.append(v.encode() if isinstance(v, str) else v)
        stamps.append(now_us if t is None else _to_micros(t))
    return pa.table(
        {"key": binary_array(keys), "value": binary_array(values), "timestamp": timestamp_array(stamps)}
    )


def _iter(records: Iterable[Any]) -> Iterable[Any]:
    try:
        return iter(records)
    except TypeError:
        raise GroupshiftError(
            f"records must be iterable or an Arrow table, not {type(records).__name__}"
        ) from None


def _binary(col: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_binary(col.type):
        return col
    if (
        pa.types.is_string(col.type)
        or pa.types.is_large_string(col.type)
        or pa.types.is_large_binary(col.type)
    ):
        return col.cast(pa.binary())
    if pa.types.is_null(col.type):
        return col.cast(pa.binary())
    raise GroupshiftError(f"key and value must be binary or string columns, not {col.type}")


def _timestamps(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """A timestamp or epoch-ms column as timestamp[us, UTC]; a null (no time given) is now."""
    if pa.types.is_timestamp(col.type):
        us = col.cast(pa.timestamp("us", tz=col.type.tz or "UTC")).cast(_TS_TYPE)
    elif pa.types.is_integer(col.type):  # Kafka's epoch milliseconds
        us = timestamps_from_millis(col.cast(pa.int64()))
    else:
        raise GroupshiftError(f"timestamp must be a timestamp or integer (epoch ms) column, not {col.type}")
    if not us.null_count:
        return us
    values = int64_values(us).copy()
    values[null_mask(us)] = time.time_ns() // 1000
    return pa.chunked_array([timestamp_array(values)], _TS_TYPE)


def _to_micros(ts: int | float | datetime) -> int:
    if isinstance(ts, datetime):
        if ts.tzinfo is None:
            raise GroupshiftError(f"timestamp {ts} has no time zone; use an aware datetime (e.g. UTC)")
        return (ts - _EPOCH) // timedelta(microseconds=1)
    return int(ts) * 1000  # Kafka's epoch milliseconds
