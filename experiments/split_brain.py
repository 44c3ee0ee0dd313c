"""Scheme one's split brain, reproduced: a member deciding from a ZooKeeper follower cut off from
its quorum while the rest of the group rebalances through the leader (S1 conflicts, S2 decision
disagreement, S3 unowned partition-seconds), and `sync_before_read` preventing it.

    out = split_brain(ensemble, Path("logs/split"), sync=False)
    out["s2"]["double_claimed"]        # ["t-2", "t-3"]: two members decided to own them
    both = split_brains(ensemble, {"faithful": (Path("f"), False), "synced": (Path("s"), True)})

The member `a` is made to be mid-rebalance when the partition starts: a ghost session (a killed
member's owner znode that is still live) makes its first claim fail, so it is backing off and
retrying through the follower while `b` and `c` join through the leader. `split_brains` runs
several such groups (each in its own chroot, with or without `sync_before_read`) through one
partition of the follower: each sees what it would see alone, in the time of one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
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
    return split_brains(ensemble, {"run": (logdir, sync)})["run"]


def split_brains(ensemble: ZkEnsemble, runs: Mapping[str, tuple[Path, bool]]) -> dict[str, dict]:
    """`split_brain` for each run (name: its log directory, and whether its members sync before
    reading), all through one partition of the same follower."""
    leader, follower = ensemble.leader(), ensemble.followers()[0]
    groups: dict[str, _Group] = {}
    out: dict = {}
    try:
        for name, (logdir, sync) in runs.items():
            groups[name] = _Group(leader.connect_string, follower.connect_string, Path(logdir), sync)
        for g in groups.values():
            g.a.start()
        until(
            lambda: all(g.a.events.counters["attempt_end"] >= 1 for g in groups.values()),
            15,
            "a's first attempt to fail on the ghost",
        )
        out["t_partition"] = time.monotonic()
        ensemble.partition(follower)
        for g in groups.values():
            g.join_others()
        until(lambda: all(g.balanced() for g in groups.values()), 15, "b and c balanced with a in view")
        time.sleep(max(0.0, out["t_partition"] + 6.5 - time.monotonic()))  # past the stale window
        out["t_heal"] = time.monotonic()
        ensemble.heal(follower)
        until(lambda: all(g.converged() for g in groups.values()), 60, "the group converged")
        time.sleep(0.3)
    finally:
        for g in groups.values():
            g.close()
    return {name: g.figures(out["t_partition"], out["t_heal"]) for name, g in groups.items()}


class _Group:
    """One split brain's group in a chroot of its own: a (through the follower), b and c (through
    the leader), a ghost owner of t-3 and a sampler of the owner znodes."""

    def __init__(self, leader: str, follower: str, logs: Path, sync: bool):
        chroot = f"/t-split-{uuid.uuid4().hex[:8]}"
        self.logs = logs
        self.admin = connect(leader + chroot)
        self._closers = [self.admin]
        create_topic(self.admin, "t", 4)
        self.ghost = connect(leader + chroot)  # a hard-killed member's owner node, still live
        self._closers.append(self.ghost)
        self.ghost.create("/consumers/g/owners/t/3", b"g_ghost-0", ephemeral=True, makepath=True)
        logs.mkdir(parents=True, exist_ok=True)
        self.sampler = OwnershipSampler(leader + chroot, "g", {"t": 4}, str(logs / "owners.jsonl")).start()
        self.a = ZkGroupMember(
            follower + chroot,
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
        self.others = [
            ZkGroupMember(
                leader + chroot,
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

    def join_others(self) -> None:
        """The ghost's session ends and b and c join through the leader."""
        self.ghost.stop()
        self.ghost.close()
        self._closers.remove(self.ghost)
        for m in self.others:
            m.start()

    def balanced(self) -> bool:
        return [sorted(m.assignment()) for m in self.others] == [
            [TopicPartition("t", 2)],
            [TopicPartition("t", 3)],
        ]

    def converged(self) -> bool:
        return all(m.is_stable() for m in [self.a, *self.others]) and sorted(self.a.assignment()) == [
            TopicPartition("t", 0),
            TopicPartition("t", 1),
        ]

    def close(self) -> None:
        self.sampler.stop()
        for m in [self.a, *self.others]:
            m.close()
        for zk in self._closers:
            zk.stop()
            zk.close()

    def figures(self, t_partition: float, t_heal: float) -> dict:
        out: dict = {"t_partition": t_partition, "t_heal": t_heal}
        events = read_events(self.logs.glob("*.jsonl"))
        window = dict(since=t_partition, until=t_heal + 30)
        # a's conflicts after its first attempt (b and c starting together may race each other, as usual)
        out["conflicts"] = [
            e for e in events if e["ev"] == "conflict" and e["member"] == "g_a" and e["t"] >= t_partition
        ]
        out["s1"] = conflicts(events, **window)
        out["s2"] = disagreement(events, since=t_partition, until=t_heal)
        out["a_views"] = [e["consumers"] for e in events if e["ev"] == "decision" and e["member"] == "g_a"]
        out["s3"] = unowned_partition_seconds(events, t_partition, t_heal)
        return out
