"""The data plane: a partitioned, offset-addressed log of Parquet segments, its producer and fetcher.

* `topics.registry`  — `/brokers/topics/<t>` in ZooKeeper, Kafka 0.8 JSON byte for byte
* `topics.log`       — `Log(root)`: create, produce, earliest/latest/offsets_for_times, read, retain
* `topics.fetcher`   — `Fetcher(log)`: the pipelined fetcher a consumer polls (seed 004)
* `topics.store`     — `TopicStore(root, zk)`: registration and log directories together
* `topics.partitioner`, `topics.segment`, `topics.errors`

See docs/topics.md.
"""

from topics.errors import (
    CorruptSegment,
    InvalidTopic,
    NoOffsetForPartition,
    OffsetOutOfRange,
    TopicAlreadyExists,
    UnknownPartition,
)
from topics.fetcher import ConsumerRecord, Fetcher, records
from topics.log import Log, OffsetAndTimestamp, ProduceResult, ReadResult, default_root
from topics.registry import TopicDescription, validate_topic_name
from topics.store import TopicStore

__all__ = [
    "ConsumerRecord",
    "CorruptSegment",
    "Fetcher",
    "InvalidTopic",
    "Log",
    "NoOffsetForPartition",
    "OffsetAndTimestamp",
    "OffsetOutOfRange",
    "ProduceResult",
    "ReadResult",
    "TopicAlreadyExists",
    "TopicDescription",
    "TopicStore",
    "UnknownPartition",
    "default_root",
    "records",
    "validate_topic_name",
]
