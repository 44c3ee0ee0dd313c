"""Property tests for every assignor: validity, balance, stickiness and cooperative safety."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.assignors import Subscription, get_assignor
from coordinator.assignors.payloads import encode_sticky_user_data
from core.types import TopicPartition

ALL = ["range", "roundrobin", "sticky", "cooperative-sticky", "random"]
STICKY = ["sticky", "cooperative-sticky"]
_quiet = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("assignors", max_examples=150, **_quiet)
settings.register_profile("assignors-long", max_examples=3000, **_quiet)  # HYPOTHESIS_PROFILE=assignors-long
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "assignors"))

Counts = dict[str, int]
Topics = dict[str, list[str]]
Result = dict[str, list[TopicPartition]]


@st.composite
def groups(draw: st.DrawFn, identical: bool | None = None, min_members: int = 1) -> tuple[Counts, Topics]:
    """Up to 4 topics of 0..7 partitions, 1..6 members with identical or random subscriptions."""
    topics = [f"t{i}" for i in range(draw(st.integers(1, 4)))]
    counts = {t: draw(st.integers(0, 7)) for t in topics}
    members = draw(st.permutations([f"m{i}" for i in range(draw(st.integers(min_members, 6)))]))
    same = draw(st.booleans()) if identical is None else identical
    if same:
        chosen = draw(st.lists(st.sampled_from(topics), unique=True, min_size=1))
        return counts, {m: chosen for m in members}
    return counts, {m: draw(st.lists(st.sampled_from(topics), unique=True)) for m in members}


def subscription(
    name: str, topics: list[str], owned: list[TopicPartition] = (), generation: int = -1
) -> Subscription:
    """Ownership where each assignor reads it: the eager sticky assignor from its user data."""
    if name == "sticky" and (owned or generation >= 0):
        return Subscription(
            topics, user_data=encode_sticky_user_data(owned, generation), generation=generation
        )
    return Subscription(topics, owned_partitions=owned, generation=generation)


def fresh(name: str, counts: Counts, topics_of: Topics) -> Result:
    return get_assignor(name).assign(counts, {m: Subscription(ts) for m, ts in topics_of.items()})


def check_valid(counts: Counts, topics_of: Topics, result: Result, complete: bool = True) -> None:
    """Every member present; only subscribed topics; no partition twice; all assigned if ``complete``."""
    assert set(result) == set(topics_of)
    seen = Counter(tp for tps in result.values() for tp in tps)
    assert all(n == 1 for n in seen.values()), "a partition is assigned twice"
    for member, tps in result.items():
        assert all(tp.topic in topics_of[member] and 0 <= tp.partition < counts[tp.topic] for tp in tps)
    if complete:
        subscribed = {t for ts in topics_of.values() for t in ts}
        assert set(seen) == {TopicPartition(t, p) for t in subscribed for p in range(counts[t])}


def check_sticky_balance(counts: Counts, topics_of: Topics, result: Result) -> None:
    """Kafka's balance goal: counts within one, or no member with 2+ fewer could take a partition."""
    sizes = {m: len(tps) for m, tps in result.items()}
    if not sizes or max(sizes.values()) - min(sizes.values()) <= 1:
        return
    owner = {tp: m for m, tps in result.items() for tp in tps}
    for m, ts in topics_of.items():
        if sizes[m] == sum(counts[t] for t in ts):
            continue
        for t in ts:
            for p in range(counts[t]):
                other = owner[TopicPartition(t, p)]
                assert sizes[other] <= sizes[m] + 1, f"{t}-{p} could move from {other} to {m}"


def settle(
    name: str, counts: Counts, topics_of: Topics, subs: dict[str, Subscription], result: Result
) -> Result:
    """Cooperative follow-up rebalances until nothing is revoked; each round must be cooperative-safe."""
    assignor = get_assignor(name)
    for generation in range(2, 7):
        check_cooperative_round(subs, result)
        if not any(set(owned_of(name, s)) - set(result[m]) for m, s in subs.items()):
            return result
        subs = {m: subscription(name, topics_of[m], result[m], generation) for m in topics_of}
        result = assignor.assign(counts, subs)
    raise AssertionError("the cooperative assignor did not converge within 4 follow-up rebalances")


def owned_of(name: str, s: Subscription) -> list[TopicPartition]:
    return get_assignor(name).member_data(s)[0] if name in STICKY else list(s.owned_partitions)


def check_cooperative_round(subs: dict[str, Subscription], result: Result) -> None:
    """No partition goes to a member that did not own it while another member still claims it."""
    claims: dict[TopicPartition, set[str]] = {}
    for m, s in subs.items():
        for tp in s.owned_partitions:
            claims.setdefault(tp, set()).add(m)
    for m, tps in result.items():
        owned = set(subs[m].owned_partitions)
        for tp in tps:
            if tp not in owned:
                assert not claims.get(tp, set()) - {m}, f"{tp} given to {m} while {claims[tp]} still own it"


def moves(previous: Result, result: Result) -> dict[str, set[tuple[str, str]]]:
    """Per topic, the (old owner, new owner) pairs of partitions that changed owner."""
    owner = {tp: m for m, tps in result.items() for tp in tps}
    out: dict[str, set[tuple[str, str]]] = {}
    for m, tps in previous.items():
        for tp in tps:
            new = owner.get(tp)
            if new is not None and new != m:
                out.setdefault(tp.topic, set()).add((m, new))
    return out


