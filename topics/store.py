"""Topics as a whole: the ZooKeeper registration (Kafka layout) and the log directory, kept together.

    store = TopicStore(root, zk)                 # zk=None: the log only, no registration
    store.create_topic("clicks", partitions=3)  # directories first, then /brokers/topics/clicks
    store.add_partitions("clicks", 5)           # new directories first, then the znode (fires watches)
    store.describe("clicks")                    # registration + per-partition earliest/latest/segments
    store.list_topics(); store.delete_topic("clicks")  # only if registered here and its data is ours

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
from topics.errors import InvalidPartitions, TopicAlreadyExists, TopicNotOwned
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
        """All or nothing: everything is checked first; a failed registration removes the directories."""
        self.check_create(name, partitions, replication_factor, brokers=brokers)
        topic_id = self.log.create(name, partitions)
        if self.zk is not None:
            try:
                registry.create_topic(
                    self.zk, name, partitions, replication_factor, brokers=brokers, topic_id=topic_id
                )
            except BaseException:
                self.log.delete(name)  # ours: created above, nothing produced to it yet
                raise
        return self.describe(name)

    def check_create(
        self, name: str, partitions: int, replication_factor: int = 1, *, brokers: list[int] | None = None
    ) -> None:
        """Raise what `create_topic` would raise for this input, writing nothing."""
        registry.validate_topic_name(name)
        registry.check_partitions(partitions)
        if self.zk is not None:
            if self.zk.exists(registry.topic_path(name)):
                raise TopicAlreadyExists(
                    f"topic {name!r} already exists in {self.namespace}; use add_partitions to grow it"
                )
            registry.assign_replicas(  # the replication factor against the registered brokers
                brokers if brokers is not None else registry.broker_ids(self.zk),
                partitions,
                replication_factor,
            )
        if self.log.exists(name):
            raise TopicAlreadyExists(f"topic {name!r} already exists in {self.log.root}")

    def add_partitions(self, name: str, partitions: int) -> TopicInfo:
        registry.check_partitions(partitions)
        if self.zk is not None:
            current = registry.describe(self.zk, name)  # UnknownTopic before touching the disk
            self._check_owner(name, "grow")
            if partitions <= current.num_partitions:
                raise InvalidPartitions(
                    f"topic {name!r} has {current.num_partitions} partitions; "
                    "the number can only be increased"
                )
        made = self.log.add_partitions(name, partitions)
        if self.zk is not None:
            try:
                registry.add_partitions(self.zk, name, partitions)
            except BaseException:
                self.log.remove_partitions(made)
                raise
        return self.describe(name)

    @property
    def namespace(self) -> str:
        """The ZooKeeper namespace this store registers in, for messages: `ZooKeeper chroot /x`."""
        chroot = getattr(self.zk, "chroot", "") or "/"
        return f"ZooKeeper chroot {chroot}" if chroot != "/" else "the ZooKeeper root namespace"

    def _check_owner(self, name: str, verb: str) -> None:
        """Refuse to `verb` a data directory that was not created for this namespace's registration.

        The topic's data directory holds the id written when it was created; a registration made
        through groupshift records the same id at /groupshift/topics/<t>. Different (or missing)
        ids mean the data belongs to a topic of the same name registered elsewhere.
        """
        if not self.log.exists(name):
            return
        data_id = self.log.topic_id(name)
        zk_id = registry.topic_id(self.zk, name)
        if not data_id or data_id != zk_id:
            raise TopicNotOwned(
                f"refusing to {verb} topic {name!r}: its data in {self.log.root / name} was not created "
                f"for the topic registered in {self.namespace} (ids {data_id or 'none'} on disk, "
                f"{zk_id or 'none'} in ZooKeeper); pass the --zk it was created with, "
                "or the --data of its own log"
            )

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
        """Delete a topic's data and registration, only when both are the topic named, in this namespace.

        Without ZooKeeper (`zk=None`) only the log directory is deleted. With it, the topic must be
        registered in this namespace, and its data directory (if any) must carry the id registered
        with it; otherwise nothing is deleted (`UnknownTopic` / `TopicNotOwned`).
        """
        if self.zk is None:
            self.log.delete(name)
            return
        registry.validate_topic_name(name)
        if not self.zk.exists(registry.topic_path(name)):
            where = f" (its data in {self.log.root / name} is left alone)" if self.log.exists(name) else ""
            raise UnknownTopic(
                f"topic {name!r} is not registered in {self.namespace}{where}; "
                "check the topic name and the --zk chroot"
            )
        self._check_owner(name, "delete")
        if self.log.exists(name):  # data first: a failure leaves the registration to retry with
            self.log.delete(name)
        registry.delete_topic(self.zk, name)
