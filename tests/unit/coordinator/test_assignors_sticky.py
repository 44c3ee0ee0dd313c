"""Sticky and cooperative-sticky: Kafka's exact results (Kafka's sticky tests and the StickyAssignor
javadoc)."""

from __future__ import annotations

import random

import pytest

from coordinator.assignors import (
    CooperativeStickyAssignor,
    StickyAssignor,
    Subscription,
    get_assignor,
)
from coordinator.assignors.payloads import encode_cooperative_user_data, encode_sticky_user_data
from core.types import TopicPartition
from tests.assignor_helpers import sub, text, tps

STICKY = ["sticky", "cooperative-sticky"]


def settle(
    assignor, counts: dict[str, int], subs: dict[str, Subscription]
) -> dict[str, list[TopicPartition]]:
    """Assign; for the cooperative assignor, rebalance again while partitions are being revoked (as
    Kafka's `CooperativeStickyAssignorTest.verifyValidityAndBalance`), at most four more times."""
    assignment = assignor.assign(counts, subs)
    for _ in range(4):
        if not any(set(s.owned_partitions) - set(assignment[m]) for m, s in subs.items()):
            return assignment
        subs = {m: sub(list(s.topics), assignment[m], 1) for m, s in subs.items()}
        assignment = assignor.assign(counts, subs)
    assert not any(set(s.owned_partitions) - set(assignment[m]) for m, s in subs.items())
    return assignment


def sorted_text(assignment: dict[str, list[TopicPartition]]) -> dict[str, str]:
    """Kafka's `toSortedString` comparison: each member's partitions as sorted strings."""
    return {m: ", ".join(sorted(map(str, v))) for m, v in assignment.items()}


# --- sticky core, constrained builder ---------------------------------------------------------


@pytest.mark.parametrize("name", STICKY)
def test_sticky_fresh_exact_lists(name: str) -> None:
    a = get_assignor(name)
    assert text(a.assign({"topic1": 1, "topic2": 2}, {"consumer": sub("topic1 topic2")})) == {
        "consumer": "topic1-0 topic2-0 topic2-1"
    }
    assert text(a.assign({"topic": 2}, {"consumer1": sub("topic"), "consumer2": sub("topic")})) == {
        "consumer1": "topic-0",
        "consumer2": "topic-1",
    }
    two = {"consumer1": sub("topic1 topic2"), "consumer2": sub("topic1 topic2")}
    assert text(a.assign({"topic1": 3, "topic2": 3}, two)) == {
        "consumer1": "topic1-0 topic1-2 topic2-1",
        "consumer2": "topic1-1 topic2-0 topic2-2",
    }


@pytest.mark.parametrize("name", STICKY)
def test_sticky_owned_partitions_of_unsubscribed_topics_are_dropped(name: str) -> None:
    subs = {"consumer": sub("topic", "topic-0 topic-1 other-0 other-1", generation=1)}
    result = get_assignor(name).sticky_assign({"topic": 2}, subs)
    assert text(result.assignment) == {"consumer": "topic-0 topic-1"}
    assert result.transferring == {}


@pytest.mark.parametrize("name", STICKY)
def test_consumer_owning_min_quota_expected_max_quota(name: str) -> None:
    subs = {
        "consumer1": sub("topic1 topic2", "topic1-0 topic2-1", 1),
        "consumer2": sub("topic1 topic2", "topic1-1 topic2-2", 1),
    }
    result = get_assignor(name).sticky_assign({"topic1": 2, "topic2": 3}, subs)
    # Kafka's example: kept partitions first, in (partition, topic) order, then new ones.
    assert text(result.assignment) == {
        "consumer1": "topic1-0 topic2-1 topic2-0",
        "consumer2": "topic1-1 topic2-2",
    }
    assert result.transferring == {}


@pytest.mark.parametrize("name", STICKY)
def test_max_quota_consumers_more_than_expected_follow_java_hashmap_order(name: str) -> None:
    subs = {
        "consumer1": sub("topic1 topic2", "topic1-0 topic2-0", 1),
        "consumer2": sub("topic1 topic2", "topic1-1 topic2-1", 1),
        "consumer3": sub("topic1 topic2", "", 1),
    }
    result = get_assignor(name).sticky_assign({"topic1": 2, "topic2": 2}, subs)
    # Kafka's exact result (its HashMap walks consumer3, consumer2, consumer1).
    assert text(result.assignment) == {
        "consumer1": "topic1-0",
        "consumer2": "topic1-1 topic2-1",
        "consumer3": "topic2-0",
    }
    assert result.transferring == {TopicPartition("topic2", 0): "consumer3"}


