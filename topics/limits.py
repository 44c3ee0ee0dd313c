"""The documented bounds of every count and size the data plane and `groupshift topics` accept.

Each bound is checked before anything is written, so input beyond it is refused with one line
and changes nothing. docs/topics.md lists them; the CLI's --help shows them as ranges.
"""

from __future__ import annotations

MAX_PARTITIONS = 10_000  # partitions per topic (a directory and a znode entry each)
MAX_REPLICATION_FACTOR = 32  # and never more than the registered brokers
MAX_RECORD_BYTES = 1 << 20  # a value from --value-size or one --file line (Kafka's message.max.bytes)
MAX_PRODUCE_COUNT = 100_000_000  # produce --count
MAX_KEYS = 100_000_000  # produce --keys
MAX_BATCH_RECORDS = 1_000_000  # produce --batch-size
MAX_BATCH_BYTES = 256 << 20  # --batch-size x --value-size: the memory one generated batch takes
MAX_FILE_BYTES = 256 << 20  # produce --file is read (and checked) whole before anything is written
MAX_TAIL_LINES = 1_000_000  # tail -n
MAX_TAIL_LIMIT = 1_000_000_000  # tail --limit
MAX_OFFSET = 2**63 - 1  # Kafka offsets are int64
MAX_RETAIN_SEGMENTS = 2**31 - 1  # retain --max-segments (at least 1: the newest is always kept)
MAX_RETAIN_BYTES = 2**63 - 1  # retain --max-bytes
MAX_RETAIN_AGE_S = 100 * 365 * 86400.0  # retain --max-age: a century, in seconds
# When the log rolls its active segment (Log(segment_records=, segment_bytes=, segment_ms=)):
# readers keep an active segment in memory, so its size is bounded well below Kafka's 1 GiB.
MAX_SEGMENT_RECORDS = 10_000_000  # records per segment (Kafka's offset index bounds it too)
MIN_SEGMENT_BYTES = 4096  # an active segment's three files together (Kafka's segment.bytes)
# Below 2 GiB: a reader wraps an active segment's keys and values files in binary arrays, whose
# int32 offsets address at most 2 GiB (only a single record larger than this goes alone).
MAX_SEGMENT_BYTES = 1 << 30
MAX_SEGMENT_MS = 7 * 86_400_000  # age of an active segment's oldest record (Kafka's segment.ms default)
