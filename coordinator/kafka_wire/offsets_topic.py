"""Kafka's `__consumer_offsets` record format, pure: what an offset commit looks like in the topic.

Kafka keeps committed offsets in the compacted topic `__consumer_offsets`; monitoring tools that
read it (Burrow's `kafka` consumer module, lag exporters) decode these records. The node mirrors
its commits into a topic of that name (`coordinator/node/offsets_mirror.py`) in this format:

* key, version 1: int16 1, string group, string topic, int32 partition;
* value, version 3: int16 3, int64 offset, int32 leader epoch (-1), string metadata,
  int64 commit timestamp (ms); a deleted offset is a tombstone (no value).

The partition of a group's records is Kafka's: `abs(javaHashCode(group)) % partitions`.

>>> offset_key("g", "t", 2).hex()
'000100016700017400000002'
>>> offset_value(42, "", 1700000000000)[:10].hex()
'0003000000000000002a'
>>> partition_for("billing", 50) == partition_for("billing", 50) < 50
True
"""

from __future__ import annotations

import struct

from core.javahash import java_abs, java_string_hash

OFFSETS_TOPIC = "__consumer_offsets"
KEY_VERSION = 1
VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_HEAD = struct.Struct(">hqi")  # version, offset, leader epoch
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def _string(s: str) -> bytes:
    raw = s.encode()
    return _I16.pack(len(raw)) + raw


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(group) + _string(topic) + _I32.pack(partition)


def offset_value(offset: int, metadata: str, commit_timestamp_ms: int) -> bytes:
    return _HEAD.pack(VALUE_VERSION, offset, -1) + _string(metadata) + _I64.pack(commit_timestamp_ms)


def partition_for(group: str, partitions: int) -> int:
    return java_abs(java_string_hash(group)) % partitions
