"""Per-partition rows of `groups describe`: committed offset, log end, lag, owner and status.

Pure, except `log_offsets`, which reads the log's start and end offsets from its directory (and
imports the log, pyarrow, only then).

    ends = log_offsets(Log(root), partitions_of(view))
    rows = partition_rows(view, ends, watch_state, now_ms)
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import msgspec

from core.errors import GroupshiftError
from core.types import TopicPartition
from migrate.groups.status import evaluate, group_status
from migrate.groups.watch import WatchState
from migrate.schemes.model import GroupView

if TYPE_CHECKING:
    from topics.log import Log


class PartitionRow(msgspec.Struct):
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    lag: int | None
    owner: str | None
    host: str | None
    client_id: str | None
    status: str | None


class LogRange(msgspec.Struct, frozen=True):
    start: int
    end: int


def partitions_of(view: GroupView) -> list[TopicPartition]:
    """Committed, owned, and (KAFKA-3144) subscribed-but-unowned partitions, sorted."""
    tps = set(view.offsets) | set(view.owners)
    tps |= {TopicPartition(t, p) for t, n in view.subscribed.items() for p in range(n)}
    return sorted(tps)


def log_offsets(log: Log, tps: list[TopicPartition]) -> dict[TopicPartition, LogRange | None]:
    """Start and end offset of each partition's log; None where the log has no such partition."""
    from topics.active import parse_active_name
    from topics.log import PARTITION_PREFIX
    from topics.segment import parse_segment_name

    out: dict[TopicPartition, LogRange | None] = {}
    for tp in tps:
        # one listing per partition; only a partition with segments (Parquet, or an active segment's
        # index file) needs the log
        try:
            names = os.listdir(log.root / tp.topic / f"{PARTITION_PREFIX}{tp.partition}")
        except (FileNotFoundError, NotADirectoryError):
            out[tp] = None
            continue
        segments = [n for n in names if parse_segment_name(n) is not None or parse_active_name(n) is not None]
        if not segments:
            out[tp] = LogRange(0, 0)
            continue
        try:
            out[tp] = LogRange(log.earliest(tp), log.latest(tp))
        except (GroupshiftError, FileNotFoundError):
            out[tp] = None
    return out


def lag(committed: int | None, end: int | None) -> int | None:
    """Log end − committed (never negative), unknown without either."""
    if committed is None or end is None:
        return None
    return max(0, end - committed)


def partition_rows(
    view: GroupView, ranges: dict[TopicPartition, LogRange | None], watch: WatchState | None, now: int
) -> list[PartitionRow]:
    members = {m.member_id: m for m in view.members}
    rows = []
    for tp in partitions_of(view):
        c = view.offsets.get(tp)
        r = ranges.get(tp)
        end = r.end if r else None
        owner = view.owners.get(tp)
        m = members.get(owner) if owner else None
        status = None
        if watch is not None:
            commits, ends = watch.window(tp)
            status = evaluate(commits, current_lag=lag(c.offset if c else None, end), now=now, ends=ends)
        rows.append(
            PartitionRow(
                tp.topic,
                tp.partition,
                c.offset if c else None,
                end,
                lag(c.offset if c else None, end),
                owner,
                m.host if m else None,
                m.client_id if m else None,
                status,
            )
        )
    return rows


def group_summary(view: GroupView, rows: list[PartitionRow]) -> dict:
    lags = [r.lag for r in rows if r.lag is not None]
    statuses = [r.status for r in rows]
    worst = max(rows, key=lambda r: r.lag if r.lag is not None else -1, default=None)
    return {
        "group": view.group,
        "scheme": view.scheme.value,
        "state": view.state,
        "protocol_type": view.protocol_type,
        "protocol": view.protocol,
        "generation": view.generation,
        "leader": view.leader,
        "coordinator": view.coordinator,
        "members": len(view.members),
        "partitions": len(rows),
        "total_lag": sum(lags) if lags else None,
        "max_lag": None
        if worst is None or worst.lag is None
        else f"{worst.topic}:{worst.partition}={worst.lag}",
        "status": group_status(statuses) if any(s is not None for s in statuses) else None,
    }