# --- validity and balance, fresh groups ------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
@given(group=groups())
def test_fresh_assignment_is_valid(name: str, group: tuple[Counts, Topics]) -> None:
    counts, topics_of = group
    check_valid(counts, topics_of, fresh(name, counts, topics_of))


@pytest.mark.parametrize("name", ["roundrobin", *STICKY])
@given(group=groups(identical=True))
def test_identical_subscriptions_are_balanced(name: str, group: tuple[Counts, Topics]) -> None:
    counts, topics_of = group
    sizes = [len(v) for v in fresh(name, counts, topics_of).values()]
    assert max(sizes) - min(sizes) <= 1


@given(group=groups())
def test_range_balances_each_topic_over_its_subscribers(group: tuple[Counts, Topics]) -> None:
    counts, topics_of = group
    result = fresh("range", counts, topics_of)
    for t in counts:
        per_member = [sum(tp.topic == t for tp in result[m]) for m, ts in topics_of.items() if t in ts]
        if per_member:
            assert max(per_member) - min(per_member) <= 1


@pytest.mark.parametrize("name", STICKY)
@given(group=groups())
def test_sticky_fresh_assignment_is_balanced(name: str, group: tuple[Counts, Topics]) -> None:
    counts, topics_of = group
    check_sticky_balance(counts, topics_of, fresh(name, counts, topics_of))


# --- rebalancing with previous ownership ------------------------------------------------------------------


@st.composite
def rebalances(draw: st.DrawFn, identical: bool | None = None) -> tuple[Counts, Topics, Result, Topics]:
    """A group, its fresh sticky assignment, and the next group: members leave, join, resubscribe."""
    counts, before = draw(groups(identical=identical))
    previous = fresh("sticky", counts, before)
    same = len({tuple(v) for v in before.values()}) == 1
    stayers = draw(st.lists(st.sampled_from(sorted(before)), unique=True, min_size=1))
    joiners = [f"n{i}" for i in range(draw(st.integers(0, 3)))]
    topics = sorted(counts)
    after: Topics = {}
    for m in stayers + joiners:
        if same or (m in before and draw(st.booleans())):
            after[m] = before[m] if m in before else next(iter(before.values()))
        else:
            after[m] = draw(st.lists(st.sampled_from(topics), unique=True))
    return counts, before, {m: previous[m] for m in stayers}, after


def rebalance(
    name: str, counts: Counts, previous: Result, after: Topics
) -> tuple[dict[str, Subscription], Result]:
    subs = {m: subscription(name, ts, previous.get(m, []), 1) for m, ts in after.items()}
    return subs, get_assignor(name).assign(counts, subs)


@pytest.mark.parametrize("name", STICKY)
@given(case=rebalances())
def test_rebalance_is_valid_balanced_and_without_back_and_forth_moves(name: str, case) -> None:  # noqa: ANN001
    counts, _, previous, after = case
    subs, result = rebalance(name, counts, previous, after)
    if name == "cooperative-sticky":
        check_cooperative_round(subs, result)
        check_valid(counts, after, result, complete=False)
        result = settle(name, counts, after, subs, result)
    check_valid(counts, after, result)
    check_sticky_balance(counts, after, result)
    for topic, pairs in moves(previous, result).items():
        assert not any((b, a) in pairs for a, b in pairs), f"partitions of {topic} moved both ways: {pairs}"


@pytest.mark.parametrize("name", STICKY)
@given(case=rebalances(identical=True))
def test_identical_subscriptions_keep_as_much_as_the_new_size_allows(name: str, case) -> None:  # noqa: ANN001
    counts, _, previous, after = case
    subs, result = rebalance(name, counts, previous, after)
    if name == "cooperative-sticky":
        result = settle(name, counts, after, subs, result)
    sizes = [len(v) for v in result.values()]
    assert max(sizes) - min(sizes) <= 1
    for m, tps in previous.items():
        kept = set(tps) & set(result[m])
        assert len(kept) == min(len(tps), len(result[m])), f"{m} lost a partition it had room to keep"


@pytest.mark.parametrize("name", STICKY)
@given(group=groups())
def test_unchanged_group_keeps_its_assignment(name: str, group: tuple[Counts, Topics]) -> None:
    counts, topics_of = group
    first = fresh(name, counts, topics_of)
    _, again = rebalance(name, counts, first, topics_of)
    assert {m: set(v) for m, v in again.items()} == {m: set(v) for m, v in first.items()}


# --- arbitrary (even conflicting or stale) claims -------------------------------------------------------


@st.composite
def claims(draw: st.DrawFn) -> tuple[Counts, Topics, dict[str, tuple[list[TopicPartition], int]]]:
    counts, topics_of = draw(groups())
    universe = [TopicPartition(t, p) for t, n in counts.items() for p in range(n + 1)] + [
        TopicPartition("gone", 0)
    ]
    owned = {
        m: (draw(st.lists(st.sampled_from(universe), max_size=6)), draw(st.integers(-1, 3)))
        for m in topics_of
    }
    return counts, topics_of, owned


@pytest.mark.parametrize("name", STICKY)
@given(case=claims())
def test_conflicting_claims_still_give_a_valid_assignment(name: str, case) -> None:  # noqa: ANN001
    counts, topics_of, owned = case
    subs = {m: subscription(name, topics_of[m], *owned[m]) for m in topics_of}
    result = get_assignor(name).assign(counts, subs)
    if name == "sticky":
        check_valid(counts, topics_of, result)
        return
    check_cooperative_round(subs, result)
    check_valid(counts, topics_of, result, complete=False)
    check_valid(counts, topics_of, settle(name, counts, topics_of, subs, result))
