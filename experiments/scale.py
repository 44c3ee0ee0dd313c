"""Scale-up scenario: groups grow to N members one by one and all at once, under every scheme.

One real ZooKeeper server, measured from both sides (`experiments.zkstats` on the server, the
members' own counters on the client). Members are in-process (threads), as in `bench/rebalance.py`.

* one by one: how a group grows -- one member joining a stable group of N - 1. Per scheme and N, a
  new group of N - 1 members is formed at once (not measured) and waited until stable, then
  `settle_s`; measured is the single join that brings it to N.
* all at once: per scheme and N, N fresh members of a new group start together; measured is the
  time until they form a stable group covering every partition. Scheme two's all-at-once start
  waits out one session timeout at several N (a suspected defect in
  `coordinator/server_side/assigned.py`: all members sit in preparing-rebalance until `session_ms`,
  then generation 2) -- reported, not fixed.

    with CoordinatorNodes(chroot, count=1, group_initial_rebalance_delay_ms=0) as nodes:
        result = run_scale(chroot, ("127.0.0.1", 2181), nodes.bootstrap, [4, 8, 16], logdir=tmp)

Schemes: "one" (`ZkGroupMember`, Kafka 0.8), "two" (`CoordinatorMember(server_assigned=True)`),
"two-incremental" (`IncrementalMember`), "three-eager" (range) and "three-cooperative"
(cooperative-sticky), the last two reading topic sizes from ZooKeeper.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from coordinator.member.consumer_member import CoordinatorMember
from coordinator.member.incremental_member import IncrementalMember
from coordinator.member.state import MemberState
from core.scheme import Scheme
from core.types import TopicPartition
from core.zk import connect
from experiments.zkstats import delta, server_counts, watches
from topics.registry import create_topic
from zk_rebalance.events import read_events
from zk_rebalance.member import ZkGroupMember
from zk_rebalance.metrics import conflicts

SCHEMES = Scheme.names()
TOPIC_PREFIX = "scale"


@dataclass(frozen=True)
class ScaleSettings:
    """Scheme one's ZooKeeper consumer settings (0.8 defaults but retries), the coordinator members'
    session and heartbeat, the wait for a stable group, and the pause before a measured join."""

    zk_session_ms: int = 6000
    zk_backoff_ms: int = 2000
    zk_retries: int = 10
    session_ms: int = 10_000
    heartbeat_ms: int = 100
    timeout_s: float = 120.0
    settle_s: float = 0.3


class Timeline:
    """A listener recording when each partition was revoked and assigned (monotonic seconds)."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, frozenset[TopicPartition]]] = []

    def on_partitions_revoked(self, tps) -> None:
        self.events.append((time.monotonic(), "revoked", frozenset(tps)))

    on_partitions_lost = on_partitions_revoked

    def on_partitions_assigned(self, tps) -> None:
        self.events.append((time.monotonic(), "assigned", frozenset(tps)))

    def revoked_since(self, since: float) -> bool:
        return any(t >= since and kind == "revoked" and tps for t, kind, tps in list(self.events))

    def kept_pause(self, since: float, kept: set[TopicPartition], until: float) -> float:
        """The longest time one of `kept` was not held in [since, until]."""
        worst, gone = 0.0, {}
        for t, kind, tps in list(self.events):
            if t < since:
                continue
            for tp in tps & kept:
                if kind == "revoked":
                    gone.setdefault(tp, t)
                elif tp in gone:
                    worst = max(worst, t - gone.pop(tp))
        for t0 in gone.values():
            worst = max(worst, until - t0)
        return worst


