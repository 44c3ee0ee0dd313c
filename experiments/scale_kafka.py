"""Scale-up for the librdkafka schemes (`kafka-classic`, `kafka-consumer`): the same joins as
`experiments/scale.py` measures for groupshift's own members, with each member a worker process
(`experiments/kafka_worker.py`) and every figure taken from the members' own event logs.

* one by one: a group of N - 1 members is formed (not measured) and left quiet, then one member
  joins; measured from the moment the driver lets it subscribe to the last ownership change.
* all at once: N members start together; measured from that moment until every partition has one
  owner and nothing moved for `QUIET_S`.

A worker process takes a while to start (Python, then librdkafka): each starts, logs `ready` and
waits for a gate file; the driver creates the file when every member to be measured is ready, so
a process's start-up is never counted. ZooKeeper's counters (`mntr`) are read around the measured
step as for the other schemes; librdkafka members make no ZooKeeper request of their own (client
side: 0). H4 pauses come from the old members' `revoked` and `assigned` events of partitions they
kept; H1 counts the members that logged an ownership change after the join.

    rows = run_kafka_scale(lab, lab.host_port(), [4, 8], ["kafka-classic"], partitions=16)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.scheme import Scheme
from experiments.harness import GroupRun, Lab, RunSettings
from experiments.zkstats import delta, server_counts, watches

QUIET_S = 1.0  # nothing moved for this long after the last ownership change: the group is stable
OWNERSHIP = ("assigned", "revoked", "lost")


@dataclass
class _Join:
    """What one measured step saw: its start, when it settled, the events since, and ZooKeeper's
    counters from its start to the first reading taken after it settled."""

    t0: float
    done: float
    events: list[dict]
    server: dict[str, int]


def _held(events: list[dict], until: float) -> dict[str, set[str]]:
    """Per member, the partitions it held at `until` (its own incremental callbacks)."""
    held: dict[str, set[str]] = {}
    for e in events:
        if e["t"] > until:
            break
        mine = held.setdefault(e.get("member", ""), set())
        if e["ev"] == "assigned":
            mine.update(e["partitions"])
        elif e["ev"] in ("revoked", "lost"):
            mine.difference_update(e["partitions"])
    return held


def _max_gen(events: list[dict], until: float = float("inf")) -> int:
    return max((e.get("gen", -1) for e in events if e["ev"] == "assigned" and e["t"] <= until), default=-1)


def _ready(run: GroupRun, members: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        ready = {e["member"] for e in run.events() if e["ev"] == "ready"}
        if ready >= set(members):
            return
        gone = [m for m in members if run.procs[m].poll() is not None]
        if gone or time.monotonic() > deadline:
            why = f"exited: {', '.join(gone)}" if gone else f"not ready within {timeout:g}s"
            raise TimeoutError(f"{run.scheme} members {why} (see {run.logdir}/*.stderr)")
        run.lab.sleep(0.05)


def _open_gate(
    run: GroupRun, gate: Path, until: Callable[[list[dict]], bool], timeout: float, host_port
) -> _Join:
    """Let the gated members subscribe; wait until `until(events)` holds and nothing moved for
    `QUIET_S`. The step ends at its last ownership change; ZooKeeper's counters are read at every
    look, so the step's requests are not those of the quiet wait after it."""
    readings = [(time.monotonic(), server_counts(*host_port))]
    t0 = time.monotonic()
    gate.touch()
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        readings.append((time.monotonic(), server_counts(*host_port)))
        events = run.events()
        if run.settled(events, QUIET_S) and until(events):
            moved = [e["t"] for e in events if e["ev"] in OWNERSHIP and e["t"] >= t0]
            done = max(moved, default=t0)
            after = next(counts for t, counts in readings if t >= done)
            return _Join(t0, done, events, delta(after, readings[0][1]))
        run.lab.sleep(0.05)
    raise TimeoutError(f"{run.scheme}: no stable group within {timeout:g}s")


def _pause(events: list[dict], member: str, kept: set[str], since: float, until: float) -> float:
    """The longest time one of `kept` was not held by `member` in [since, until]."""
    worst, gone = 0.0, {}
    for e in events:
        if e.get("member") != member or not since <= e["t"] <= until:
            continue
        for tp in kept.intersection(e.get("partitions", ())):
            if e["ev"] in ("revoked", "lost"):
                gone.setdefault(tp, e["t"])
            elif e["ev"] == "assigned" and tp in gone:
                worst = max(worst, e["t"] - gone.pop(tp))
    return max([worst, *(until - t for t in gone.values())])


