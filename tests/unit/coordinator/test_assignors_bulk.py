"""The assignors' bulk steps give what their one-at-a-time definitions give.

Large groups are assigned with strided slices and C-level passes (a round of appends, a list
comparison) instead of a Python step per partition; each of those steps is checked here against the
plain loop it replaces, on random shapes that reach every branch (one or two partitions per member,
many members per round, levels that differ by more than one).
"""

from __future__ import annotations

import gc
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.assignors.base import Subscription, collector_paused
from coordinator.assignors.cooperative_sticky import partitions_transferring_ownership
from coordinator.assignors.range import hand_out
from coordinator.assignors.sticky import fill_to_min_quota
from coordinator.assignors.sticky_general import water_fill
from core.types import TopicPartition

bulk = settings(max_examples=200, deadline=None)


def parts(n: int, topic: str = "t") -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(n)]


@bulk
@given(n=st.integers(1, 60), c=st.integers(1, 70), before=st.integers(0, 3))
def test_range_hand_out_is_consecutive_ranges(n: int, c: int, before: int) -> None:
    """The first n % c members take n // c + 1 consecutive partitions, the others n // c."""
    lists = [parts(before, "old") for _ in range(c)]
    expected = [list(lst) for lst in lists]
    partitions = parts(n)
    quota, extra = divmod(n, c)
    start = 0
    for i, lst in enumerate(expected):
        length = quota + (1 if i < extra else 0)
        lst.extend(partitions[start : start + length])
        start += length
    hand_out(partitions, lists)
    assert lists == expected


@bulk
@given(
    owned=st.lists(st.integers(0, 6), min_size=1, max_size=12),
    min_quota=st.integers(1, 8),
    extra=st.integers(0, 5),
)
def test_fill_to_min_quota_is_kafkas_round_robin(owned: list[int], min_quota: int, extra: int) -> None:
    """Kafka's loop: unassigned partitions one at a time to the members under minQuota in member
    order, pass after pass; a member reaching minQuota leaves the queue and joins exactly_min."""
    kept = [parts(k, f"kept{mi}") for mi, k in enumerate(owned)]
    under_min = [mi for mi, k in enumerate(owned) if k < min_quota]
    unassigned = parts(sum(min_quota - len(kept[mi]) for mi in under_min) + extra)

    expected_new: list[list[TopicPartition]] = [[] for _ in owned]
    expected_exactly: list[int] = []
    queue, left = deque(under_min), iter(unassigned)
    while queue:
        mi = queue.popleft()
        expected_new[mi].append(next(left))
        if len(kept[mi]) + len(expected_new[mi]) == min_quota:
            expected_exactly.append(mi)
        else:
            queue.append(mi)

    new: list[list[TopicPartition]] = [[] for _ in owned]
    exactly: list[int] = []
    used = fill_to_min_quota(unassigned, under_min, kept, min_quota, new, exactly)
    assert (new, exactly, used) == (expected_new, expected_exactly, len(unassigned) - extra)


@bulk
@given(
    sizes=st.lists(st.integers(0, 5), min_size=1, max_size=40),
    data=st.data(),
    n=st.integers(1, 120),
)
def test_water_fill_is_one_at_a_time_to_the_smallest_then_lowest_rank(
    sizes: list[int], data: st.DataObject, n: int
) -> None:
    eligible = sorted(data.draw(st.sets(st.sampled_from(range(len(sizes))), min_size=1)))
    lists = [parts(s, f"m{r}") for r, s in enumerate(sizes)]
    expected = [list(lst) for lst in lists]
    for tp in parts(n):
        r = min(eligible, key=lambda r: (len(expected[r]), r))
        expected[r].append(tp)
    got_sizes = list(sizes)
    water_fill(parts(n), eligible, got_sizes, lists)
    assert lists == expected
    assert got_sizes == [len(lst) for lst in expected]


@st.composite
def ownership_changes(draw: st.DrawFn) -> tuple[dict[str, Subscription], dict[str, list[TopicPartition]]]:
    """Members that owned some partitions, and an assignment that keeps, moves and adds some."""
    universe = parts(draw(st.integers(1, 12)))
    members = [f"m{i}" for i in range(draw(st.integers(1, 5)))]
    owner = {tp: draw(st.sampled_from([None, *members])) for tp in universe}
    owned = {m: [tp for tp in universe if owner[tp] == m] for m in members}
    assignment: dict[str, list[TopicPartition]] = {}
    for m in members:
        keep = draw(st.booleans())  # keep all of it, first and in order, as the sticky builders do
        assignment[m] = list(owned[m]) if keep else draw(st.permutations(owned[m]))[: len(owned[m]) // 2]
    for tp in universe:
        if not any(tp in a for a in assignment.values()):
            assignment[draw(st.sampled_from(members))].append(tp)
    subs = {m: Subscription(["t"], owned_partitions=owned[m], generation=1) for m in members}
    return subs, assignment


@bulk
@given(case=ownership_changes())
def test_partitions_transferring_ownership_is_kafkas_definition(case) -> None:  # noqa: ANN001
    """Kafka's computePartitionsTransferringOwnership: partitions some member owned and is not assigned
    again, newly assigned to another member."""
    subs, assignment = case
    revoked = {tp for m, a in assignment.items() for tp in subs[m].owned_partitions if tp not in set(a)}
    expected = {
        tp: m
        for m, a in assignment.items()
        for tp in a
        if tp in revoked and tp not in set(subs[m].owned_partitions)
    }
    assert partitions_transferring_ownership(subs, assignment) == expected


@pytest.fixture
def collector_state():
    """The collector's state as the test found it, restored afterwards."""
    enabled, frozen = gc.isenabled(), gc.get_freeze_count()
    yield
    if not frozen:
        gc.unfreeze()
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.usefixtures("collector_state")
def test_collector_is_paused_in_the_block_and_restored_after_it_even_on_error() -> None:
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("inside")
    assert gc.isenabled()
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()  # it was off: it stays off


@pytest.mark.usefixtures("collector_state")
def test_collector_pause_leaves_the_process_frozen_objects_frozen() -> None:
    # Frozen objects are not in gc.get_objects() (it walks the three generations, not the
    # permanent one). The freeze count is no proof: other threads of the worker may free frozen
    # objects meanwhile.
    gc.enable()
    before = []
    gc.freeze()
    assert gc.get_freeze_count()
    with collector_paused():
        made = [[] for _ in range(1000)]
    tracked = {id(o) for o in gc.get_objects()}
    assert id(before) not in tracked  # still frozen: the block did not unfreeze the process
    assert all(id(m) in tracked for m in made)  # and did not freeze what it made
    assert gc.isenabled()