@pytest.mark.parametrize("name", STICKY)
def test_all_consumers_under_min_quota(name: str) -> None:
    subs = {
        "consumer1": sub("topic1 topic2", "topic1-0", 1),
        "consumer2": sub("topic1 topic2", "topic1-1", 1),
        "consumer3": sub("topic1 topic2", "", 1),
    }
    result = get_assignor(name).sticky_assign({"topic1": 2, "topic2": 3}, subs)
    assert text(result.assignment) == {
        "consumer1": "topic1-0 topic2-1",
        "consumer2": "topic1-1 topic2-2",
        "consumer3": "topic2-0",
    }
    assert result.transferring == {}


def test_add_remove_consumer_one_topic_eager_and_cooperative() -> None:
    counts = {"topic": 3}
    first = StickyAssignor().assign(counts, {"consumer1": sub("topic")})
    assert text(first) == {"consumer1": "topic-0 topic-1 topic-2"}
    subs = {"consumer1": sub("topic", first["consumer1"], 1), "consumer2": sub("topic", "", 1)}
    eager = StickyAssignor().sticky_assign(counts, subs)
    assert eager.transferring == {TopicPartition("topic", 2): "consumer2"}
    assert text(eager.assignment) == {"consumer1": "topic-0 topic-1", "consumer2": "topic-2"}
    # The cooperative assignor withholds topic-2 until consumer1 has revoked it.
    round1 = CooperativeStickyAssignor().assign(counts, subs)
    assert text(round1) == {"consumer1": "topic-0 topic-1", "consumer2": ""}
    round2 = CooperativeStickyAssignor().assign(
        counts, {"consumer1": sub("topic", round1["consumer1"], 2), "consumer2": sub("topic", "", 2)}
    )
    assert text(round2) == {"consumer1": "topic-0 topic-1", "consumer2": "topic-2"}
    for name in STICKY:
        alone = get_assignor(name).sticky_assign(
            counts, {"consumer2": sub("topic", eager.assignment["consumer2"], 1)}
        )
        assert sorted(alone.assignment["consumer2"]) == tps("topic-0 topic-1 topic-2")
        assert alone.transferring == {}


@pytest.mark.parametrize("name", STICKY)
def test_add_remove_two_consumers_two_topics(name: str) -> None:
    a = get_assignor(name)
    counts = {"topic1": 3, "topic2": 4}
    both = "topic1 topic2"
    first = a.sticky_assign(counts, {"consumer1": sub(both), "consumer2": sub(both)})
    assert text(first.assignment) == {
        "consumer1": "topic1-0 topic1-2 topic2-1 topic2-3",
        "consumer2": "topic1-1 topic2-0 topic2-2",
    }
    subs = {
        "consumer1": sub(both, first.assignment["consumer1"], 1),
        "consumer2": sub(both, first.assignment["consumer2"], 1),
        "consumer3": sub(both, "", 1),
        "consumer4": sub(both, "", 1),
    }
    second = a.sticky_assign(counts, subs)
    assert second.transferring == {
        TopicPartition("topic1", 2): "consumer3",
        TopicPartition("topic2", 3): "consumer3",
        TopicPartition("topic2", 2): "consumer4",
    }
    assert text(second.assignment) == {
        "consumer1": "topic1-0 topic2-1",
        "consumer2": "topic2-0 topic1-1",
        "consumer3": "topic1-2 topic2-3",
        "consumer4": "topic2-2",
    }
    subs = {
        "consumer3": sub(both, second.assignment["consumer3"], 1),
        "consumer4": sub(both, second.assignment["consumer4"], 1),
    }
    third = a.sticky_assign(counts, subs)
    assert text(third.assignment) == {
        "consumer3": "topic1-2 topic2-3 topic1-0 topic2-1",
        "consumer4": "topic2-2 topic1-1 topic2-0",
    }
    assert third.transferring == {}


