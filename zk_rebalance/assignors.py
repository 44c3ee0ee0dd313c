"""Kafka 0.8.2's `partition.assignment.strategy`: range (default) and roundrobin, over thread ids.

Pure functions of one member's view of the group (`AssignmentContext`). Every member computes
the whole group's decision; 0.8 keeps only its own entries. Worked example (also a test in
`tests/unit/zk_rebalance/test_zk_rebalance.py`): consumers C1 and C2 with two streams each, topic t with 5
partitions. Range gives `C1-0 ← 0,1  C1-1 ← 2  C2-0 ← 3  C2-1 ← 4` (threads in string order,
the first `5 % 4` threads get one extra). Round-robin sorts the partitions by the Java hash of
`"[t,p]"` and deals them to `C1-0, C1-1, C2-0, C2-1, C1-0, ...`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import cycle

from core.javahash import java_sort_key, java_string_hash
from core.types import TopicPartition
from zk_rebalance.layout import ThreadId


def thread_sort_key(t: ThreadId):
    """`ConsumerThreadId.compare`: by `toString`, with Java's String ordering."""
    return java_sort_key(str(t))


@dataclass(frozen=True)
class View:
    """`AssignmentContext`: what one member read from ZooKeeper for one rebalance attempt."""

    consumer: str
    my_threads: dict[str, list[ThreadId]]  # my topic -> my thread ids
    partitions: dict[str, list[int]]  # my topic -> partitions, sorted numerically
    consumers_for_topic: dict[str, list[ThreadId]]  # any topic of the group -> thread ids, sorted as strings
    consumers: list[str]  # sorted consumer ids

    def digest_material(self) -> dict:
        return {
            "consumers": self.consumers,
            "partitions": {t: len(p) for t, p in sorted(self.partitions.items())},
            "threads": {t: [str(x) for x in v] for t, v in sorted(self.consumers_for_topic.items())},
        }


class RangeAssignor:
    """Per topic, contiguous ranges of partitions over the topic's thread ids in string order."""

    name = "range"

    def assign(self, view: View, consumer: str | None = None) -> dict[TopicPartition, ThreadId]:
        """The decision for `consumer` (default: the viewing member, over its own thread ids)."""
        out: dict[TopicPartition, ThreadId] = {}
        for topic in view.my_threads:
            threads = view.consumers_for_topic.get(topic, [])
            parts = view.partitions.get(topic, [])
            if consumer is None:
                mine = view.my_threads[topic]
            else:
                mine = [t for t in threads if t.consumer == consumer]
            if not threads:
                continue
            per, extra = divmod(len(parts), len(threads))
            for tid in mine:
                pos = threads.index(tid)  # 0.8 asserts pos >= 0: a failed attempt if absent
                start = per * pos + min(pos, extra)
                n = per + (1 if pos + 1 <= extra else 0)
                for p in parts[start : start + n]:
                    out[TopicPartition(topic, p)] = tid
        return out


class RoundRobinAssignor:
    """0.8.2 round-robin: identical subscriptions required; partitions in Java-hash order."""

    name = "roundrobin"

    def assign(self, view: View, consumer: str | None = None) -> dict[TopicPartition, ThreadId]:
        me = consumer or view.consumer
        if not view.consumers_for_topic:
            return {}
        sets = [frozenset(v) for v in view.consumers_for_topic.values()]
        if any(s != sets[0] for s in sets):
            raise ValueError(
                "Round-robin assignment is allowed only if all consumers in the group subscribe to the "
                "same topics, AND if the stream counts across topics are identical for a given consumer "
                "instance"
            )
        threads = cycle(sorted(sets[0], key=thread_sort_key))
        tps = sorted(
            (TopicPartition(t, p) for t, ps in view.partitions.items() for p in ps),
            key=lambda tp: java_string_hash(f"[{tp.topic},{tp.partition}]"),
        )
        out: dict[TopicPartition, ThreadId] = {}
        for tp in tps:
            tid = next(threads)
            if tid.consumer == me:
                out[tp] = tid
        return out


ASSIGNORS = {"range": RangeAssignor, "roundrobin": RoundRobinAssignor}


def partition_assignor(name: str):
    """As 0.8.2: `roundrobin` is round-robin, any other value silently falls back to range."""
    return ASSIGNORS.get(name, RangeAssignor)()


def group_decision(assignor, view: View) -> dict[TopicPartition, ThreadId]:
    """Every consumer's decision as this member would compute it (for decision-disagreement, S2)."""
    out: dict[TopicPartition, ThreadId] = {}
    for c in view.consumers:
        try:
            out.update(assignor.assign(view, c))
        except ValueError:
            pass
    return out