class _Scale:
    def __init__(self, lab: Lab, host_port: tuple[str, int], partitions: int, settings: RunSettings, logdir):
        self.lab, self.host_port, self.partitions, self.settings = lab, host_port, partitions, settings
        self.logdir = Path(logdir)

    def group(self, scheme: str, mode: str, n: int) -> GroupRun:
        name = f"scale-up-{mode}-{n}"
        return GroupRun(self.lab, name, scheme, self.settings, logdir=self.logdir / scheme / f"{mode}-{n}")

    def one_by_one(self, scheme: str, n: int) -> dict:
        run = self.group(scheme, "obo", n)
        timeout = self.settings.settle_timeout_s
        try:
            for _ in range(n - 1):
                run.spawn()
            if not run.wait_settled(quiet_s=QUIET_S, timeout=timeout):
                return {"n": n, "error": f"group of {n - 1} not stable within {timeout:g}s"}
            before_events = run.events()
            old = run.live()
            held = _held(before_events, float("inf"))
            prev_gen = _max_gen(before_events)
            joiner = run.spawn(gate=(gate := run.logdir / "gate"))
            _ready(run, [joiner], timeout)
            rest = watches(*self.host_port)
            joined = lambda ev: bool(_held(ev, float("inf")).get(joiner))  # noqa: E731
            step = _open_gate(run, gate, joined, timeout, self.host_port)
            server = step.server
            after = _held(step.events, float("inf"))
            moved = {e["member"] for e in step.events if e["ev"] in OWNERSHIP and e["t"] >= step.t0}
            pauses = []
            for m in old:
                kept = held.get(m, set()) & after.get(m, set())
                pause = _pause(step.events, m, kept, step.t0, step.done) if kept else None
                pauses.append(None if pause is None else round(pause * 1000, 1))
            return {
                "n": n,
                "time_to_stable_ms": round((step.done - step.t0) * 1000, 1),
                "zk_requests": server["requests"],
                "watch_notifications": server["watch_notifications"],
                "watches_at_rest": rest["watches"],
                "watching_sessions": rest["watching_sessions"],
                "client_zk_requests": 0,
                "client_watch_notifications": 0,
                "fanout": len(moved),
                "pauses_ms": pauses,
                "max_pause_ms": max((p for p in pauses if p is not None), default=None),
                "rounds": _max_gen(step.events) - max(prev_gen, 0),
            }
        except TimeoutError as exc:
            return {"n": n, "error": str(exc)}
        finally:
            run.stop_all(grace_s=15.0)

    def all_at_once(self, scheme: str, n: int) -> dict:
        run = self.group(scheme, "all", n)
        timeout = self.settings.settle_timeout_s
        gate = run.logdir / "gate"
        row: dict = {"n": n}
        try:
            members = [run.spawn(gate=gate) for _ in range(n)]
            _ready(run, members, timeout)

            def everyone(events: list[dict]) -> bool:
                held = _held(events, float("inf"))
                return n > self.partitions or all(held.get(m) for m in members)

            step = _open_gate(run, gate, everyone, timeout, self.host_port)
            row["time_to_stable_ms"] = round((step.done - step.t0) * 1000, 1)
            row["zk_requests"] = step.server["requests"]
            row["watch_notifications"] = step.server["watch_notifications"]
            row["conflicts"] = {"rounds": _max_gen(step.events)}
        except TimeoutError as exc:
            row["error"] = str(exc)
        run.stop_all(grace_s=15.0)
        return row


def run_kafka_scale(
    lab: Lab,
    host_port: tuple[str, int],
    sizes: Sequence[int],
    schemes: Sequence[str],
    partitions: int,
    *,
    logdir: Path,
    progress: Callable[[str], None] = lambda s: None,
    session_ms: int = 10_000,
    heartbeat_ms: int = 100,
    timeout_s: float = 120.0,
) -> dict[str, dict]:
    """`{scheme: {"one_by_one": [...], "all_at_once": [...]}}` for the librdkafka `schemes`, rows
    as `experiments.scale.run_scale` gives them, on `lab`'s single server and nodes."""
    wrong = [s for s in schemes if not Scheme(s).kafka]
    if wrong:
        raise ValueError(f"not librdkafka schemes: {', '.join(wrong)}")
    settings = RunSettings(
        partitions=partitions, session_ms=session_ms, heartbeat_ms=heartbeat_ms, settle_timeout_s=timeout_s
    )
    scale = _Scale(lab, host_port, partitions, settings, logdir)
    out: dict[str, dict] = {}
    for scheme in schemes:
        rows = []
        for n in sorted(set(sizes)):
            progress(f"scale-up {scheme}: one by one N={n} ...")
            rows.append(scale.one_by_one(scheme, n))
            if "error" in rows[-1]:
                progress(f"scale-up {scheme}: one by one N={n}: {rows[-1]['error']}")
        every = []
        for n in sorted(set(sizes)):
            progress(f"scale-up {scheme}: all at once N={n} ...")
            every.append(scale.all_at_once(scheme, n))
        out[scheme] = {"one_by_one": rows, "all_at_once": every}
    return out