@pytest.mark.parametrize("name", STICKY)
def test_topic_balance_after_reassignment(name: str) -> None:
    counts = {"topic1": 12, "topic2": 12}
    both = "topic1 topic2"
    members = ["consumer1"]
    assignment = get_assignor(name).assign(counts, {"consumer1": sub(both)})
    for joined, per_topic in ((["consumer2"], 6), (["consumer3", "consumer4"], 3)):
        subs = {m: sub(both, assignment[m], 1) for m in members} | {m: sub(both, "", 1) for m in joined}
        members += joined
        assignment = settle(get_assignor(name), counts, subs)
        for m in members:
            assert sum(tp.topic == "topic1" for tp in assignment[m]) == per_topic
            assert sum(tp.topic == "topic2" for tp in assignment[m]) == per_topic


@pytest.mark.parametrize("name", STICKY)
def test_all_consumers_reach_expected_quota(name: str) -> None:
    subs = {
        "consumer1": sub("topic", "topic-0 topic-1", 1),
        "consumer2": sub("topic", "topic-2", 1),
        "consumer3": sub("topic", "", 1),
    }
    result = get_assignor(name).sticky_assign({"topic": 4}, subs)
    assert text(result.assignment) == {
        "consumer1": "topic-0 topic-1",
        "consumer2": "topic-2",
        "consumer3": "topic-3",
    }
    assert result.transferring == {}


@pytest.mark.parametrize("name", STICKY)
@pytest.mark.parametrize("stale_generation", [9, -1])
def test_owned_partitions_of_stale_generation_are_invalidated(name: str, stale_generation: int) -> None:
    owned = "topic-0 topic-2 topic2-1"
    subs = {
        "consumer1": sub("topic topic2", owned, 10),
        "consumer2": sub("topic topic2", owned, stale_generation),
    }
    result = get_assignor(name).sticky_assign({"topic": 3, "topic2": 3}, subs)
    assert sorted(result.assignment["consumer1"]) == sorted(tps(owned))
    assert sorted(result.assignment["consumer2"]) == sorted(tps("topic-1 topic2-0 topic2-2"))
    assert result.transferring == {}


@pytest.mark.parametrize("name", STICKY)
def test_partition_claimed_twice_in_same_generation_goes_to_nobody_first(name: str) -> None:
    subs = {
        "consumer1": sub("topic", "topic-0 topic-1", 1),
        "consumer2": sub("topic", "topic-0 topic-2", 1),
        "consumer3": sub("topic", "", 1),
    }
    target = get_assignor(name).sticky_assign({"topic": 3}, subs)
    assert target.transferring == {TopicPartition("topic", 0): "consumer3"}
    assert text(target.assignment) == {"consumer1": "topic-1", "consumer2": "topic-2", "consumer3": "topic-0"}
    if name == "cooperative-sticky":
        assert text(get_assignor(name).assign({"topic": 3}, subs)) == {
            "consumer1": "topic-1",
            "consumer2": "topic-2",
            "consumer3": "",
        }
        subs4 = dict(subs)
        assert text(get_assignor(name).assign({"topic": 4}, subs4)) == {
            "consumer1": "topic-1 topic-3",
            "consumer2": "topic-2",
            "consumer3": "",
        }


@pytest.mark.parametrize("name", STICKY)
def test_partitions_go_to_highest_generation(name: str) -> None:
    all3 = "topic topic2 topic3"
    subs = {
        "consumer1": sub(all3, "topic-0 topic2-0 topic3-0", 10),
        "consumer2": sub(all3, "topic-1 topic2-1 topic3-1", 9),
        "consumer3": sub(all3, "topic2-1 topic3-0 topic3-2", 8),
    }
    result = get_assignor(name).sticky_assign({"topic": 3, "topic2": 3, "topic3": 3}, subs)
    assert sorted(result.assignment["consumer1"]) == sorted(tps("topic-0 topic2-0 topic3-0"))
    assert sorted(result.assignment["consumer2"]) == sorted(tps("topic-1 topic2-1 topic3-1"))
    assert sorted(result.assignment["consumer3"]) == sorted(tps("topic-2 topic2-2 topic3-2"))
    assert result.transferring == {}


@pytest.mark.parametrize("name", STICKY)
def test_no_reassignment_on_current_members(name: str) -> None:
    all4 = "topic topic2 topic3 topic1"
    subs = {
        "consumer1": sub(all4, "", -1),
        "consumer2": sub(all4, "topic-0 topic2-0 topic1-0", 9),
        "consumer3": sub(all4, "topic3-2 topic2-2 topic1-1", 8),
        "consumer4": sub(all4, "topic3-1 topic-1 topic-2", 7),
    }
    result = get_assignor(name).sticky_assign(dict.fromkeys(all4.split(), 3), subs)
    assert sorted(result.assignment["consumer1"]) == sorted(tps("topic1-2 topic2-1 topic3-0"))
    assert result.transferring == {}


