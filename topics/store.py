"""Topics as a whole: the ZooKeeper registration (Kafka layout) and the log directory, kept together.

    store = TopicStore(root, zk)                 # zk=None: the log only, no registration
    store.create_topic("clicks", partitions=3)  # directories first, then /brokers/topics/clicks
    store.add_partitions("clicks", 5)           # new directories first, then the znode (fires watches)
    store.describe("clicks")                    # registration + per-partition earliest/latest/segments
    store.list_topics(); store.delete_topic("clicks")

Order matters: a consumer that sees a partition in ZooKeeper must find its directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient

from core.errors import UnknownTopic
from core.types import TopicPartition
from topics import registry
from topics.errors import TopicAlreadyExists
from topics.log import Log
from topics.registry import TopicDescription


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    replicas: tuple[int, ...]
    earliest: int
    latest: int
    segments: int
    bytes: int


@dataclass(frozen=True)
class TopicInfo:
    name: str
    registered: bool
    partitions: list[PartitionInfo]

    @property
    def records(self) -> int:
        return sum(p.latest - p.earliest for p in self.partitions)


class TopicStore:
    """Create, grow, describe, list and delete topics in ZooKeeper and on disk together."""

    def __init__(
        self, root: str | os.PathLike[str] | Path | None = None, zk: KazooClient | None = None, **log_options
    ):
        self.log = Log(root, **log_options)
        self.zk = zk

    def create_topic(
        self, name: str, partitions: int, replication_factor: int = 1, *, brokers: list[int] | None = None
    ) -> TopicInfo:
        registry.validate_topic_name(name)
        if self.zk is not None and self.zk.exists(registry.topic_path(name)):
            raise TopicAlreadyExists(f"topic {name!r} already exists; use add_partitions to grow it")
        if self.zk is not None:  # check the assignment before touching the disk
            registry.assign_replicas(
                brokers if brokers is not None else registry.broker_ids(self.zk),
                partitions,
                replication_factor,
            )
        self.log.create(name, partitions)
        if self.zk is not None:
            registry.create_topic(self.zk, name, partitions, replication_factor, brokers=brokers)
        return self.describe(name)

    def add_partitions(self, name: str, partitions: int) -> TopicInfo:
        if self.zk is not None:
            registry.describe(self.zk, name)  # UnknownTopic before touching the disk
        self.log.add_partitions(name, partitions)
        if self.zk is not None:
            registry.add_partitions(self.zk, name, partitions)
        return self.describe(name)

    def describe(self, name: str) -> TopicInfo:
        reg: TopicDescription | None = None
        if self.zk is not None:
            try:
                reg = registry.describe(self.zk, name)
            except UnknownTopic:
                if not self.log.exists(name):
                    raise
        if not self.log.exists(name):  # registered only (e.g. by Kafka's tools): no data yet
            return TopicInfo(
                name, True, [PartitionInfo(p, r, 0, 0, 0, 0) for p, r in sorted(reg.partitions.items())]
            )
        parts = []
        for p in range(self.log.partitions(name)):
            tp = TopicPartition(name, p)
            segs = self.log.segments(tp)
            parts.append(
                PartitionInfo(
                    p,
                    reg.partitions.get(p, ()) if reg else (),
                    segs[0].base if segs else 0,
                    segs[-1].end if segs else 0,
                    len(segs),
                    sum(s.size for s in segs),
                )
            )
        return TopicInfo(name, reg is not None, parts)

    def list_topics(self) -> list[str]:
        names = set(self.log.topics())
        if self.zk is not None:
            names.update(registry.list_topics(self.zk))
        return sorted(names)

    def delete_topic(self, name: str) -> None:
        found = False
        if self.zk is not None and self.zk.exists(registry.topic_path(name)):
            registry.delete_topic(self.zk, name)
            found = True
        if self.log.exists(name):
            self.log.delete(name)
            found = True
        if not found:
            raise UnknownTopic(f"topic {name!r} does not exist")