def wait(cond: Callable[[], bool], timeout: float, step: float = 0.002) -> float | None:
    """Poll `cond` until true; the monotonic time it first held, or None on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return time.monotonic()
        time.sleep(step)
    return None


def _covers(assignments: list[set[TopicPartition]], partitions: int) -> bool:
    return sum(len(a) for a in assignments) == partitions and len(set().union(*assignments)) == partitions


def _close_all(members: list) -> None:
    """Close members in parallel (a scheme-one close triggers a rebalance in every member left)."""
    threads = [threading.Thread(target=m.close, daemon=True) for m in members]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)


class _Run:
    """What every phase of one `run_scale` call shares: clients, topic, settings."""

    def __init__(
        self, zk, zk_connect: str, host_port, bootstrap: str, topic: str, partitions: int, logdir, s
    ):
        self.zk, self.zk_connect, self.host_port, self.bootstrap = zk, zk_connect, host_port, bootstrap
        self.topic, self.partitions, self.logdir, self.s = topic, partitions, Path(logdir), s

    def member(self, scheme: Scheme, group: str, i: int, listener=None):
        s = self.s
        if scheme is Scheme.ONE:
            return ZkGroupMember(
                self.zk_connect,
                group,
                [self.topic],
                session_timeout_ms=s.zk_session_ms,
                rebalance_backoff_ms=s.zk_backoff_ms,
                rebalance_max_retries=s.zk_retries,
                auto_commit=False,
                listener=listener,
                event_log=str(self.logdir / f"{group}-{i}.jsonl"),
            )
        kw: dict = dict(
            bootstrap=self.bootstrap,
            listener=listener,
            session_timeout_ms=s.session_ms,
            heartbeat_interval_ms=s.heartbeat_ms,
            max_poll_interval_ms=600_000,
            rebalance_timeout_ms=60_000,
            retry_backoff_ms=20,
        )
        if scheme is Scheme.TWO:
            return CoordinatorMember(group, [self.topic], server_assigned=True, **kw)
        if scheme is Scheme.TWO_INCREMENTAL:
            return IncrementalMember(group, [self.topic], **kw)
        return CoordinatorMember(group, [self.topic], assignors=list(scheme.assignors), zk=self.zk, **kw)

    def stable(self, scheme: Scheme, members: list) -> bool:
        """Every member settled (no rebalance in progress or pending) and the partitions covered once."""
        if scheme is Scheme.ONE:
            if not all(m.is_stable() for m in members):
                return False
        else:
            gens = set()
            for m in members:
                if m.state != MemberState.STABLE or m.rebalance_in_progress:
                    return False
                if scheme.incremental and m._target != m._owned:
                    return False
                gens.add(m.generation)
            # Incremental members converge one by one: their epochs may differ once all hold their targets.
            if not scheme.incremental and len(gens) != 1:
                return False
        return _covers([m.assignment() for m in members], self.partitions)

    def server(self) -> dict[str, int]:
        return server_counts(*self.host_port)


def _client_counts(scheme: Scheme, m) -> dict[str, int]:
    """One member's cumulative client-side counters."""
    if scheme is Scheme.ONE:
        c = m.events.counters
        return {"zk": c["zk"], "watch": c["watch"], "rounds": c["rebalance_begin"], "gen": m.generation}
    return {"zk": m.stats["zk_requests"], "watch": 0, "rounds": m.stats["rebalances"], "gen": m.generation}


def _one_by_one(run: _Run, scheme: Scheme, sizes: list[int], progress: Callable[[str], None]) -> list[dict]:
    rows: list[dict] = []
    for n in sizes:
        progress(f"scale-up {scheme.value}: one by one N={n} ...")
        row = _join_one(run, scheme, n)
        rows.append(row)
        if "error" in row:
            progress(f"scale-up {scheme.value}: one by one N={n}: {row['error']}")
    return rows


def _join_one(run: _Run, scheme: Scheme, n: int) -> dict:
    """A group of n - 1 members formed (not measured), then the measured join that brings it to n."""
    group = f"{TOPIC_PREFIX}-{scheme.value}-obo-{n}-{uuid.uuid4().hex[:6]}"
    timelines = [Timeline() for _ in range(n)]
    members = [run.member(scheme, group, i, timelines[i]) for i in range(n - 1)]
    timeout = run.s.timeout_s
    try:
        # One member first, then the rest together: a coordinator group started all at once can wait
        # out a session timeout (see the module docstring); a stable one-member group avoids that.
        for batch, group_so_far in ((members[:1], members[:1]), (members[1:], members)):
            for m in batch:
                m.start()
            if batch and wait(lambda g=group_so_far: run.stable(scheme, g), timeout, 0.01) is None:
                return {"n": n, "error": f"group of {n - 1} not stable within {timeout}s"}
        time.sleep(run.s.settle_s)
        if members and wait(lambda: run.stable(scheme, members), timeout, 0.01) is None:
            return {"n": n, "error": f"group of {n - 1} not stable again in {timeout}s"}
        held = [m.assignment() for m in members]
        counts = [_client_counts(scheme, m) for m in members]
        rest = watches(*run.host_port)
        before = run.server()
        prev_gen = max((m.generation for m in members), default=-1)
        t_join = time.monotonic()
        joiner = run.member(scheme, group, n - 1, timelines[-1])
        members.append(joiner)
        joiner.start()
        done = wait(
            lambda: (
                run.stable(scheme, members)
                and bool(joiner.assignment())
                and (scheme is Scheme.ONE or max(m.generation for m in members) > prev_gen)
            ),
            timeout,
        )
        if done is None:
            return {"n": n, "error": f"no stable group within {timeout}s after join {n}"}
        server = delta(run.server(), before)
        old = members[:-1]
        after = [_client_counts(scheme, m) for m in members]
        d = [{key: a[key] - b[key] for key in a} for a, b in zip(after, [*counts, _zero()], strict=True)]
        # "rounds" per member: scheme one's rebalance_begin events; a coordinator member's
        # completed joins (reconciles for the incremental form).
        rebalanced = [x["rounds"] > 0 for x in d]
        if scheme is Scheme.ONE:
            rounds = sum(x["rounds"] for x in d)
        else:  # generation (epoch) increments
            rounds = max(m.generation for m in members) - max(prev_gen, 0)
        fanout = sum(1 for r, tl in zip(rebalanced, timelines, strict=True) if r or tl.revoked_since(t_join))
        # None: the member kept none of its partitions (nothing that could pause).
        kept = [was & m.assignment() for m, was in zip(old, held, strict=True)]
        pauses = [
            round(tl.kept_pause(t_join, k, done) * 1000, 1) if k else None
            for k, tl in zip(kept, timelines[:-1], strict=True)
        ]
        return {
            "n": n,
            "time_to_stable_ms": round((done - t_join) * 1000, 1),
            "zk_requests": server["requests"],
            "watch_notifications": server["watch_notifications"],
            "watches_at_rest": rest["watches"],
            "watching_sessions": rest["watching_sessions"],
            "client_zk_requests": sum(x["zk"] for x in d),
            "client_watch_notifications": sum(x["watch"] for x in d),
            "fanout": fanout,
            "pauses_ms": pauses,
            "max_pause_ms": max((p for p in pauses if p is not None), default=None),
            "rounds": rounds,
        }
    finally:
        _close_all(members)


