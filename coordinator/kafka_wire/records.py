"""Kafka record batches (magic v2, CRC-32C) to and from the Parquet log's rows.

Pure functions over aiokafka's compiled record-batch builder (writing Fetch answers) and
kafka-python's `kafka.record` readers (Produce requests):

    data, n = encode_batch(read.batch, max_bytes=1 << 20)   # rows offset/key/value/timestamp -> bytes
    table = decode_batches(produce_records)                  # -> Arrow key/value/timestamp (ms)

The log's timestamps are microseconds; Kafka's are milliseconds (CreateTime). The log has no
header column: records are written without headers, and a produced record carrying headers is
refused (`InvalidRecords`) rather than stored without them.
"""

from __future__ import annotations

import struct

import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kafka.errors import KafkaError
from kafka.record.memory_records import MemoryRecords

from coordinator.wire import errors as E
from topics.arrow import binary_array, epoch_millis, int64_array

_BASE_OFFSET = struct.Struct(">q")


class InvalidRecords(Exception):
    """Produced records the log cannot take; `code` is the Kafka error to answer with."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def encode_batch(batch: pa.RecordBatch, max_bytes: int) -> tuple[bytes, int]:
    """The leading rows of `batch` (consecutive offsets) as one record batch of about `max_bytes`
    at most, and how many rows it holds; at least one row (KIP-74), none for an empty batch.

    Written by aiokafka's compiled builder (a producer's: base offset 0, offset deltas from 0);
    the base offset is then set to the first row's. It is outside the CRC, which covers the
    attributes onwards, so the batch stays valid."""
    n = batch.num_rows
    if n == 0:
        return b"", 0
    keys = batch.column("key").to_pylist()
    values = batch.column("value").to_pylist()
    stamps = epoch_millis(batch.column("timestamp"))
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=max(max_bytes, 1),
    )
    append = builder.append
    taken = 0
    for i in range(n):  # append answers None once the batch would pass batch_size (never the first)
        if append(i, timestamp=stamps[i], key=keys[i], value=values[i], headers=[]) is None:
            break
        taken += 1
    data = builder.build()
    _BASE_OFFSET.pack_into(data, 0, batch.column("offset")[0].as_py())
    return bytes(data), taken


def decode_batches(data: bytes) -> pa.Table:
    """The records of a Produce request's record batches as `key, value, timestamp` (epoch ms).

    Raises `InvalidRecords`: CORRUPT_MESSAGE for a bad CRC or truncated batch,
    UNSUPPORTED_FOR_MESSAGE_FORMAT for magic 0/1, UNKNOWN_PRODUCER_ID for idempotent batches and
    INVALID_PRODUCER_ID_MAPPING for transactional ones (this listener issues no producer ids),
    INVALID_RECORD for records with headers or control batches.
    """
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    stamps: list[int] = []
    records = MemoryRecords(bytes(data))
    try:
        while records.has_next():
            batch = records.next_batch()
            if batch.magic < 2:
                raise InvalidRecords(
                    E.UNSUPPORTED_FOR_MESSAGE_FORMAT, "only magic v2 record batches are accepted"
                )
            if not batch.validate_crc():
                raise InvalidRecords(E.CORRUPT_MESSAGE, "record batch CRC mismatch")
            if batch.is_transactional:
                raise InvalidRecords(E.INVALID_PRODUCER_ID_MAPPING, "transactions are not served")
            if batch.producer_id >= 0:
                raise InvalidRecords(E.UNKNOWN_PRODUCER_ID, "idempotent producers are not served")
            if batch.is_control_batch:
                raise InvalidRecords(E.INVALID_RECORD, "control batches are not accepted")
            for record in batch:
                if record.headers:
                    raise InvalidRecords(E.INVALID_RECORD, "record headers are not stored by the log")
                keys.append(record.key)
                values.append(record.value)
                stamps.append(record.timestamp)
        if records.valid_bytes() != records.size_in_bytes():
            raise InvalidRecords(E.CORRUPT_MESSAGE, "truncated record batch")
    except InvalidRecords:
        raise
    except (KafkaError, ValueError, TypeError, IndexError, AssertionError, OSError) as exc:
        raise InvalidRecords(E.CORRUPT_MESSAGE, f"unreadable record batch: {exc}") from None
    return pa.table(
        {"key": binary_array(keys), "value": binary_array(values), "timestamp": int64_array(stamps)}
    )
