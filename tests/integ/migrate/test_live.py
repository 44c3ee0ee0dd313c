"""A live migration (the bridge) on real ZooKeeper, a real coordinator node and real consumer processes.

Three legacy (scheme one) consumer processes consume while records are produced; `migrate run
--mode live` bridges the group; each legacy consumer is then replaced by a coordinator consumer
process, one at a time; `migrate run` again finishes the migration and the coordinator consumers
leave bridge mode. Every process logs what `poll()` returned; every member logs each commit to the
legacy offsets with its ZooKeeper order (mzxid) and the partition's owner epoch. From those logs:
per partition, the commits in ZooKeeper order never move backwards, each epoch belongs to one
member (never two owners), and the records between two consecutive commits were all polled by the
member that made the second — so every record is committed exactly once, and none is skipped.

The processes, the producer and the checks are `live_harness.py`'s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from core.types import TopicPartition as TP
from tests.integ.migrate.live_harness import (
    PARTITIONS,
    REPO,
    SESSION_MS,
    Proc,
    Producer,
    check_run,
    cli,
    end_run,
    finish,
    legacy_world,
    start_legacy,
    wait_for,
)


def test_three_legacy_consumers_replaced_one_by_one_by_coordinator_consumers(zk, zk_connect, node, tmp_path):
    from migrate.migration import bridge

    log, spec, producer = legacy_world(zk, zk_connect, tmp_path)
    procs: list[Proc] = []
    try:
        legacy = start_legacy(tmp_path, spec, producer, procs)
        plan = cli(
            "migrate",
            "plan",
            "billing",
            "--from",
            "zk",
            "--to",
            "coordinator",
            "--mode",
            "live",
            "--zk",
            zk_connect,
            "-o",
            "json",
        )
        assert plan.returncode == 0, plan.stderr
        assert len(json.loads(plan.stdout)["members"]) == 3
        started = cli(
            "migrate",
            "run",
            "billing",
            "--from",
            "zk",
            "--to",
            "coordinator",
            "--mode",
            "live",
            "--zk",
            zk_connect,
            "-o",
            "json",
        )
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout)["state"] == "bridged"
        assert "3 legacy consumer(s) remain" in started.stderr

        coordinators = []
        for i, old in enumerate(legacy):
            new = Proc(
                tmp_path,
                f"coordinator-{i}",
                {**spec, "rebalancer": "coordinator", "bootstrap": node.bootstrap},
            )
            procs.append(new)
            coordinators.append(new)
            wait_for(lambda new=new: new.polled_partitions(), 60, f"{new.name} to consume through the bridge")
            old.stop()
        _, bridged = bridge.registered(zk, "billing")
        legacy_left, _ = bridge.registered(zk, "billing")
        assert legacy_left == [] and len(bridged) == 3

        want = finish(zk, zk_connect, "coordinator", log, producer, coordinators)
    finally:
        end_run(producer, procs)
    check_run(zk, zk_connect, procs, coordinators, want)


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
@pytest.mark.parametrize("seed", range(5))
def test_union_assignment_is_what_every_legacy_member_computes_for_it(strategy, seed):
    import random

    from migrate.migration.bridge import union_assignment
    from zk_rebalance.assignors import View, group_decision, partition_assignor, thread_sort_key
    from zk_rebalance.layout import TopicCount

    rng = random.Random(seed)
    partitions = {"t1": rng.randint(1, 12), "t2": rng.randint(1, 7)}
    topics = dict.fromkeys(partitions, 1) if strategy == "roundrobin" else None
    regs = {}
    for i in range(rng.randint(2, 7)):
        cid = f"g_host-{rng.randint(1, 10**12)}-{i:x}"
        regs[cid] = TopicCount.static(topics or {t: 1 for t in partitions if rng.random() < 0.8} or {"t1": 1})
    bridged = {f"member-{i}": cid for i, cid in enumerate(sorted(regs)) if i % 2 == 0}
    got = union_assignment(strategy, regs, partitions, bridged)
    # What a legacy member computes for the whole group from the same registrations (0.8's view).
    per_topic: dict = {}
    for cid in sorted(regs):
        for topic, tids in regs[cid].thread_ids(cid).items():
            per_topic.setdefault(topic, []).extend(tids)
    for member, cid in bridged.items():
        view = View(
            cid,
            regs[cid].thread_ids(cid),
            {t: list(range(partitions[t])) for t in per_topic},
            {t: sorted(v, key=thread_sort_key) for t, v in per_topic.items()},
            sorted(regs),
        )
        whole = group_decision(partition_assignor(strategy), view)
        assert got[member] == sorted(tp for tp, tid in whole.items() if tid.consumer == cid)
    # Together with the legacy members' shares, every partition has exactly one owner.
    assert len({tp for tps in got.values() for tp in tps}) == sum(len(v) for v in got.values())


# -- the engine: killed at any step, bad input, rollback --------------------------------------------


def migrate_cli(zk_connect: str, *args: str, exit_at=None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPSHIFT_")}
    if exit_at is not None:
        env["GROUPSHIFT_MIGRATE_EXIT_AT"] = str(exit_at)
    cmd = [sys.executable, "-m", "cli", "migrate", *args, "--zk", zk_connect]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


LIVE = ["--from", "zk", "--to", "coordinator", "--mode", "live"]


def legacy_group(zk, group: str) -> dict:
    from migrate.schemes import zk_store as legacy

    want = {TP("a", p): 100 + p for p in range(3)} | {TP("b", 0): 7}
    legacy.write_offsets(zk, group, want, batch=100)
    return want


def test_a_live_run_killed_at_every_named_checkpoint_resumes_or_rolls_back(zk, zk_connect, node):
    """No consumer runs: the engine carries the offsets over itself; a kill at every named checkpoint
    (tests/kill_sweep.py), then `run` again ends done with the legacy offsets, `rollback` ends with
    no coordinator offsets."""
    from migrate.migration import live
    from migrate.migration import offline as O
    from tests.kill_sweep import every_named

    legacy_group(zk, "count")
    O.passed.clear()
    assert live.run(zk, "count").state == "done"
    points = every_named(list(O.passed))
    assert {"before:bridged", "bridged", "before:copy", "switched", "done"} <= set(points.values()), points
    want, killed = {}, {}
    for k in points:
        for kind in ("resume", "undo"):
            group = f"{kind}-{k}"
            want[group] = legacy_group(zk, group)
            killed[group] = migrate_cli(zk_connect, "run", group, *LIVE, exit_at=k)
    for group, proc in killed.items():
        assert proc.wait(120) == O.EXIT_CODE, (group, proc.communicate())
    again = {
        g: migrate_cli(
            zk_connect,
            "run" if g.startswith("resume") else "rollback",
            g,
            *(LIVE if g.startswith("resume") else ()),
        )
        for g in killed
    }
    for group, proc in again.items():
        code, err = proc.wait(120), proc.communicate()[1]
        rec, _ = O.read_record(zk, group)
        assert O.offsets(zk, "zk", group) == want[group], group
        if group.startswith("resume"):
            assert code == 0 and rec.state == "done", (group, code, err)
            assert O.offsets(zk, "coordinator", group) == want[group], group
        elif rec is None:
            assert code == 1 and "nothing to roll back" in err, (group, err)
        elif rec.state == "done":
            assert code == 1 and "is done" in err, (group, err)
        else:
            assert code == 0 and rec.state == "rolled_back", (group, code, err)
            assert O.offsets(zk, "coordinator", group) == {}, group


def test_live_bad_input_and_a_rollback_while_legacy_consumers_run(zk, zk_connect, node, tmp_path):
    from coordinator.layout import migration_path
    from migrate.migration import bridge
    from migrate.migration import offline as O
    from migrate.schemes import zk_store as legacy
    from pipeline.consumer import Consumer
    from topics.log import Log
    from topics.registry import create_topic

    log = Log(tmp_path)
    create_topic(zk, "t", partitions=4)
    log.create("t", 4)
    for p in range(4):
        log.produce("t", [(b"k", b"v")] * 20, partition=p)
    common = dict(
        zk=zk_connect,
        log=log,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=200,
    )
    legacy_c = Consumer(
        "g",
        ["t"],
        rebalancer="zk",
        membership_options={"fence_commits": True, "rebalance_backoff_ms": 150, "rebalance_max_retries": 50},
        **common,
    )
    plain = Consumer("g", ["t"], rebalancer="coordinator", bootstrap=node.bootstrap, **common)
    consumers = [legacy_c, plain]
    try:
        wait_for(lambda: legacy_c.poll(50) is not None and legacy_c.assignment(), 30, "the legacy consumer")
        legacy_c.commit()
        wait_for(
            lambda: plain.poll(50) is not None and plain.assignment(), 30, "the plain coordinator consumer"
        )
        record_before = zk.exists(migration_path("g"))
        # A coordinator consumer that is not bridged: refused, nothing written.
        r = subprocess.run(
            [sys.executable, "-m", "cli", "migrate", "run", "g", *LIVE, "--zk", zk_connect],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 1 and "not bridged" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
        assert zk.exists(migration_path("g")) == record_before is None
        plain.close()
        consumers.remove(plain)
        # Bridge it; a coordinator consumer joins through the bridge beside the legacy one.
        r = subprocess.run(
            [sys.executable, "-m", "cli", "migrate", "run", "g", *LIVE, "--zk", zk_connect],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0 and "1 legacy consumer(s) remain" in r.stderr, r.stderr
        bridged = Consumer("g", ["t"], rebalancer="coordinator", bootstrap=node.bootstrap, **common)
        consumers.append(bridged)
        assert isinstance(bridged.membership, bridge.BridgedMember)

        def both_consume() -> bool:
            for c in (legacy_c, bridged):
                if c.poll(20):
                    c.commit()
            return bool(legacy_c.assignment()) and bool(bridged.assignment())

        wait_for(both_consume, 30, "the legacy and the bridged consumer to share the group")
        assert not legacy_c.assignment() & bridged.assignment()
        view = legacy.read_group(zk, "g")  # what `groups describe g --scheme zk` shows
        kinds = {m.member_id: m.client_id for m in view.members}
        assert kinds == {
            legacy_c.membership.consumer_id: None,
            bridged.membership.consumer_id: legacy.BRIDGED_CLIENT,
        }, kinds
        assert any("bridged by a live migration" in n for n in view.notes), view.notes
        # Rolling back while the bridged member runs: refused, naming it; the record unchanged.
        data_before = zk.get(migration_path("g"))[0]
        r = subprocess.run(
            [sys.executable, "-m", "cli", "migrate", "rollback", "g", "--zk", zk_connect],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 1 and "coordinator member(s) of the live migration" in r.stderr, r.stderr
        assert zk.get(migration_path("g"))[0] == data_before
        for _ in range(3):
            both_consume()
        bridged.close()
        consumers.remove(bridged)
        r = subprocess.run(
            [sys.executable, "-m", "cli", "migrate", "rollback", "g", "--zk", zk_connect],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert O.read_record(zk, "g")[0].state == "rolled_back"
        assert O.offsets(zk, "coordinator", "g") == {}
        # The legacy consumer takes the whole group back and reads everything from the legacy offsets.
        ends = {TP("t", p): log.latest(TP("t", p)) for p in range(4)}

        def legacy_done() -> bool:
            if legacy_c.poll(50):
                legacy_c.commit()
            return O.offsets(zk, "zk", "g") == ends

        wait_for(legacy_done, 30, "the legacy consumer to read to the end")
    finally:
        for c in consumers:
            c.close()


def test_bridged_consumers_survive_a_killed_coordinator_node_and_an_expired_zookeeper_session(
    zk, zk_connect, zk_server, tmp_path
):
    """While bridged: the node leading the group is killed (the group fails over to the other node)
    and one bridged consumer's ZooKeeper session expires (its owner znodes and registration vanish;
    it reports its partitions lost and registers again). Records go on being produced; in the end
    every record was delivered and committed exactly once, and the migration finishes."""
    from kazoo.client import KazooClient

    from coordinator.node.process import CoordinatorNodes
    from migrate.migration import live
    from migrate.schemes import coordinator_store as coordinated
    from pipeline.consumer import Consumer
    from tests.integ.pipeline.test_consumer import Worker, assert_exactly_once
    from topics.log import Log
    from topics.registry import create_topic

    log = Log(tmp_path)
    create_topic(zk, "t", partitions=PARTITIONS)
    log.create("t", PARTITIONS)
    for p in range(PARTITIONS):
        log.produce("t", [(b"k", b"v")] * 50, partition=p)
    producer = Producer(log, "t")
    delivered: list = []
    workers: list[Worker] = []
    with CoordinatorNodes(zk_connect, count=2) as nodes:
        common = dict(
            zk=zk_connect,
            log=log,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=200,
            max_poll_records=50,
        )
        legacy_options = {"fence_commits": True, "rebalance_backoff_ms": 150, "rebalance_max_retries": 50}
        try:
            legacy_w = Worker(
                Consumer("g", ["t"], rebalancer="zk", membership_options=legacy_options, **common),
                delivered,
                "legacy",
            )
            workers.append(legacy_w)
            legacy_w.start()
            producer.start()
            wait_for(lambda: len(delivered) > 100, 30, "the legacy consumer to consume")
            assert live.run(zk, "g").state == "bridged"
            bridged = []
            for i in range(2):
                c = Consumer(
                    "g",
                    ["t"],
                    rebalancer="coordinator",
                    bootstrap=nodes.bootstrap,
                    membership_options={"bridge_event_log": str(tmp_path / f"bridged-{i}.jsonl")},
                    **common,
                )
                bridged.append(c)
                w = Worker(c, delivered, f"bridged-{i}")
                workers.append(w)
                w.start()

            def progress(after: int) -> bool:
                return len(delivered) > after and all(c.assignment() for c in bridged)

            n = len(delivered)
            wait_for(lambda: progress(n), 60, "both bridged consumers to consume beside the legacy one")

            _, lead = coordinated.leader(zk, "g")
            nodes.kill(lead.node)
            n = len(delivered)
            wait_for(lambda: progress(n + 200), 60, "consumption after the coordinator node was killed")

            victim = bridged[0].zk
            hosts = ",".join(f"{h}:{p}" for h, p in victim.hosts)
            thief = KazooClient(hosts=hosts, client_id=victim.client_id)
            thief.start(timeout=10)
            thief.stop()  # closing the stolen session expires it for its owner
            thief.close()
            n = len(delivered)
            wait_for(lambda: progress(n + 200), 60, "consumption after a bridged consumer's session expired")
            wait_for(
                lambda: (
                    sorted(zk.get_children("/groupshift/bridge/g"))
                    == sorted(c.membership.consumer_id for c in bridged)
                ),
                30,
                "the expired consumer to register again",
            )

            legacy_w.stop()
            assert live.run(zk, "g", wait_s=30).state == "done"
            producer.stop_event.set()
            producer.join(5)
            ends = {TP("t", p): log.latest(TP("t", p)) for p in range(PARTITIONS)}
            wait_for(
                lambda: {tp for tp, _, _ in delivered} and _delivered_up_to(delivered) == ends,
                60,
                "everything to be consumed",
            )
        finally:
            producer.stop_event.set()
            for w in workers:
                if w.is_alive():
                    w.stop()
    assert_exactly_once(delivered, ends)
    events = [json.loads(line)["ev"] for line in (tmp_path / "bridged-0.jsonl").read_text().splitlines()]
    assert events.count("registered") == 2, "the expired consumer did not register again"


def _delivered_up_to(delivered) -> dict:
    top: dict = {}
    for tp, off, _ in list(delivered):
        top[tp] = max(top.get(tp, 0), off + 1)
    return top