def _zero() -> dict[str, int]:
    return {"zk": 0, "watch": 0, "rounds": 0, "gen": -1}


def _all_at_once(run: _Run, scheme: Scheme, n: int) -> dict:
    group = f"{TOPIC_PREFIX}-{scheme.value}-all-{n}-{uuid.uuid4().hex[:6]}"
    members = [run.member(scheme, group, i) for i in range(n)]
    timeout = run.s.timeout_s
    try:
        before = run.server()
        t0 = time.monotonic()
        for m in members:
            m.start()
        done = wait(
            lambda: (
                run.stable(scheme, members) and (n > run.partitions or all(m.assignment() for m in members))
            ),
            timeout,
            0.005,
        )
        server = delta(run.server(), before)
        row: dict = {"n": n}
        if done is None:
            row["error"] = f"{n} members did not form a stable group within {timeout}s"
        else:
            row["time_to_stable_ms"] = round((done - t0) * 1000, 1)
        row["zk_requests"] = server["requests"]
        row["watch_notifications"] = server["watch_notifications"]
        if scheme is Scheme.ONE:
            events = read_events(sorted(run.logdir.glob(f"{group}-*.jsonl")))
            c = conflicts(events, since=t0, until=done if done is not None else float("inf"))
            row["conflicts"] = {"conflicts": c["conflicts"], "failed_attempts": c["failed_attempts"]}
        else:
            row["conflicts"] = {"rounds": max(m.generation for m in members)}
        return row
    finally:
        _close_all(members)


def run_scale(
    zk_connect: str,
    host_port: tuple[str, int],
    bootstrap: str,
    sizes: list[int],
    schemes: Sequence[str] = SCHEMES,
    partitions: int | None = None,
    *,
    logdir: Path,
    progress: Callable[[str], None] = lambda s: None,
    settings: ScaleSettings = ScaleSettings(),  # noqa: B008 - frozen, never mutated
) -> dict:
    """Run the scale-up scenario for `schemes` on the ZooKeeper chroot `zk_connect`, whose coordinator
    nodes serve at `bootstrap`; `host_port` is the server's address for `mntr`/`wchc`.

    Returns `{"settings", "partitions", "schemes": {scheme: {"one_by_one": [...], "all_at_once": [...]}}}`.
    """
    unknown = [s for s in schemes if s not in SCHEMES]
    if unknown:
        raise ValueError(f"unknown schemes {unknown}; choose from {', '.join(SCHEMES)}")
    sizes = sorted(set(sizes))
    partitions = partitions or 2 * max(sizes)
    topic = f"{TOPIC_PREFIX}-{uuid.uuid4().hex[:8]}"
    Path(logdir).mkdir(parents=True, exist_ok=True)
    out: dict = {"settings": asdict(settings), "partitions": partitions, "topic": topic, "schemes": {}}
    zk = connect(zk_connect, session_timeout=30.0)
    try:
        create_topic(zk, topic, partitions)
        run = _Run(zk, zk_connect, host_port, bootstrap, topic, partitions, logdir, settings)
        for scheme in map(Scheme, schemes):
            rows = _one_by_one(run, scheme, sizes, progress)
            every = []
            for n in sizes:
                progress(f"scale-up {scheme.value}: all at once N={n} ...")
                every.append(_all_at_once(run, scheme, n))
            out["schemes"][scheme.value] = {"one_by_one": rows, "all_at_once": every}
    finally:
        zk.stop()
        zk.close()
    return out
