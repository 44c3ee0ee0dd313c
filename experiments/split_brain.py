"""Scheme one's split brain, reproduced: a member deciding from a ZooKeeper follower cut off from
its quorum while the rest of the group rebalances through the leader (S1 conflicts, S2 decision
disagreement, S3 unowned partition-seconds), and `sync_before_read` preventing it.

    out = split_brain(ensemble, Path("logs/split"), sync=False)
    out["s2"]["double_claimed"]        # ["t-2", "t-3"]: two members decided to own them

The member `a` is made to be mid-rebalance when the partition starts: a ghost session (a killed
member's owner znode that is still live) makes its first claim fail, so it is backing off and
retrying through the follower while `b` and `c` join through the leader.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from core.types import TopicPartition
from core.zk import connect
from testing.ensemble import ZkEnsemble
from topics.registry import create_topic
from zk_rebalance.events import read_events
from zk_rebalance.member import ZkGroupMember
from zk_rebalance.metrics import OwnershipSampler, conflicts, disagreement, unowned_partition_seconds


def until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def split_brain(ensemble: ZkEnsemble, logdir: Path, sync: bool) -> dict:
    """a reads through a follower that is cut off from its peers (stale for ~syncLimit x tickTime =
    5 s) in the middle of its rebalance, while b and c join through the leader."""
    chroot = f"/t-split-{uuid.uuid4().hex[:8]}"
    leader, follower = ensemble.leader(), ensemble.followers()[0]
    admin = connect(leader.connect_string + chroot)
    create_topic(admin, "t", 4)
    ghost = connect(leader.connect_string + chroot)  # a hard-killed member's owner node, still live
    ghost.create("/consumers/g/owners/t/3", b"g_ghost-0", ephemeral=True, makepath=True)
    logs = Path(logdir)
    logs.mkdir(parents=True, exist_ok=True)
    sampler = OwnershipSampler(
        leader.connect_string + chroot, "g", {"t": 4}, str(logs / "owners.jsonl")
    ).start()
    a = ZkGroupMember(
        follower.connect_string + chroot,
        "g",
        ["t"],
        consumer_id="a",
        session_timeout_ms=30000,
        rebalance_backoff_ms=3000,
        rebalance_max_retries=10,
        auto_commit=False,
        sync_before_read=sync,
        event_log=str(logs / "a.jsonl"),
    )
    others = [
        ZkGroupMember(
            leader.connect_string + chroot,
            "g",
            ["t"],
            consumer_id=c,
            rebalance_backoff_ms=200,
            auto_commit=False,
            sync_before_read=sync,
            event_log=str(logs / f"{c}.jsonl"),
        )
        for c in ("b", "c")
    ]
    out: dict = {}
    try:
        a.start()
        until(lambda: a.events.counters["attempt_end"] >= 1, 15, "a's first attempt to fail on the ghost")
        out["t_partition"] = time.monotonic()
        ensemble.partition(follower)
        ghost.stop()
        ghost.close()
        for m in others:
            m.start()
        until(
            lambda: (
                [sorted(m.assignment()) for m in others]
                == [[TopicPartition("t", 2)], [TopicPartition("t", 3)]]
            ),
            15,
            "b and c balanced with a in view",
        )
        time.sleep(max(0.0, out["t_partition"] + 6.5 - time.monotonic()))  # past the stale window
        out["t_heal"] = time.monotonic()
        ensemble.heal(follower)
        until(
            lambda: (
                all(m.is_stable() for m in [a, *others])
                and sorted(a.assignment()) == [TopicPartition("t", 0), TopicPartition("t", 1)]
            ),
            60,
            "the group converged",
        )
        time.sleep(0.3)
    finally:
        sampler.stop()
        for m in [a, *others]:
            m.close()
        admin.stop()
        admin.close()
    events = read_events(logs.glob("*.jsonl"))
    window = dict(since=out["t_partition"], until=out["t_heal"] + 30)
    # a's conflicts after its first attempt (b and c starting together may race each other, as usual)
    out["conflicts"] = [
        e for e in events if e["ev"] == "conflict" and e["member"] == "g_a" and e["t"] >= out["t_partition"]
    ]
    out["s1"] = conflicts(events, **window)
    out["s2"] = disagreement(events, since=out["t_partition"], until=out["t_heal"])
    out["a_views"] = [e["consumers"] for e in events if e["ev"] == "decision" and e["member"] == "g_a"]
    out["s3"] = unowned_partition_seconds(events, out["t_partition"], out["t_heal"])
    return out
