"""What the members of a sticky group owned: the input both sticky builders share.

`AbstractStickyAssignor.read_ownership` (in `sticky`) builds it; the constrained builder (in
`sticky`) and the general builder (`sticky_general`) read it. It sits below both modules so that
neither has to import the other for its type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from core.types import TopicPartition


@dataclass
class Ownership:
    """What the members owned, after Kafka's `allSubscriptionsEqual` pass.

    ``owned[i]`` are member i's still-valid claims (members in Java `HashMap` order); ``multiple`` the
    partitions claimed by two members of the same generation (taken from both).
    """

    members: list[str]
    topics: list[str]  # Java name order
    topic_index: dict[str, int]
    counts: list[int]
    owned: list[list[TopicPartition]]
    generations: list[int]
    raw_owned: list[Sequence[TopicPartition]]
    multiple: set[TopicPartition] = field(default_factory=set)
    all_equal: bool = True
