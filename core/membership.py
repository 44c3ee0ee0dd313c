"""The membership interface both rebalancing schemes implement, and the rebalance listener's shape.

`pipeline.Consumer` talks to a group only through this interface, so scheme one
(`zk_rebalance.ZkGroupMember`) and scheme three (`coordinator.member.consumer_member.CoordinatorMember`) are
interchangeable: one consumer API for both schemes. It lives in `core`, below both, so neither
scheme imports `pipeline`:

    member.start()                        # join; rebalances then happen in the background
    member.assignment()                   # {TopicPartition, ...} owned right now
    member.generation                     # generation (scheme three) or rebalance epoch (scheme one)
    member.rebalance_in_progress          # True until the group settled this member's assignment
    member.commit({tp: OffsetAndMetadata(42)}, generation)   # raises CommitFailed when fenced
    member.committed([tp])                # {tp: 42} (the next offset to read) or {tp: None}
    member.close()                        # leave cleanly

Committed offsets are Kafka's: the offset of the *next* record to read.

The listener is called in Kafka's order — by scheme one from the member's own thread, by scheme
three from `member.poll()` on the caller's thread (`poll_driven=True`, as `pipeline.Consumer` uses
it; otherwise from its group thread): `on_partitions_revoked`
before the member (re)joins (eager) or after the new assignment arrived (cooperative, only the
partitions that move), `on_partitions_assigned` once the new assignment is known, and
`on_partitions_lost` instead of revoked when the member learns it was fenced (its partitions may
already belong to someone else, so it must not commit them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, runtime_checkable

from core.types import OffsetAndMetadata, TopicPartition


@runtime_checkable
class RebalanceListener(Protocol):
    """Kafka's `ConsumerRebalanceListener`. Implement any subset; `NoopListener` has all three."""

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None: ...

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None: ...

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None: ...


class NoopListener:
    """A listener that does nothing (the default)."""

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        pass

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        pass


@runtime_checkable
class Membership(Protocol):
    """One member of one consumer group, under either scheme."""

    @property
    def generation(self) -> int: ...

    @property
    def rebalance_in_progress(self) -> bool:
        """The first join, or a rebalance under way or due, is not finished (an empty assignment
        then does not yet mean "nothing to read")."""
        ...

    def start(self) -> None: ...

    def assignment(self) -> set[TopicPartition]: ...

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], generation: int) -> None: ...

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]: ...

    def close(self) -> None: ...


def call_listener(listener: object, method: str, partitions: set[TopicPartition]) -> None:
    """Call `listener.<method>(partitions)` if the listener has it (listeners may implement a subset)."""
    fn = getattr(listener, method, None)
    if fn is not None:
        fn(set(partitions))
