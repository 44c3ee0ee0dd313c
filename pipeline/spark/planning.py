"""Planning one micro-batch of the `groupshift` source: pure, no I/O.

For each partition the group gives the reader, the batch starts at the group's committed offset
(or, never committed, where `startingOffsets` says) and ends at the log end, capped by the read
limit shared across partitions in partition order; under `Trigger.AvailableNow` also by the log
end seen when the trigger started.

>>> tp = TopicPartition("t", 0)
>>> plan([tp], {tp: 10}, ends={tp: 50}, earliest={tp: 0}, budget=15).ranges
{TopicPartition(topic='t', partition=0): (10, 25)}
>>> plan([tp], {tp: None}, ends={tp: 50}, earliest={tp: 0}, resets={tp: 50}).ranges
{}
>>> plan([tp], {tp: 3}, ends={tp: 50}, earliest={tp: 20}, fail_on_data_loss=False).ranges
{TopicPartition(topic='t', partition=0): (20, 50)}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from core.errors import GroupshiftError
from core.types import TopicPartition


class DataLoss(GroupshiftError):
    """The group's committed offset is below the log's earliest: records were removed unread."""


@dataclass(frozen=True)
class Plan:
    ranges: dict[TopicPartition, tuple[int, int]]
    lag: int  # records between the starts and the log ends, over every owned partition
    skipped: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)  # (from, to) lost


def plan(
    owned: Iterable[TopicPartition],
    committed: Mapping[TopicPartition, int | None],
    *,
    ends: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    resets: Mapping[TopicPartition, int] | None = None,
    budget: int | None = None,
    targets: Mapping[TopicPartition, int] | None = None,
    fail_on_data_loss: bool = True,
) -> Plan:
    """`resets`: where a partition with no committed offset starts (absent: its earliest)."""
    ranges: dict[TopicPartition, tuple[int, int]] = {}
    skipped: dict[TopicPartition, tuple[int, int]] = {}
    lag = 0
    for tp in sorted(owned):
        start = committed.get(tp)
        if start is None:
            start = (resets or {}).get(tp, earliest[tp])
        if start < earliest[tp]:
            if fail_on_data_loss:
                raise DataLoss(
                    f"{tp}: the group's offset {start} is below the log's earliest {earliest[tp]} — "
                    f"{earliest[tp] - start:,} records were removed unread; set failOnDataLoss=false to "
                    "go on from the earliest"
                )
            skipped[tp] = (start, earliest[tp])
            start = earliest[tp]
        end = ends[tp]
        lag += max(end - start, 0)
        if targets is not None and tp in targets:
            end = min(end, targets[tp])
        if budget is not None:
            end = min(end, start + max(budget, 0))
        if end > start:
            ranges[tp] = (start, end)
            if budget is not None:
                budget -= end - start
    return Plan(ranges, lag, skipped)
