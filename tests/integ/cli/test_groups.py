"""`groupshift groups list|describe|watch|delete` against real groups on real ZooKeeper.

Scheme one: a Kafka 0.8.2 tree (tests/fixtures/kafka08_tree.py) and real `ZkGroupMember`s.
Scheme three: a real coordinator node process with real `pipeline.Consumer`s (and a raw wire
client to hold a group mid-rebalance).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from coordinator.member.wire_client import WireClient, join_body, sync_body
from coordinator.node.process import CoordinatorNodes
from coordinator.wire import codec as P
from tests.fixtures.kafka08_tree import BLACK_ID, STATIC, STATIC_ID, WILD_IDS, write_tree
from tests.inspect_helpers import (
    REPO,
    as_json,
    consume,
    coordinator_consumer,
    make_topic,
    ok,
    run,
    wait_for,
)
from tests.snapshots import zk_tree
from topics.log import Log
from zk_rebalance import ZkGroupMember


@pytest.fixture
def log(tmp_path):
    return Log(tmp_path / "data")


@pytest.fixture
def kafka08(zk, log):
    """The 0.8.2 tree, with logs for its topics (clicks: 10 records per partition, views: 8)."""
    write_tree(zk)
    for name, n, per in (("clicks", 2, 10), ("views", 3, 8)):
        log.create(name, n)
        for p in range(n):
            log.produce(name, [(b"k", b"v")] * per, partition=p)
    return log


def test_kafka08_tree_is_listed_as_written(kafka08, zk_connect):
    rows = as_json("groups", "list", zk=zk_connect)
    got = {(r["group"], r["state"], r["members"], r["protocol"], r["partitions_with_offsets"]) for r in rows}
    assert got == {
        ("black-grp", "Stable", 1, "black_list", 1),
        ("leftover", "Dead", 0, None, 0),  # a bare /consumers/<g> is a group (0.10 --list), never committed
        ("offsets-only", "Empty", 0, None, 2),  # KAFKA-7141: groups with only offsets are listed
        (STATIC, "Stable", 1, "static", 3),
        ("wild-grp", "Rebalancing", 2, "white_list", 1),
    }
    only = as_json("groups", "list", "--state", "rebalancing", zk=zk_connect)
    assert [r["group"] for r in only] == ["wild-grp"]


def test_kafka08_describe_offsets_lag_owners(kafka08, zk_connect):
    [out] = as_json("groups", "describe", STATIC, zk=zk_connect, data=kafka08.root)
    rows = {(p["topic"], p["partition"]): p for p in out["partitions"]}
    assert {k: (r["committed"], r["log_end"], r["lag"], r["owner"]) for k, r in rows.items()} == {
        ("clicks", 0): (5, 10, 5, STATIC_ID),
        ("clicks", 1): (3, 10, 7, STATIC_ID),
        ("views", 0): (7, 8, 1, STATIC_ID),
        ("views", 1): (None, 8, None, STATIC_ID),  # owned, nothing committed
        ("views", 2): (None, 8, None, STATIC_ID),
    }
    assert out["summary"]["total_lag"] == 13 and out["summary"]["state"] == "Stable"
    [member] = out["members"]
    assert member["member_id"] == STATIC_ID and member["host"] == "host1"
    assert member["subscription"] == "clicks:2,views:1"
    assert member["assignment"] == "clicks(0,1), views(0,1,2)"


def test_kafka08_wildcards_and_mid_rebalance(kafka08, zk_connect):
    [wild] = as_json("groups", "describe", "wild-grp", zk=zk_connect, data=kafka08.root)
    assert wild["summary"]["state"] == "Rebalancing"
    assert sorted(m["member_id"] for m in wild["members"]) == sorted(WILD_IDS)
    assert {m["subscription"] for m in wild["members"]} == {"clicks|views:3 (white_list)"}
    # every partition the white list matches is shown, owned or not (KAFKA-3144); __consumer_offsets is not
    assert {(p["topic"], p["partition"], p["owner"]) for p in wild["partitions"]} == {
        ("clicks", 0, WILD_IDS[0]),
        ("clicks", 1, None),
        ("views", 0, None),
        ("views", 1, None),
        ("views", 2, WILD_IDS[1]),
    }
    r = run("groups", "describe", "wild-grp", zk=zk_connect, data=kafka08.root)
    assert r.returncode == 0 and "is rebalancing" in r.stderr
    [black] = as_json("groups", "describe", "black-grp", zk=zk_connect)
    assert {p["topic"] for p in black["partitions"]} == {"clicks"}  # black_list views
    assert black["members"][0]["member_id"] == BLACK_ID and black["summary"]["state"] == "Stable"


def test_read_only_commands_write_nothing(kafka08, zk_server, zk_connect):
    before = zk_tree(zk_connect)
    for args in (["groups", "list"], ["groups", "describe", STATIC], ["offsets", "export", "offsets-only"]):
        ok(*args, zk=zk_connect)
    assert zk_tree(zk_connect) == before


def test_nothing_to_show_imports_no_coordinator_node_nor_log(zk, zk_connect, tmp_path):
    """`groups list` of an empty namespace and `groups describe` of a group that does not exist
    read a few znodes, and import neither the coordinator node's store (asyncio), nor scheme one's
    member, nor the log (pyarrow): what each process imports, from `-X importtime`."""
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1", GROUPSHIFT_DATA=str(tmp_path / "data"))
    for args, code in ((["groups", "list"], 0), (["groups", "describe", "no-such-group"], 1)):
        done = subprocess.run(
            [sys.executable, "-m", "cli", *args, "--zk", zk_connect],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == code, done.stderr[-2000:]
        imported = {line.rpartition("|")[2].strip() for line in done.stderr.splitlines() if "|" in line}
        assert "migrate.groups" in imported
        heavy = {"asyncio", "coordinator.node", "zk_rebalance.member", "pyarrow"} & imported
        assert not heavy, (args, heavy)


def test_real_scheme_one_group(zk, zk_connect, log):
    make_topic(zk, log, "orders", 4, 5)
    members = [
        ZkGroupMember(zk_connect, "legacy", {"orders": 1}, rebalance_backoff_ms=200, auto_commit=False)
        for _ in range(2)
    ]
    try:
        for m in members:
            m.start()
        wait_for(
            lambda: (
                all(m.wait_for_stable(0.1) for m in members)
                and sum(len(m.assignment()) for m in members) == 4
            ),
            what="a stable scheme-one group",
        )
        for m in members:
            m.commit({tp: 3 for tp in m.assignment()}, m.generation)
        [out] = as_json("groups", "describe", "legacy", zk=zk_connect, data=log.root)
        assert out["summary"]["state"] == "Stable" and out["summary"]["members"] == 2
        owners = {(p["topic"], p["partition"]): p["owner"] for p in out["partitions"]}
        assert owners == {(tp.topic, tp.partition): m.consumer_id for m in members for tp in m.assignment()}
        assert {p["lag"] for p in out["partitions"]} == {2}
        # destructive commands refuse a live group and change nothing
        before = zk_tree(zk_connect)
        r = run("groups", "delete", "legacy", zk=zk_connect)
        assert r.returncode == 1 and "live consumer" in r.stderr and len(r.stderr.splitlines()) == 1
        r = run("offsets", "reset", "legacy", "--all-topics", "--to-earliest", zk=zk_connect, data=log.root)
        assert r.returncode == 1 and "live consumer" in r.stderr
        assert zk_tree(zk_connect) == before
    finally:
        for m in members:
            m.close()
    [out] = as_json("groups", "describe", "legacy", zk=zk_connect, data=log.root)
    assert out["summary"]["state"] == "Empty" and {p["committed"] for p in out["partitions"]} == {3}
    assert "deleted group legacy" in ok("groups", "delete", "legacy", zk=zk_connect)
    assert run("groups", "describe", "legacy", zk=zk_connect).returncode == 1


@pytest.fixture
def nodes(zk_connect):
    with CoordinatorNodes(zk_connect, count=1) as n:
        yield n


def test_real_coordinator_group(zk, zk_connect, log, nodes):
    make_topic(zk, log, "events", 3, 6)
    c1 = coordinator_consumer("modern", ["events"], zk_connect, log, nodes.bootstrap, client_id="c-one")
    c2 = None
    try:
        consume(c1, 18)
        c2 = coordinator_consumer("modern", ["events"], zk_connect, log, nodes.bootstrap, client_id="c-two")
        wait_for(
            lambda: (
                (c1.poll(timeout_ms=20) or True)
                and c2.poll(timeout_ms=20) is not None
                and len(c1.assignment()) + len(c2.assignment()) == 3
                and c2.assignment()
            ),
            what="two members",
        )
        log.produce("events", [(b"k", b"v")] * 4, partition=0)
        rows = as_json("groups", "list", "--scheme", "coordinator", zk=zk_connect)
        assert [(r["group"], r["scheme"], r["state"], r["members"], r["protocol"]) for r in rows] == [
            ("modern", "coordinator", "Stable", 2, "range")
        ]
        [out] = as_json("groups", "describe", "modern", zk=zk_connect, data=log.root)
        s = out["summary"]
        assert (s["scheme"], s["state"], s["protocol_type"], s["members"]) == (
            "coordinator",
            "Stable",
            "consumer",
            2,
        )
        assert s["generation"] >= 2 and s["coordinator"].startswith("node 1 ")
        assert {m["client_id"] for m in out["members"]} == {"c-one", "c-two"}
        owners = {(p["topic"], p["partition"]): p["client_id"] for p in out["partitions"]}
        assert sorted(owners.values()).count("c-two") == len(c2.assignment())
        part0 = next(p for p in out["partitions"] if p["partition"] == 0)
        assert (part0["committed"], part0["log_end"], part0["lag"]) == (6, 10, 4)
        r = run("groups", "delete", "modern", zk=zk_connect)
        assert r.returncode == 1 and "Stable" in r.stderr
    finally:
        c1.close()
        if c2:
            c2.close()
    wait_for(
        lambda: (
            as_json("groups", "describe", "modern", "--state", zk=zk_connect)[0]["summary"]["state"]
            == "Empty"
        ),
        what="the group to turn Empty",
    )
    assert "through coordinator node 1" in ok("groups", "delete", "modern", zk=zk_connect)
    assert zk.exists("/groupshift/groups/modern") is None


def test_scheme_two_group_is_listed_and_described_in_the_drafts_states(zk, zk_connect, log, nodes):
    make_topic(zk, log, "events", 3, 6)
    c = coordinator_consumer("drafted", ["events"], zk_connect, log, nodes.bootstrap, rebalancer="server")
    try:
        consume(c, 18)
        rows = as_json("groups", "list", "--state", "steady", zk=zk_connect)
        assert [(r["group"], r["scheme"], r["state"], r["members"], r["protocol"]) for r in rows] == [
            ("drafted", "coordinator", "Steady", 1, "range")
        ]
        [out] = as_json("groups", "describe", "drafted", zk=zk_connect, data=log.root)
        s = out["summary"]
        assert (s["state"], s["protocol_type"], s["members"]) == ("Steady", "consumer-server", 1)
        assert any("scheme two" in n for n in out["notes"]), out["notes"]
        assert {p["committed"] for p in out["partitions"]} == {6}
    finally:
        c.close()
    wait_for(
        lambda: (
            as_json("groups", "describe", "drafted", "--state", zk=zk_connect)[0]["summary"]["state"]
            == "Ready"
        ),
        what="the group to turn Ready (the draft's Empty)",
    )


def test_incremental_scheme_two_group_is_described(zk, zk_connect, log, nodes):
    make_topic(zk, log, "events", 3, 6)
    c = coordinator_consumer(
        "converging", ["events"], zk_connect, log, nodes.bootstrap, rebalancer="server", incremental=True
    )
    try:
        consume(c, 18)
        [out] = as_json("groups", "describe", "converging", zk=zk_connect, data=log.root)
        s = out["summary"]
        assert (s["state"], s["protocol_type"], s["protocol"], s["members"]) == (
            "Stable",
            "consumer-incremental",
            "uniform",
            1,
        )
        assert any("incremental" in n for n in out["notes"]), out["notes"]
        assert {p["committed"] for p in out["partitions"]} == {6}
        rows = as_json("groups", "list", "--state", "stable", zk=zk_connect)
        assert [(r["group"], r["members"]) for r in rows] == [("converging", 1)]
    finally:
        c.close()


def test_coordinator_group_mid_rebalance(zk, zk_connect, log, nodes):
    make_topic(zk, log, "t", 2, 0)
    node = nodes.nodes[1]
    a = WireClient(node.host, node.port, "a")
    b = WireClient(node.host, node.port, "b")
    try:
        mid = a.request(P.JOIN_GROUP, join_body("g", rebalance_timeout_ms=60_000))["member_id"]
        joined = a.request(P.JOIN_GROUP, join_body("g", member_id=mid, rebalance_timeout_ms=60_000))
        a.request(
            P.SYNC_GROUP, sync_body("g", joined["generation_id"], mid, {mid: b""}, protocol_name="range")
        )
        bid = b.request(P.JOIN_GROUP, join_body("g"))["member_id"]
        b.send(P.JOIN_GROUP, join_body("g", member_id=bid))  # parked until a rejoins: PreparingRebalance
        wait_for(
            lambda: (
                as_json("groups", "describe", "g", "--state", zk=zk_connect)[0]["summary"]["state"]
                == "PreparingRebalance"
            ),
            what="PreparingRebalance",
        )
        r = run("groups", "describe", "g", zk=zk_connect)
        assert "is rebalancing (PreparingRebalance)" in r.stderr
    finally:
        a.close()
        b.close()


def test_watch_stores_samples_outside_the_group_and_describe_shows_status(kafka08, zk_connect, tmp_path):
    samples = tmp_path / "w.json"
    before = zk_tree(zk_connect)
    out = ok(
        "groups",
        "watch",
        STATIC,
        "--interval",
        "0.1",
        "--count",
        "2",
        "--samples",
        str(samples),
        zk=zk_connect,
        data=kafka08.root,
    )
    assert out.count("sample ") == 2 and samples.exists()
    assert zk_tree(zk_connect) == before
    [d] = as_json("groups", "describe", STATIC, "--samples", str(samples), zk=zk_connect, data=kafka08.root)
    statuses = {(p["topic"], p["partition"]): p["status"] for p in d["partitions"]}
    # the fixture's offsets were written moments ago and never again, lag > 0: stopped, as Burrow says
    assert statuses[("clicks", 0)] == "STOP" and statuses[("views", 1)] is None
    assert d["summary"]["status"] == "ERR"
