"""The partitioned, offset-addressed log: produce, offsets, read and retention over segments.

Layout: `<root>/<topic>/partition=<p>/segment-<base:020d>.parquet` (see `topics.segment`) and
one active segment, `segment-<base:020d>.index` / `.keys` / `.values` (see `topics.active`), that
takes small appends and is rolled to Parquet by size and age (`segment_records`, `segment_bytes`,
`segment_ms`, as Kafka's segment.bytes and segment.ms). One writer per partition at a time holds
`partition=<p>/.lock` (`flock`), so producers in different processes append consecutive,
non-overlapping offsets. Readers take no lock: Parquet segments are immutable and published by
rename, and readers of the active segment stop at the last append whose index entries are whole.
docs/topics.md gives the crash-safety argument.

    log = Log("/data/groupshift")
    log.create("clicks", partitions=3)
    log.produce("clicks", [(b"user-1", b"{...}"), (b"user-2", b"{...}")])   # keyed: murmur2
    log.produce("clicks", pa.table({"value": values}), partition=0)          # columnar, no per-record work
    batch, next_offset = log.read(TopicPartition("clicks", 0), 0, 500)     # across segments
    log.earliest(tp), log.latest(tp), log.offset_for_time(tp, ts_ms)
    log.retain("clicks", max_age=7 * 86400)

Every method is safe to call from several threads; caches (directory listings, footers, decoded
row groups) are revalidated against the directory's mtime, so changes made by other processes
are seen on the next call.

`Log` is this module's topic directories (create, grow, delete, list) and the bases it is built
of, one job per module:

* `topics.log_writer`    — `LogWriter`: produce under the partition lock, active segment, roll
* `topics.log_reader`    — `LogReader`: earliest, latest, offset_for_time, read
* `topics.log_retention` — `LogRetention`: retain
* `topics.log_index`     — `LogIndex`: a partition's listing, footers, row groups, cached
* `topics.log_input`     — `to_table`: produce input normalised to one Arrow table
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections import OrderedDict
from pathlib import Path

import pyarrow as pa

from core.errors import GroupshiftError, UnknownTopic
from core.types import TopicPartition
from topics.active import ActiveSegment
from topics.errors import InvalidPartitions, TopicAlreadyExists, UnknownPartition
from topics.log_index import PARTITION_PREFIX, TOPIC_ID_NAME, LogIndex, _Listing, _topic_id
from topics.log_reader import LogReader
from topics.log_retention import LogRetention
from topics.log_writer import LogWriter, _check_roll, _Writer
from topics.partitioner import DefaultPartitioner
from topics.registry import check_partitions, validate_topic_name
from topics.root import default_root
from topics.segment import SegmentInfo


class Log(LogWriter, LogReader, LogRetention, LogIndex):
    """The topics under one root directory. See the module docstring for an example."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        segment_records: int = 100_000,
        segment_bytes: int = 32 << 20,
        segment_ms: int = 3_600_000,
        row_group_records: int = 25_000,
        cache_bytes: int = 256 << 20,
        fsync: bool = False,
        partitioner: DefaultPartitioner | None = None,
    ):
        _check_roll(segment_records, segment_bytes, segment_ms)
        self.root = Path(root) if root is not None else default_root()
        self.segment_records = segment_records
        self.segment_bytes = segment_bytes
        self.segment_ms = segment_ms
        self.row_group_records = row_group_records
        self.fsync = fsync
        self.partitioner = partitioner or DefaultPartitioner()
        self._lock = threading.RLock()
        self._listings: dict[TopicPartition, _Listing] = {}
        self._infos: dict[tuple[str, int], SegmentInfo] = {}
        self._actives: dict[tuple[str, int], ActiveSegment] = {}
        self._writers: dict[TopicPartition, _Writer] = {}
        self._counts: dict[str, tuple[int, int, int]] = {}  # topic -> (dir mtime, listed at, partitions)
        self._batches: OrderedDict[tuple[str, int, int], pa.RecordBatch] = OrderedDict()
        self._cache_bytes = cache_bytes
        self._cached_bytes = 0

    # -- topics -----------------------------------------------------------------------------

    def create(self, topic: str, partitions: int) -> str:
        """Create a topic's directories and return its new id; raises `TopicAlreadyExists`.

        Atomic: the whole tree is built under a hidden name and renamed into place, and removed
        again if building it fails, so a failed create leaves nothing behind.
        """
        validate_topic_name(topic)
        check_partitions(partitions)
        final = self.root / topic
        if final.exists():
            raise TopicAlreadyExists(f"topic {topic!r} already exists in {self.root}")
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f".{topic}.creating-{os.getpid()}-{threading.get_ident()}"
        topic_id = uuid.uuid4().hex
        try:
            try:
                for p in range(partitions):
                    (staging / f"{PARTITION_PREFIX}{p}").mkdir(parents=True, exist_ok=True)
                (staging / TOPIC_ID_NAME).write_text(topic_id)
            except OSError as exc:
                raise GroupshiftError(
                    f"cannot create the directories of topic {topic!r} in {self.root}: {exc.strerror or exc}"
                ) from None
            try:
                os.rename(staging, final)
            except OSError:
                if final.exists():
                    raise TopicAlreadyExists(f"topic {topic!r} already exists in {self.root}") from None
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return topic_id

    def topic_id(self, topic: str) -> str:
        """The id written when the topic's directory was created ("" for one made by other tools)."""
        return _topic_id(self._topic_dir(topic))

    def add_partitions(self, topic: str, partitions: int) -> list[Path]:
        """Grow a topic to `partitions` partitions (never shrinks; raises `InvalidPartitions`).

        Returns the directories created (all of them are removed again if one cannot be made).
        """
        check_partitions(partitions)
        current = self.partitions(topic)
        if partitions <= current:
            raise InvalidPartitions(
                f"topic {topic!r} has {current} partitions; the number can only be increased"
            )
        made: list[Path] = []
        try:
            for p in range(current, partitions):
                path = self.root / topic / f"{PARTITION_PREFIX}{p}"
                path.mkdir()
                made.append(path)
        except OSError:
            self.remove_partitions(made)
            raise
        return made

    def remove_partitions(self, directories: list[Path]) -> None:
        """Undo `add_partitions` (its directories hold no segments yet)."""
        for path in reversed(directories):
            shutil.rmtree(path, ignore_errors=True)

    def delete(self, topic: str) -> None:
        """Delete a topic and all its segments."""
        path = self._topic_dir(topic)
        shutil.rmtree(path)
        with self._lock:
            for tp in [tp for tp in self._listings if tp.topic == topic]:
                del self._listings[tp]
            for tp in [tp for tp in self._writers if tp.topic == topic]:
                del self._writers[tp]

    def topics(self) -> list[str]:
        """Topics under the root, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(e.name for e in os.scandir(self.root) if e.is_dir() and not e.name.startswith("."))

    def exists(self, topic: str) -> bool:
        validate_topic_name(topic)
        return (self.root / topic).is_dir()

    def partitions(self, topic: str) -> int:
        """The number of partitions of a topic; raises `UnknownTopic`."""
        n = 0
        for e in os.scandir(self._topic_dir(topic)):
            if e.name.startswith(PARTITION_PREFIX) and e.name[len(PARTITION_PREFIX) :].isdigit():
                n += 1
        return n

    def _topic_dir(self, topic: str) -> Path:
        validate_topic_name(topic)  # a name is never a path: no '/', '..' or absolute names
        path = self.root / topic
        if not path.is_dir():
            raise UnknownTopic(f"topic {topic!r} does not exist in {self.root}; create it first")
        return path

    def partition_dir(self, tp: TopicPartition) -> Path:
        """The directory holding a partition's segments; raises `UnknownTopic` / `UnknownPartition`."""
        path = self.root / tp.topic / f"{PARTITION_PREFIX}{tp.partition}"
        if not path.is_dir():
            raise UnknownPartition(tp, self.partitions(tp.topic))
        return path