@pytest.mark.parametrize("name", STICKY)
def test_owned_partitions_invalidated_for_consumer_with_multiple_generations(name: str) -> None:
    subs = {
        "consumer1": sub("topic topic2", "topic-0 topic2-1 topic-1", 10),
        "consumer2": sub("topic topic2", "topic-0 topic2-1 topic2-2", 8),
    }
    result = get_assignor(name).sticky_assign({"topic": 3, "topic2": 3}, subs)
    assert sorted(result.assignment["consumer1"]) == sorted(tps("topic-0 topic2-1 topic-1"))
    assert sorted(result.assignment["consumer2"]) == sorted(tps("topic-2 topic2-2 topic2-0"))


# Kafka's `testRackAwareAssignmentWithUniformSubscription`, non-rack cases: consumer0..2, all topics.
UNIFORM = ["t1-0, t1-3, t2-0, t2-3, t2-6", "t1-1, t1-4, t2-1, t2-4, t3-0", "t1-2, t1-5, t2-2, t2-5, t3-1"]
NON_EQUAL = ["t1-5, t2-0, t2-2, t2-4, t2-6", "t1-3, t2-1, t2-3, t2-5, t3-0", "t1-0, t1-1, t1-2, t1-4, t3-1"]
RACK_COUNTS = {"t1": 6, "t2": 7, "t3": 2}


def rack_test_subs(topics: list[str], owned: list[str] | None) -> dict[str, Subscription]:
    """Like Kafka's `AbstractPartitionAssignorTest.subscriptions`: owned, no generation, no user data."""
    return {
        f"consumer{i}": Subscription(t.split(), owned_partitions=tps(owned[i]) if owned else ())
        for i, t in enumerate(topics)
    }


@pytest.mark.parametrize("name", STICKY)
def test_uniform_subscription_exact(name: str) -> None:
    topics = ["t1 t2 t3"] * 3
    for owned in (None, UNIFORM):
        result = get_assignor(name).assign(RACK_COUNTS, rack_test_subs(topics, owned))
        assert sorted_text(result) == {f"consumer{i}": UNIFORM[i] for i in range(3)}


@pytest.mark.parametrize("name", STICKY)
def test_non_equal_subscription_exact(name: str) -> None:
    topics = ["t1 t2 t3", "t1 t2 t3", "t1 t3"]
    for owned in (None, NON_EQUAL):
        result = get_assignor(name).assign(RACK_COUNTS, rack_test_subs(topics, owned))
        assert sorted_text(result) == {f"consumer{i}": NON_EQUAL[i] for i in range(3)}


def test_non_equal_subscription_with_misplaced_ownership() -> None:
    topics = ["t1 t2 t3", "t1 t2 t3", "t1 t3"]
    owned = ["t1-0, t1-1, t1-2, t1-3, t1-4", "t1-5, t2-0, t2-1, t2-2, t2-3", "t2-4, t2-5, t2-6, t3-0, t3-1"]
    # Eager sticky reads ownership from user data only, so this is a fresh assignment for it.
    eager = StickyAssignor().assign(RACK_COUNTS, rack_test_subs(topics, owned))
    assert sorted_text(eager) == {f"consumer{i}": NON_EQUAL[i] for i in range(3)}
    # Cooperative: an intermediate round withholding the moved partitions, then the target.
    intermediate = ["t1-2, t1-3, t1-4", "t2-0, t2-1, t2-2, t2-3", "t3-0, t3-1"]
    final = ["t1-2, t1-3, t1-4, t2-4, t2-5", "t2-0, t2-1, t2-2, t2-3, t2-6", "t1-0, t1-1, t1-5, t3-0, t3-1"]
    coop = CooperativeStickyAssignor()
    first = coop.assign(RACK_COUNTS, rack_test_subs(topics, owned))
    assert sorted_text(first) == {f"consumer{i}": intermediate[i] for i in range(3)}
    second = coop.assign(RACK_COUNTS, rack_test_subs(topics, intermediate))
    assert sorted_text(second) == {f"consumer{i}": final[i] for i in range(3)}


# --- sticky general builder and the StickyAssignor javadoc -------------------------------


