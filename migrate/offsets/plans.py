"""Import and reset plans against the real group and log: reads at the edge, `migrate.offsets.reset` decides.

Both refuse a group with live members before planning (and `migrate.schemes.writes.commit` checks again just
before writing), refuse unknown topics and partitions, and need the partitions' logs (for the
range to check or clamp against).
"""

from __future__ import annotations

from kazoo.client import KazooClient

from core.errors import GroupshiftError, UnknownTopic
from core.scheme import Rebalancer
from core.types import TopicPartition
from migrate.groups.describe import LogRange, log_offsets
from migrate.groups.listing import exists_in
from migrate.offsets.reset import Plan, PlanRow, Scenario, plan_reset
from migrate.schemes import coordinator_store, zk_store
from migrate.schemes.model import choose_scheme
from migrate.schemes.writes import check_inactive
from topics.log import Log

MAX_PARTITIONS = 200_000


def _committed(zk: KazooClient, scheme: Rebalancer, group: str) -> dict[TopicPartition, int]:
    read = zk_store.read_offsets if scheme is Rebalancer.ZK else coordinator_store.read_offsets
    return {tp: c.offset for tp, c in read(zk, group).items()}


def _check_partitions(zk: KazooClient, tps: list[TopicPartition]) -> None:
    counts = zk_store.topic_partitions(zk, sorted({tp.topic for tp in tps}))
    for tp in sorted(tps):
        n = counts[tp.topic]
        if n is None:
            raise UnknownTopic(
                f"topic {tp.topic!r} is not registered in ZooKeeper (/brokers/topics); check the name"
            )
        if tp.partition >= n:
            raise GroupshiftError(
                f"topic {tp.topic} has {n} partitions; partition {tp.partition} does not exist"
            )


def _ranges(log: Log, tps: list[TopicPartition]) -> dict[TopicPartition, LogRange]:
    ranges = log_offsets(log, tps)
    missing = [tp for tp in tps if ranges[tp] is None]
    if missing:
        tp = missing[0]
        raise GroupshiftError(
            f"partition {tp.topic}:{tp.partition} has no log under {log.root}; pass --data with the log root"
        )
    return ranges  # type: ignore[return-value]


def import_plan(
    zk: KazooClient, log: Log, group: str, offsets: dict[TopicPartition, int], scheme: str | Rebalancer | None
) -> tuple[Rebalancer, Plan]:
    s = choose_scheme(group, exists_in(zk, group), scheme)
    check_inactive(zk, s, group, "importing offsets")
    tps = sorted(offsets)
    _check_partitions(zk, tps)
    ranges = _ranges(log, tps)
    warnings = []
    for tp in tps:
        r = ranges[tp]
        if offsets[tp] > r.end:
            raise GroupshiftError(
                f"offset {offsets[tp]} for {tp.topic}:{tp.partition} is past the log end offset {r.end}; "
                "fix the file (nothing was written)"
            )
        if offsets[tp] < r.start:
            warnings.append(
                f"partition {tp.topic}:{tp.partition}: offset {offsets[tp]} is below the log start offset "
                f"{r.start} (removed by retention); consumers will apply auto_offset_reset"
            )
    current = _committed(zk, s, group)
    rows = [
        PlanRow(
            tp.topic, tp.partition, current.get(tp), offsets[tp], ranges[tp].end, ranges[tp].end - offsets[tp]
        )
        for tp in tps
    ]
    return s, Plan(rows, warnings)


def reset_plan(
    zk: KazooClient,
    log: Log,
    group: str,
    scenario: Scenario,
    *,
    scope: dict[str, list[int] | None],
    all_topics: bool,
    at_ms: int | None,
    file_offsets: dict[TopicPartition, int] | None,
    scheme: str | Rebalancer | None,
) -> tuple[Rebalancer, Plan]:
    s = choose_scheme(group, exists_in(zk, group), scheme)
    check_inactive(zk, s, group, "resetting offsets")
    committed = _committed(zk, s, group)
    if file_offsets is not None:
        tps = sorted(file_offsets)
    elif all_topics:
        tps = sorted(committed)
        if not tps:
            raise GroupshiftError(
                f"group {group!r} has no committed offsets; name the partitions with --topic"
            )
    else:
        counts = zk_store.topic_partitions(zk, sorted(scope))
        tps = []
        for topic, parts in scope.items():
            if counts[topic] is None:
                raise UnknownTopic(
                    f"topic {topic!r} is not registered in ZooKeeper (/brokers/topics); check the name"
                )
            tps += [TopicPartition(topic, p) for p in (parts if parts is not None else range(counts[topic]))]
    if len(tps) > MAX_PARTITIONS:
        raise GroupshiftError(f"{len(tps)} partitions in scope; at most {MAX_PARTITIONS} per reset")
    _check_partitions(zk, tps)
    ranges = _ranges(log, tps)
    times = None
    if at_ms is not None:
        times = {}
        for tp in tps:
            found = log.offset_for_time(tp, at_ms)
            times[tp] = found.offset if found else None
    current = {tp: committed.get(tp) for tp in tps}
    return s, plan_reset(scenario, current, ranges, times=times, file_offsets=file_offsets)


def kafka_import_plan(target, group: str, offsets: dict[TopicPartition, int]) -> Plan:
    """`offsets import --bootstrap`: the same checks against a Kafka-protocol group (`KafkaTarget`)."""
    tps = sorted(offsets)
    target.check_partitions(tps)
    ranges = target.watermarks(tps)
    warnings = []
    for tp in tps:
        start, end = ranges[tp]
        if offsets[tp] > end:
            raise GroupshiftError(
                f"offset {offsets[tp]} for {tp.topic}:{tp.partition} is past the log end offset {end} on "
                f"{target.bootstrap}; fix the file (nothing was written)"
            )
        if offsets[tp] < start:
            warnings.append(
                f"partition {tp.topic}:{tp.partition}: offset {offsets[tp]} is below the log start offset "
                f"{start} (removed by retention); consumers will apply auto.offset.reset"
            )
    current = target.offsets(group, tps)
    target.check_idle(group, current)
    rows = [
        PlanRow(
            tp.topic, tp.partition, current.get(tp), offsets[tp], ranges[tp][1], ranges[tp][1] - offsets[tp]
        )
        for tp in tps
    ]
    return Plan(rows, warnings)
