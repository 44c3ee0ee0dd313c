"""Assignors: Kafka's exact results (assignors.md worked examples, Kafka's tests), bad input, plug-ins."""

from __future__ import annotations

import doctest
import importlib
import importlib.metadata
import sys

import pytest

from coordinator.assignors import (
    Subscription,
    UnknownAssignor,
    available_assignors,
    get_assignor,
    member_order,
)
from core.errors import GroupshiftError
from tests.assignor_helpers import sub, text, tps

STICKY = ["sticky", "cooperative-sticky"]
MODULES = [
    "base",
    "range",
    "roundrobin",
    "random",
    "payloads",
    "sticky",
    "sticky_general",
    "cooperative_sticky",
]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(f"coordinator.assignors.{module}"))
    assert result.failed == 0 and result.attempted > 0


# --- member order (docs/assignors.md) ------------------------------------------------------------------


def test_member_order_static_members_first_by_instance_id() -> None:
    subs = {
        "a": Subscription([]),
        "b": Subscription([], group_instance_id="y"),
        "c": Subscription([], group_instance_id="x"),
    }
    assert member_order(subs) == ["c", "b", "a"]


def test_member_order_is_java_string_order() -> None:
    # U+FF5E sorts after U+1F600 in code points but before it in UTF-16 code units (surrogates D83D..).
    subs = {"\U0001f600": Subscription([]), "\uff5e": Subscription([])}
    assert member_order(subs) == ["\U0001f600", "\uff5e"]


# --- range --------------------------------------------------------------------------------------


def test_range_javadoc_example() -> None:
    subs = {"C0": sub("t0 t1"), "C1": sub("t0 t1")}
    assert text(get_assignor("range").assign({"t0": 3, "t1": 3}, subs)) == {
        "C0": "t0-0 t0-1 t1-0 t1-1",
        "C1": "t0-2 t1-2",
    }


def test_range_seed_even_split() -> None:
    subs = {"C0": sub("t0 t1"), "C1": sub("t0 t1")}
    assert text(get_assignor("range").assign({"t0": 4, "t1": 4}, subs)) == {
        "C0": "t0-0 t0-1 t1-0 t1-1",
        "C1": "t0-2 t0-3 t1-2 t1-3",
    }


def test_range_more_members_than_partitions_last_get_nothing() -> None:
    subs = {f"C{i}": sub("t0") for i in range(8)}
    result = get_assignor("range").assign({"t0": 7}, subs)
    assert [len(result[f"C{i}"]) for i in range(8)] == [1] * 7 + [0]


def test_range_two_static_consumers_ordered_by_instance_id() -> None:
    subs = {
        "consumer-b": sub("topic1 topic2", group_instance_id="instance1"),
        "consumer-a": sub("topic1 topic2", group_instance_id="instance2"),
    }
    assert text(get_assignor("range").assign({"topic1": 3, "topic2": 3}, subs)) == {
        "consumer-b": "topic1-0 topic1-1 topic2-0 topic2-1",
        "consumer-a": "topic1-2 topic2-2",
    }


def test_range_mixed_subscriptions_only_subscribers_count() -> None:
    subs = {"consumer1": sub("topic1"), "consumer2": sub("topic1 topic2"), "consumer3": sub("topic1")}
    assert text(get_assignor("range").assign({"topic1": 3, "topic2": 2}, subs)) == {
        "consumer1": "topic1-0",
        "consumer2": "topic1-1 topic2-0 topic2-1",
        "consumer3": "topic1-2",
    }


@pytest.mark.parametrize("name", ["range", "roundrobin", *STICKY, "random"])
def test_only_subscribed_topics_with_partitions_are_assigned(name: str) -> None:
    subs = {"consumer": sub("topic"), "idle": sub("")}
    result = get_assignor(name).assign({"topic": 3, "other": 3, "empty": 0}, subs)
    assert sorted(result["consumer"]) == tps("topic-0 topic-1 topic-2")
    assert result["idle"] == []


