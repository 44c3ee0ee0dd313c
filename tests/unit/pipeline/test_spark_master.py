"""Spark master URLs (`pipeline.spark.session`): which are accepted, and the one-line refusal of the
others, given before any connection is tried (no network here)."""

from __future__ import annotations

import pytest

from core.errors import GroupshiftError
from pipeline.spark.session import check_master, parse_master


@pytest.mark.parametrize(
    "url, expected",
    [
        ("local", None),
        ("local[1]", None),
        ("local[16]", None),
        ("local[*]", None),
        ("spark://127.0.0.1:7077", ("127.0.0.1", 7077)),
        ("spark://spark-master.example:1", ("spark-master.example", 1)),
        ("spark://[::1]:65535", ("::1", 65535)),
    ],
)
def test_a_local_master_or_one_standalone_master_is_accepted(url, expected):
    assert parse_master(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "",
        "yarn",
        "k8s://https://h:6443",
        "mesos://h:5050",
        "local[0]",
        "local[-1]",
        "local[2,3]",
        "local[]",
        "Local[2]",
        "spark://",
        "spark://127.0.0.1",
        "spark://127.0.0.1:",
        "spark://127.0.0.1:0",
        "spark://127.0.0.1:65536",
        "spark://127.0.0.1:7077/",
        "spark://a:1,b:2",  # several masters (ZooKeeper recovery): not supported
        "spark://user@h:7077",
        " spark://h:7077",
        "spark://h:7077\n",
        None,
    ],
)
def test_anything_else_is_refused_in_one_line_before_any_connection(url):
    with pytest.raises(GroupshiftError) as refused:
        check_master(url)
    message = str(refused.value)
    assert message.startswith("not a Spark master URL: ")
    assert message.endswith("(use local, local[N], local[*] or spark://HOST:PORT)")
    assert "\n" not in message


def test_a_local_master_needs_no_check():
    for url in ("local", "local[2]", "local[*]"):
        assert check_master(url) is None
