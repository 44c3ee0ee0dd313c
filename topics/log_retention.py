"""The log's retention: whole old segments deleted, oldest first, never the newest.

`retain` deletes a partition's segments by age, count or size under the partition's writer lock
(readers see the change on their next listing). `LogRetention` is a base of `topics.log.Log`.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta

from core.errors import GroupshiftError
from core.types import TopicPartition
from topics.limits import MAX_RETAIN_AGE_S, MAX_RETAIN_BYTES, MAX_RETAIN_SEGMENTS
from topics.log_input import _to_micros
from topics.log_writer import _PartitionLock


class LogRetention:
    """Retention of the log (see the module docstring)."""

    def retain(
        self,
        topic: str,
        *,
        max_age: float | timedelta | None = None,
        max_segments: int | None = None,
        max_bytes: int | None = None,
        now: int | datetime | None = None,
    ) -> dict[TopicPartition, int]:
        """Delete whole old segments; returns each partition's earliest offset afterwards.

        A segment goes when its newest record is older than `max_age` (seconds), when more than
        `max_segments` remain, or while the partition is larger than `max_bytes` — oldest first,
        and never the newest segment, which carries the log end offset (Kafka keeps its active
        segment too).
        """
        if isinstance(max_age, timedelta):
            max_age = max_age.total_seconds()
        _check_retention(max_age, max_segments, max_bytes)
        now_us = _to_micros(now) if now is not None else time.time_ns() // 1000
        out = {}
        for p in range(self.partitions(topic)):
            tp = TopicPartition(topic, p)
            directory = self.partition_dir(tp)
            with _PartitionLock(directory) as lock:
                infos = self._segments(tp, fresh=True)[1]
                total = sum(i.size for i in infos)
                remaining = len(infos)
                for info in infos[:-1]:  # never the newest: the active segment, or the log end's
                    old = max_age is not None and info.max_timestamp < now_us - max_age * 1_000_000
                    many = max_segments is not None and remaining > max_segments
                    big = max_bytes is not None and total > max_bytes
                    if not (old or many or big):
                        break
                    if remaining == len(infos):
                        lock.bump()  # writers: the directory changes
                    os.unlink(info.path)
                    total -= info.size
                    remaining -= 1
                out[tp] = self._listing(tp, fresh=True).bases[0] if infos else 0
        return out


def _check_retention(max_age: float | None, max_segments: int | None, max_bytes: int | None) -> None:
    """Refuse retention settings that are nonsensical, so a typo never deletes segments."""
    if max_age is None and max_segments is None and max_bytes is None:
        raise GroupshiftError("give at least one of max_age, max_segments, max_bytes")
    if max_age is not None and not (0 <= max_age <= MAX_RETAIN_AGE_S):  # also refuses NaN
        raise GroupshiftError(f"max_age must be between 0 and {MAX_RETAIN_AGE_S:.0f} s, not {max_age}")
    for name, value, low, top in (
        ("max_segments", max_segments, 1, MAX_RETAIN_SEGMENTS),
        ("max_bytes", max_bytes, 0, MAX_RETAIN_BYTES),
    ):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not low <= value <= top
        ):
            raise GroupshiftError(f"{name} must be between {low} and {top}, not {value!r}")