@pytest.mark.parametrize("name", ["range", "roundrobin", *STICKY, "random"])
def test_no_topics_and_nonexistent_topic(name: str) -> None:
    assert get_assignor(name).assign({}, {"consumer": sub("")}) == {"consumer": []}
    assert get_assignor(name).assign({"topic": 0}, {"consumer": sub("topic")}) == {"consumer": []}
    assert get_assignor(name).assign({"topic": 3}, {}) == {}


# --- roundrobin ---------------------------------------------------------------------------------


def test_roundrobin_seed_identical_subscriptions() -> None:
    subs = {"C0": sub("t0 t1"), "C1": sub("t0 t1")}
    assert text(get_assignor("roundrobin").assign({"t0": 3, "t1": 3}, subs)) == {
        "C0": "t0-0 t0-2 t1-1",
        "C1": "t0-1 t1-0 t1-2",
    }


def test_roundrobin_javadoc_unbalanced_example_and_member_leaving() -> None:
    counts = {"t0": 1, "t1": 2, "t2": 3}
    subs = {"C0": sub("t0"), "C1": sub("t0 t1"), "C2": sub("t0 t1 t2")}
    assert text(get_assignor("roundrobin").assign(counts, subs)) == {
        "C0": "t0-0",
        "C1": "t1-0",
        "C2": "t1-1 t2-0 t2-1 t2-2",
    }
    del subs["C0"]
    assert text(get_assignor("roundrobin").assign(counts, subs)) == {
        "C1": "t0-0 t1-1",
        "C2": "t1-0 t2-0 t2-1 t2-2",
    }


def test_roundrobin_seed_four_topics_then_c1_leaves() -> None:
    counts = dict.fromkeys(["t0", "t1", "t2", "t3"], 2)
    subs = {c: sub("t0 t1 t2 t3") for c in ("C0", "C1", "C2")}
    assert text(get_assignor("roundrobin").assign(counts, subs)) == {
        "C0": "t0-0 t1-1 t3-0",
        "C1": "t0-1 t2-0 t3-1",
        "C2": "t1-0 t2-1",
    }
    del subs["C1"]
    assert text(get_assignor("roundrobin").assign(counts, subs)) == {
        "C0": "t0-0 t1-0 t2-0 t3-0",
        "C2": "t0-1 t1-1 t2-1 t3-1",
    }


def test_roundrobin_two_static_consumers() -> None:
    subs = {
        "consumer-b": sub("topic1 topic2", group_instance_id="instance1"),
        "consumer-a": sub("topic1 topic2", group_instance_id="instance2"),
    }
    assert text(get_assignor("roundrobin").assign({"topic1": 3, "topic2": 3}, subs)) == {
        "consumer-b": "topic1-0 topic1-2 topic2-1",
        "consumer-a": "topic1-1 topic2-0 topic2-2",
    }


def test_roundrobin_mixed_subscriptions() -> None:
    subs = {"consumer1": sub("topic1"), "consumer2": sub("topic1 topic2"), "consumer3": sub("topic1")}
    assert text(get_assignor("roundrobin").assign({"topic1": 3, "topic2": 2}, subs)) == {
        "consumer1": "topic1-0",
        "consumer2": "topic1-1 topic2-0 topic2-1",
        "consumer3": "topic1-2",
    }


# --- bad input ------------------------------------------------------------------------------------------


def test_unknown_assignor_lists_available_names() -> None:
    with pytest.raises(UnknownAssignor) as e:
        get_assignor("fair-share")
    message = str(e.value)
    for name in ("range", "roundrobin", "sticky", "cooperative-sticky", "random"):
        assert name in message
    assert isinstance(e.value, GroupshiftError)
    assert "groupshift.assignors" in message


def test_available_assignors() -> None:
    assert {"range", "roundrobin", "sticky", "cooperative-sticky", "random"} <= set(available_assignors())


