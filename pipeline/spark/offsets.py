"""The `groupshift` source's offset: what Spark's checkpoint holds for one micro-batch.

Spark writes it to `<checkpoint>/offsets/<batchId>` before the batch runs and hands it back to
`partitions(start, end)` (and, after a restart, to the first `latestOffset`). It names the reader
that planned it, the generation it was planned under, where that reader takes the batch's commit,
and for each partition the half-open range `[from, to)` the batch reads — so a replay reads the
same records, and a partition the group has just given the reader starts where the *group's*
committed offset says (Spark's previous end for it may be an earlier ownership's):

    {"groupshift": 1, "member": "a1b2…", "generation": 7, "address": "127.0.0.1:40411",
     "ranges": {"clicks": {"0": [3000, 4000], "3": [0, 1000]}}}

Keys are strings in JSON; this module turns them into `TopicPartition`s and back.

>>> o = StreamOffset(member="m", generation=3, ranges={TopicPartition("t", 1): (5, 9)})
>>> decode(encode(o)) == o
True
>>> encode(StreamOffset())["ranges"]
{}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.errors import GroupshiftError
from core.types import TopicPartition

VERSION = 1


class BadOffset(GroupshiftError):
    """An offset in the checkpoint that this source did not write (or a newer version wrote)."""


@dataclass(frozen=True)
class StreamOffset:
    member: str = ""  # the reader instance that planned the batch ("" before the first plan)
    generation: int = -1
    address: str = ""  # host:port where that reader takes the batch's commit
    secret: str = ""  # the key that reader's commit service checks
    ranges: Mapping[TopicPartition, tuple[int, int]] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())

    def ends(self) -> dict[TopicPartition, int]:
        return {tp: end for tp, (_, end) in self.ranges.items()}


def encode(offset: StreamOffset) -> dict[str, Any]:
    nested: dict[str, dict[str, list[int]]] = {}
    for tp, (start, end) in sorted(offset.ranges.items()):
        nested.setdefault(tp.topic, {})[str(tp.partition)] = [start, end]
    return {
        "groupshift": VERSION,
        "member": offset.member,
        "generation": offset.generation,
        "address": offset.address,
        "secret": offset.secret,
        "ranges": nested,
    }


def decode(data: Mapping[str, Any] | None) -> StreamOffset:
    """The offset Spark hands back (None: no batch yet)."""
    if not data:
        return StreamOffset()
    if data.get("groupshift") != VERSION:
        raise BadOffset(
            f"the checkpoint holds an offset this source did not write ({str(dict(data))[:80]}); "
            "use a new checkpointLocation for a groupshift stream"
        )
    try:
        ranges = {
            TopicPartition(topic, int(p)): (int(r[0]), int(r[1]))
            for topic, parts in data.get("ranges", {}).items()
            for p, r in parts.items()
        }
        return StreamOffset(
            member=str(data.get("member", "")),
            generation=int(data.get("generation", -1)),
            address=str(data.get("address", "")),
            secret=str(data.get("secret", "")),
            ranges=ranges,
        )
    except (TypeError, ValueError, IndexError, AttributeError) as exc:
        raise BadOffset(f"a malformed groupshift offset in the checkpoint: {exc}") from None