@pytest.mark.parametrize("name", STICKY)
def test_multiple_consumers_mixed_topic_subscriptions(name: str) -> None:
    subs = {"consumer1": sub("topic1"), "consumer2": sub("topic1 topic2"), "consumer3": sub("topic1")}
    result = get_assignor(name).sticky_assign({"topic1": 3, "topic2": 2}, subs)
    assert text(result.assignment) == {
        "consumer1": "topic1-0 topic1-2",
        "consumer2": "topic2-0 topic2-1",
        "consumer3": "topic1-1",
    }
    assert result.transferring is None


def test_poor_roundrobin_scenario_sticky_result() -> None:
    counts = {f"topic{i}": i % 2 + 1 for i in range(1, 6)}
    every, odd = "topic1 topic2 topic3 topic4 topic5", "topic1 topic3 topic5"
    subs = {"consumer1": sub(every), "consumer2": sub(odd), "consumer3": sub(odd), "consumer4": sub(every)}
    assert sorted_text(StickyAssignor().assign(counts, subs)) == {
        "consumer1": "topic2-0, topic3-0",
        "consumer2": "topic1-0, topic3-1",
        "consumer3": "topic1-1, topic5-0",
        "consumer4": "topic4-0, topic5-1",
    }


def test_sticky_javadoc_example_2_then_c0_leaves() -> None:
    counts = {"t0": 1, "t1": 2, "t2": 3}
    subs = {"C0": sub("t0"), "C1": sub("t0 t1"), "C2": sub("t0 t1 t2")}
    first = StickyAssignor().assign(counts, subs)
    assert text(first) == {"C0": "t0-0", "C1": "t1-0 t1-1", "C2": "t2-0 t2-1 t2-2"}
    again = {"C1": sub("t0 t1", first["C1"], 1), "C2": sub("t0 t1 t2", first["C2"], 1)}
    assert text(StickyAssignor().assign(counts, again)) == {"C1": "t1-0 t1-1 t0-0", "C2": "t2-0 t2-1 t2-2"}


def test_sticky_javadoc_example_1_c1_leaves_keeps_all_prior_partitions() -> None:
    counts = dict.fromkeys(["t0", "t1", "t2", "t3"], 2)
    every = "t0 t1 t2 t3"
    prior = {"C0": "t0-0 t1-1 t3-0", "C2": "t1-0 t2-1"}
    result = StickyAssignor().assign(counts, {c: sub(every, p, 1) for c, p in prior.items()})
    assert text(result) == {"C0": "t0-0 t3-0 t1-1 t0-1", "C2": "t1-0 t2-1 t2-0 t3-1"}


@pytest.mark.parametrize("name", STICKY)
def test_subscription_not_equal_same_partition_claimed_in_three_generations(name: str) -> None:
    for g1, g2, g3 in [(1, 2, 3), (1, 3, 2), (2, 1, 3), (2, 3, 1), (3, 1, 2), (3, 2, 1)]:
        subs = {
            "consumer1": sub("topic", "topic-0 topic-2", g1),
            "consumer2": sub("topic", "topic-1 topic-2 topic-3", g2),
            "consumer3": sub("topic", "topic-2 topic-4 topic-5", g3),
            "consumer4": sub("topic1", "topic1-0", 2),
        }
        result = get_assignor(name).assign({"topic": 6, "topic1": 1}, subs)
        every = [tp for v in result.values() for tp in v]
        assert len(every) == len(set(every))
        assert all(1 <= len(v) <= 2 for v in result.values())


@pytest.mark.parametrize("name", STICKY)
def test_only_subscribed_topic_deleted(name: str) -> None:
    a = get_assignor(name)
    first = a.assign({"topic": 3}, {"consumer": sub("topic")})
    assert a.assign({}, {"consumer": sub("topic", first["consumer"], 1)}) == {"consumer": []}


# --- member data ----------------------------------------------------------------------------------


def test_eager_sticky_reads_ownership_from_user_data_only() -> None:
    owned = tps("topic1-0 topic2-1")
    s = Subscription(["topic"], owned_partitions=tps("topic-0"), user_data=encode_sticky_user_data(owned, 1))
    assert StickyAssignor().member_data(s) == (owned, 1)
    assert StickyAssignor().member_data(Subscription(["topic"], owned_partitions=owned)) == ([], -1)
    v0 = Subscription(["topic"], user_data=encode_sticky_user_data(owned))
    assert StickyAssignor().member_data(v0) == (owned, -1)
    assert StickyAssignor().member_data(Subscription(["topic"], user_data=b"\xc1garbage")) == ([], -1)