@pytest.mark.parametrize("name", ["range", "roundrobin", *STICKY, "random"])
def test_negative_partition_count_is_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="'t0'.*negative"):
        get_assignor(name).assign({"t0": -1}, {"a": sub("t0")})
    with pytest.raises(ValueError, match="must be an int"):
        get_assignor(name).assign({"t0": "3"}, {"a": sub("t0")})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"topics": "t0"}, "list of topic names"),
        ({"topics": [1]}, "non-empty strings"),
        ({"topics": ["t0"], "owned_partitions": [("t0", -1)]}, "int >= 0"),
        ({"topics": ["t0"], "owned_partitions": [("t0", "1")]}, "int >= 0"),
        ({"topics": ["t0"], "owned_partitions": ["t0-1"]}, r"\(topic, partition\) pair"),
        ({"topics": ["t0"], "owned_partitions": [(None, 1)]}, "topic must be a non-empty string"),
        ({"topics": ["t0"], "generation": -2}, "generation"),
        ({"topics": ["t0"], "group_instance_id": 5}, "group_instance_id"),
        ({"topics": ["t0"], "user_data": "text"}, "user_data"),
    ],
)
def test_malformed_subscription_is_rejected(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Subscription(**kwargs)


def test_subscriptions_must_be_subscription_objects() -> None:
    with pytest.raises(ValueError, match="member 'a'"):
        get_assignor("range").assign({"t0": 1}, {"a": ["t0"]})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="member ids"):
        get_assignor("range").assign({"t0": 1}, {1: sub("t0")})  # type: ignore[dict-item]


@pytest.mark.parametrize("name", STICKY)
def test_owned_partitions_of_unknown_topics_and_out_of_range_are_ignored(name: str) -> None:
    subs = {"a": sub("t0", "gone-0 t0-9 t0-1", 1), "b": sub("t0", "", 1)}
    result = get_assignor(name).assign({"t0": 2}, subs)
    assert text(result) == {"a": "t0-1", "b": "t0-0"}


def test_duplicate_topics_in_a_subscription_count_once() -> None:
    assert Subscription(["t0", "t1", "t0"]).topics == ("t0", "t1")


# --- plug-ins --------------------------------------------------------------------------------------------


def _install_plugin(tmp_path, monkeypatch: pytest.MonkeyPatch, target: str, name: str = "lucky") -> None:
    """A real distribution on sys.path whose entry point names `target` (as pip would install it)."""
    module = tmp_path / "lucky_assignor.py"
    module.write_text(
        "from coordinator.assignors.random import RandomAssignor\n\n"
        "class LuckyAssignor(RandomAssignor):\n    name = 'lucky'\n\n"
        "def not_an_assignor():\n    return 42\n"
    )
    dist = tmp_path / "lucky_assignor-1.0.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lucky-assignor\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[groupshift.assignors]\n{name} = {target}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lucky_assignor", raising=False)


def test_plugin_assignor_is_loaded_from_entry_point(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "lucky" not in available_assignors()
    _install_plugin(tmp_path, monkeypatch, "lucky_assignor:LuckyAssignor")
    assert "lucky" in available_assignors()
    assignor = get_assignor("lucky")
    result = assignor.assign({"t0": 3}, {"a": sub("t0")})
    assert sorted(result["a"]) == tps("t0-0 t0-1 t0-2")
    with pytest.raises(UnknownAssignor, match="lucky"):
        get_assignor("unlucky")


def test_plugin_that_is_not_an_assignor_is_reported(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_plugin(tmp_path, monkeypatch, "lucky_assignor:missing_name")
    with pytest.raises(GroupshiftError, match="lucky.*could not be loaded"):
        get_assignor("lucky")
    _install_plugin(tmp_path, monkeypatch, "lucky_assignor:not_an_assignor")
    with pytest.raises(GroupshiftError, match="not an Assignor"):
        get_assignor("lucky")
