"""The data plane: a partitioned, offset-addressed log of Parquet segments, its producer and fetcher.

* `topics.registry`  — `/brokers/topics/<t>` in ZooKeeper, Kafka 0.8 JSON byte for byte
* `topics.log`       — `Log(root)`: create, produce, earliest/latest/offsets_for_times, read, retain
  (its parts: `topics.log_writer`, `log_reader`, `log_retention`, `log_index`, `log_input`)
* `topics.fetcher`   — `Fetcher(log)`: the pipelined fetcher a consumer polls (Kafka's consumer fetcher
design)
* `topics.store`     — `TopicStore(root, zk)`: registration and log directories together
* `topics.partitioner`, `topics.segment`, `topics.errors`

See docs/topics.md.
"""

import importlib

# Submodules are imported on first use, so `import topics.limits` (the CLI's --help) does not pay
# for pyarrow and pandas.
_EXPORTS = {
    "ConsumerRecord": "topics.fetcher",
    "CorruptSegment": "topics.errors",
    "Fetcher": "topics.fetcher",
    "InvalidTopic": "topics.errors",
    "Log": "topics.log",
    "NoOffsetForPartition": "topics.errors",
    "OffsetAndTimestamp": "topics.log_reader",
    "OffsetOutOfRange": "topics.errors",
    "ProduceResult": "topics.log_writer",
    "ReadResult": "topics.log_reader",
    "TopicAlreadyExists": "topics.errors",
    "TopicDescription": "topics.registry",
    "TopicStore": "topics.store",
    "UnknownPartition": "topics.errors",
    "default_root": "topics.root",
    "records": "topics.fetcher",
    "validate_topic_name": "topics.registry",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'topics' has no attribute {name!r}")


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
