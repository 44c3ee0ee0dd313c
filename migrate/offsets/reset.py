"""Offset reset plans, pure: a scenario, the partitions in scope and their offsets in; a plan out.

Scenarios are `kafka-consumer-groups --reset-offsets`'s. `--to-offset`, `--shift-by` and
`--from-file` are clamped to the log's range with a warning; a time with no record at or after
it falls back to the log end offset with a warning (KAFKA-12287). Warnings are returned for the
caller to print on stderr.

>>> from core.types import TopicPartition as TP
>>> from migrate.groups.describe import LogRange
>>> plan = plan_reset(Scenario("shift-by", 5), {TP("t", 0): 10}, {TP("t", 0): LogRange(0, 12)})
>>> plan.rows[0].new, plan.warnings
(12, ['partition t:0: new offset 15 is above the log end offset 12; using 12'])
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import msgspec

from core.errors import GroupshiftError
from core.types import TopicPartition
from migrate.groups.describe import LogRange

SCENARIOS = (
    "to-earliest",
    "to-latest",
    "to-current",
    "to-offset",
    "shift-by",
    "to-datetime",
    "by-duration",
    "from-file",
)
MAX_OFFSET = 2**63 - 1


class Scenario(msgspec.Struct, frozen=True):
    kind: str
    value: int | None = None  # to-offset / shift-by


class PlanRow(msgspec.Struct, frozen=True):
    topic: str
    partition: int
    current: int | None
    new: int
    log_end: int
    lag_after: int


class Plan(msgspec.Struct):
    rows: list[PlanRow]
    warnings: list[str]

    def offsets(self) -> dict[TopicPartition, int]:
        return {TopicPartition(r.topic, r.partition): r.new for r in self.rows}


def plan_reset(
    scenario: Scenario,
    current: dict[TopicPartition, int | None],
    ranges: dict[TopicPartition, LogRange],
    *,
    times: dict[TopicPartition, int | None] | None = None,
    file_offsets: dict[TopicPartition, int] | None = None,
) -> Plan:
    """`current` holds every partition in scope (None: nothing committed); `ranges` each one's log range.

    `times`: for to-datetime/by-duration, the first offset at or after the time (None: none).
    """
    rows, warnings = [], []
    for tp in sorted(current):
        r = ranges[tp]
        committed = current[tp]
        kind = scenario.kind
        if kind == "to-earliest":
            new = r.start
        elif kind == "to-latest":
            new = r.end
        elif kind == "to-current":
            new = committed if committed is not None else r.end
        elif kind == "to-offset":
            new = _clamp(tp, scenario.value, r, warnings)
        elif kind == "shift-by":
            if committed is None:
                raise GroupshiftError(
                    f"cannot shift partition {tp.topic}:{tp.partition}: it has no committed offset; "
                    "use another scenario for it (e.g. --to-earliest)"
                )
            new = _clamp(tp, committed + scenario.value, r, warnings)
        elif kind in ("to-datetime", "by-duration"):
            found = (times or {}).get(tp)
            if found is None:
                warnings.append(
                    f"partition {tp.topic}:{tp.partition} has no record at or after that time; "
                    f"using the log end offset {r.end}"
                )
                new = r.end
            else:
                new = found
        elif kind == "from-file":
            new = _clamp(tp, (file_offsets or {})[tp], r, warnings)
        else:
            raise GroupshiftError(f"unknown reset scenario {kind!r}")
        rows.append(PlanRow(tp.topic, tp.partition, committed, new, r.end, max(0, r.end - new)))
    return Plan(rows, warnings)


def _clamp(tp: TopicPartition, offset: int, r: LogRange, warnings: list[str]) -> int:
    if offset > r.end:
        warnings.append(
            f"partition {tp.topic}:{tp.partition}: new offset {offset} is above the log end offset {r.end}; "
            f"using {r.end}"
        )
        return r.end
    if offset < r.start:
        warnings.append(
            f"partition {tp.topic}:{tp.partition}: new offset {offset} is below the log start offset "
            f"{r.start}; using {r.start}"
        )
        return r.start
    return offset


def parse_datetime(text: str) -> datetime:
    """ISO 8601 (`2024-05-01T12:00:00[.sss][Z|±hh:mm]`); no time zone means UTC (KAFKA-5644)."""
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        raise GroupshiftError(
            f"--to-datetime {text!r} is not ISO 8601; expected e.g. 2024-05-01T12:00:00.000+05:30 "
            "(UTC when no zone is given)"
        ) from None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt


_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?=\d)(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:[.,]\d{1,9})?)S)?)?",
    re.IGNORECASE,
)


def parse_duration(text: str) -> timedelta:
    """ISO 8601 `PnDTnHnMnS` (Java's `Duration.parse`, non-negative); e.g. `PT30M`, `P1DT2H`."""
    m = _DURATION.fullmatch(text.strip())
    if not m or text.strip().upper() in ("P", "PT") or not any(m.groupdict().values()):
        raise GroupshiftError(
            f"--by-duration {text!r} is not an ISO 8601 duration PnDTnHnMnS (e.g. PT30M, P1DT2H)"
        )
    g = {k: v or "0" for k, v in m.groupdict().items()}
    try:
        return timedelta(
            days=int(g["d"]), hours=int(g["h"]), minutes=int(g["m"]), seconds=float(g["s"].replace(",", "."))
        )
    except OverflowError:
        raise GroupshiftError(f"--by-duration {text!r} is too long") from None


def parse_topic_scope(specs: tuple[str, ...]) -> dict[str, list[int] | None]:
    """`--topic T` or `--topic T:0,2,5` (repeatable) -> {topic: partitions or None for all}."""
    out: dict[str, list[int] | None] = {}
    for spec in specs:
        topic, colon, parts = spec.partition(":")
        if not topic or "/" in topic or "\0" in topic or topic.strip() != topic:
            raise GroupshiftError(f"--topic {spec!r}: not a topic name")
        if topic in out:
            raise GroupshiftError(f"--topic {topic} given twice")
        if not colon:
            out[topic] = None
            continue
        items = parts.split(",")
        if not all(p.isascii() and p.isdigit() for p in items):
            raise GroupshiftError(
                f"--topic {spec!r}: partitions must be non-negative numbers, e.g. {topic}:0,2"
            )
        nums = [int(p) for p in items]
        if len(set(nums)) != len(nums):
            raise GroupshiftError(f"--topic {spec!r} lists a partition twice")
        out[topic] = nums
    return out
