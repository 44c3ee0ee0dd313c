"""Shared by the `groups`/`offsets` CLI tests: run the CLI as a process, build real groups."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from core.types import TopicPartition as TP
from pipeline.consumer import Consumer
from tests import cli_fork
from topics.log import Log
from topics.registry import create_topic

REPO = Path(__file__).resolve().parent.parent


def run(*args: str, zk: str | None = None, data: Path | None = None, home: Path | None = None, timeout=120):
    """`python -m cli ARGS [--zk ZK] [--data DATA]` as a process of its own (forked from this test
    process's CLI server: tests/cli_fork.py), its output as text."""
    argv = list(args)
    if zk is not None:
        argv += ["--zk", zk]
    if data is not None:
        argv += ["--data", str(data)]
    env = dict(os.environ)
    env.pop("GROUPSHIFT_ZK", None)
    if home is not None:
        env["GROUPSHIFT_HOME"] = str(home)
    return cli_fork.shared().run(argv, env, timeout=timeout, cwd=REPO, text=True)


def ok(*args, **kw) -> str:
    r = run(*args, **kw)
    assert r.returncode == 0, f"{args} exited {r.returncode}: {r.stderr}"
    return r.stdout


def as_json(*args, **kw):
    return json.loads(ok(*args, "--output", "json", **kw))


def make_topic(zk, log: Log, name: str, partitions: int, per_partition: int) -> None:
    create_topic(zk, name, partitions=partitions)
    log.create(name, partitions)
    for p in range(partitions):
        if per_partition:
            log.produce(name, [(b"k", b"v")] * per_partition, partition=p)


def legacy_consumer(group: str, topics, zk_connect: str, log: Log) -> Consumer:
    """A scheme-one (0.8) consumer that commits only when told, from the earliest offset."""
    return Consumer(
        group,
        topics,
        rebalancer="zk",
        zk=zk_connect,
        log=log,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        membership_options={"rebalance_backoff_ms": 100},
    )


def coordinator_consumer(
    group: str, topics, zk_connect: str, log: Log, bootstrap: str, rebalancer: str = "coordinator", **kw
) -> Consumer:
    return Consumer(
        group,
        topics,
        rebalancer=rebalancer,
        zk=zk_connect,
        log=log,
        bootstrap=bootstrap,
        session_timeout_ms=1500,
        heartbeat_interval_ms=100,
        max_poll_interval_ms=10_000,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        membership_options={"retry_backoff_ms": 50},
        **kw,
    )


def consume(c: Consumer, want: int, timeout: float = 30.0) -> int:
    """Poll and commit until `want` records were delivered."""
    got = 0
    deadline = time.monotonic() + timeout
    while got < want:
        assert time.monotonic() < deadline, f"consumed {got} of {want} records"
        batch = c.poll(timeout_ms=100)
        got += sum(len(v) for v in batch.values())
        if batch:
            c.commit()
    return got


def wait_for(cond, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def tps(topic: str, n: int) -> list[TP]:
    return [TP(topic, p) for p in range(n)]