def test_cooperative_generation_from_protocol_else_user_data() -> None:
    owned = tuple(tps("topic-0"))
    coop = CooperativeStickyAssignor()
    assert coop.member_data(Subscription(["topic"], owned_partitions=owned, generation=3)) == (owned, 3)
    old = Subscription(["topic"], owned_partitions=owned, user_data=encode_cooperative_user_data(1))
    assert coop.member_data(old) == (owned, 1)
    assert coop.member_data(Subscription(["topic"])) == ((), -1)
    assert coop.member_data(Subscription(["topic"], user_data=b"\xc1")) == ((), -1)


def test_cooperative_with_old_version_subscriptions() -> None:
    def v1(owned: str) -> Subscription:
        return Subscription(
            ["topic1"], owned_partitions=tps(owned), user_data=encode_cooperative_user_data(1)
        )

    subs = {"consumer1": v1("topic1-0"), "consumer2": v1("topic1-1"), "consumer3": sub("topic1", "", 1)}
    assert text(CooperativeStickyAssignor().assign({"topic1": 3}, subs)) == {
        "consumer1": "topic1-0",
        "consumer2": "topic1-1",
        "consumer3": "topic1-2",
    }


def test_max_generation_is_remembered_by_the_instance() -> None:
    a = StickyAssignor()
    a.assign({"topic": 1}, {"c": sub("topic", "topic-0", 7)})
    a.assign({"topic": 1}, {"c": sub("topic", "topic-0", 2)})
    assert a.max_generation == 7


# --- Kafka's randomized tests, seeded ---------------------------------------------------------------------


def check_balanced(counts: dict[str, int], topics_of: dict[str, list[str]], result) -> None:  # noqa: ANN001
    """Kafka's `verifyValidityAndBalance`: valid, and no partition could move to a member with 2+ fewer."""
    owner = {tp: m for m, v in result.items() for tp in v}
    assert len(owner) == sum(len(v) for v in result.values())
    assert all(tp.topic in topics_of[m] for m, v in result.items() for tp in v)
    sizes = {m: len(v) for m, v in result.items()}
    for m, topics in topics_of.items():
        for t in topics:
            for p in range(counts.get(t, 0)):
                assert sizes[owner[TopicPartition(t, p)]] <= sizes[m] + 1


@pytest.mark.parametrize("name", STICKY)
@pytest.mark.parametrize("seed", range(5))
def test_large_assignment_with_consumers_leaving_and_random_subscription(name: str, seed: int) -> None:
    rnd = random.Random(seed)
    topics = [f"t{i:02d}" for i in range(40)]
    counts = {t: rnd.randrange(10) + 1 for t in topics}
    topics_of = {f"c{i:03d}": [rnd.choice(topics) for _ in range(rnd.randrange(20))] for i in range(200)}
    a = get_assignor(name)
    first = settle(a, counts, {m: sub(ts) for m, ts in topics_of.items()})
    check_balanced(counts, topics_of, first)
    for _ in range(50):
        topics_of.pop(f"c{rnd.randrange(200):03d}", None)
    result = settle(a, counts, {m: sub(ts, first[m], 1) for m, ts in topics_of.items()})
    check_balanced(counts, topics_of, result)
    if name == "sticky":
        assert a.last_movements is not None and a.last_movements.is_sticky()


@pytest.mark.parametrize("name", STICKY)
@pytest.mark.parametrize("seed", range(10))
def test_reassignment_with_random_subscriptions_and_changes(name: str, seed: int) -> None:
    rnd = random.Random(seed)
    topics = [f"t{i:02d}" for i in range(10 + rnd.randrange(10))]
    counts = {t: i + 1 for i, t in enumerate(topics)}

    def random_sublist() -> list[str]:
        chosen = list(topics)
        for _ in range(rnd.randrange(len(topics))):
            chosen.pop(rnd.randrange(len(chosen)))
        return chosen

    members = [f"c{i:02d}" for i in range(20 + rnd.randrange(20))]
    before = {m: random_sublist() for m in members}
    a = get_assignor(name)
    first = settle(a, counts, {m: sub(before[m]) for m in members})
    check_balanced(counts, before, first)
    after = {m: random_sublist() for m in members}
    result = settle(a, counts, {m: sub(after[m], first[m], 1) for m in members})
    check_balanced(counts, after, result)
