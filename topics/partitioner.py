"""Kafka's default partitioner: murmur2 of the key bytes, made positive, modulo the partition count.

`murmur2` is `org.apache.kafka.common.utils.Utils.murmur2` (signed 32-bit result), `to_positive`
is `Utils.toPositive` (`n & 0x7fffffff`, not `abs`). Records without a key (None — an empty key
is a key) go round-robin from a counter that starts at a random value, as the Java producer's
`DefaultPartitioner` does. `partition_batch` does the same for a whole Arrow column at once with
numpy, so producing keyed records costs no Python work per record.

    >>> murmur2(b"21")
    -973932308
    >>> DefaultPartitioner().partition(b"21", 10)   # to_positive(-973932308) % 10
    0
"""

from __future__ import annotations

import random
import threading

import numpy as np
import pyarrow as pa

from topics.arrow import null_mask

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2`: MurmurHash2, seed 0x9747b28c, as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length & ~3
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[end + 2] << 16
        if tail >= 2:
            h ^= data[end + 1] << 8
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def to_positive(n: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (so `Integer.MIN_VALUE` maps to 0)."""
    return n & 0x7FFFFFFF


def murmur2_batch(keys: pa.Array) -> np.ndarray:
    """`murmur2` of every value of a binary Arrow array, vectorised (uint32 result; nulls hash as b"")."""
    keys = _as_binary(keys)
    n = len(keys)
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32 if keys.type == pa.binary() else np.int64)
    offsets = offsets[keys.offset : keys.offset + n + 1].astype(np.int64)
    data_buf = keys.buffers()[2]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    out = np.empty(n, dtype=np.uint32)
    m = np.uint32(_M)
    # Keys of one length share the loop shape; real key sets have few distinct lengths.
    for length in np.unique(lengths):
        idx = np.nonzero(lengths == length)[0]
        starts = offsets[idx]
        h = np.full(len(idx), (_SEED ^ int(length)) & _MASK, dtype=np.uint32)
        end = int(length) & ~3
        for i in range(0, end, 4):
            b = data[starts[:, None] + np.arange(i, i + 4)].astype(np.uint32)
            k = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)
            k *= m
            k ^= k >> np.uint32(24)
            k *= m
            h *= m
            h ^= k
        tail = int(length) & 3
        if tail:
            if tail == 3:
                h ^= data[starts + end + 2].astype(np.uint32) << np.uint32(16)
            if tail >= 2:
                h ^= data[starts + end + 1].astype(np.uint32) << np.uint32(8)
            h ^= data[starts + end].astype(np.uint32)
            h *= m
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
        out[idx] = h
    return out


def _as_binary(keys: pa.Array) -> pa.Array:
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
        keys = keys.cast(pa.large_binary() if pa.types.is_large_string(keys.type) else pa.binary())
    if not (pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type)):
        keys = keys.cast(pa.binary())
    return keys


class DefaultPartitioner:
    """Kafka's `DefaultPartitioner`: keyed records by murmur2, null keys round-robin. Thread-safe."""

    def __init__(self, seed: int | None = None):
        self._counter = random.Random(seed).randrange(1 << 31)
        self._lock = threading.Lock()

    def _next(self, n: int) -> int:
        with self._lock:
            value = self._counter
            self._counter = (self._counter + n) & _MASK
        return value

    def partition(self, key: bytes | None, num_partitions: int) -> int:
        """The partition of one record."""
        if key is None:
            return to_positive(self._next(1)) % num_partitions
        return to_positive(murmur2(key)) % num_partitions

    def partition_batch(self, keys: pa.Array | None, num_partitions: int, count: int) -> np.ndarray:
        """The partitions of `count` records whose keys are `keys` (None: all keys null), as int64."""
        if keys is None or keys.null_count == len(keys):
            start = self._next(count)
            return ((np.arange(count, dtype=np.int64) + start) & 0x7FFFFFFF) % num_partitions
        out = (murmur2_batch(keys) & np.uint32(0x7FFFFFFF)).astype(np.int64) % num_partitions
        if keys.null_count:
            nulls = null_mask(keys)
            start = self._next(int(nulls.sum()))
            out[nulls] = ((np.arange(int(nulls.sum()), dtype=np.int64) + start) & 0x7FFFFFFF) % num_partitions
        return out
