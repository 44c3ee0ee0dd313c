"""Scheme one's herd-effect and split-brain metrics (H1–H5, S1–S6, defined in docs/zk_rebalance.md).

Pure functions over merged event logs (`events.read_events`), each for a window `[since, until)`
of monotonic time, plus `OwnershipSampler`, which polls the owner znodes (server-side truth for
S3 and the H5 coverage check) and writes `owners` samples to its own event log.

    events = read_events(glob("logs/*.jsonl"))
    fanout(events, since=t_join)                 # H1: members that entered syncedRebalance
    zk_requests(events, since=t_join)            # H3: {"total": .., "getData": .., ...}
    unowned_partition_seconds(events, t0, t1)    # S3, from an OwnershipSampler's samples
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, defaultdict

from core.zk import connect
from zk_rebalance.events import EventLog
from zk_rebalance.layout import owner_path


def _window(events: list[dict], since: float = -math.inf, until: float = math.inf) -> list[dict]:
    return [e for e in events if since <= e["t"] < until]


def fanout(events: list[dict], since: float = -math.inf, until: float = math.inf) -> int:
    """H1: distinct members that entered `syncedRebalance` in the window."""
    return len({e["member"] for e in _window(events, since, until) if e["ev"] == "rebalance_begin"})


def watch_notifications(events: list[dict], since: float = -math.inf, until: float = math.inf) -> Counter:
    """H2: watch callbacks delivered across the group, by kind (`ids`, `topic`, `topics`, `brokers`)."""
    return Counter(e.get("kind", "?") for e in _window(events, since, until) if e["ev"] == "watch")


def zk_requests(events: list[dict], since: float = -math.inf, until: float = math.inf) -> Counter:
    """H3: ZooKeeper requests issued by the members in the window, by op, plus `total`."""
    c = Counter(e["op"] for e in _window(events, since, until) if e["ev"] == "zk")
    c["total"] = sum(c.values())
    return c


def predicted_reads(n: int, brokers: int, topics: int) -> int:
    """The ZooKeeper reads of one group-wide round, `N·(N + 2B + T + 5)` (offset reads not included)."""
    return n * (n + 2 * brokers + topics + 5)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def stop_the_world(
    events: list[dict], since: float = -math.inf, until: float = math.inf, unchanged_only: bool = True
) -> dict:
    """H4: per member, first `fetch_stop` → next `fetch_start` in the window (p50/p99, seconds).

    With `unchanged_only`, only members that fetch the same partitions afterwards count: the
    pause they suffered bought them nothing.
    """
    pauses = []
    by_member: dict[str, list[dict]] = defaultdict(list)
    for e in _window(events, since, until):
        if e["ev"] in ("fetch_stop", "fetch_start", "rebalance_end"):
            by_member[e["member"]].append(e)
    for evs in by_member.values():
        stopped_at, before, after = None, set(), set()
        for e in evs:
            if e["ev"] == "fetch_stop":
                if stopped_at is None:
                    stopped_at = e["t"]
                before.add(e["partition"])
            elif e["ev"] == "fetch_start" and stopped_at is not None:
                after.add(e["partition"])
                end = e["t"]
            elif e["ev"] == "rebalance_end" and e.get("ok") and stopped_at is not None:
                if after and (not unchanged_only or after == before):
                    pauses.append(end - stopped_at)
                stopped_at, before, after = None, set(), set()
    return {"count": len(pauses), "p50": _percentile(pauses, 0.5), "p99": _percentile(pauses, 0.99)}


def time_to_stable(events: list[dict], since: float, until: float = math.inf) -> float | None:
    """H5: from `since` to the last successful `rebalance_end` in the window (None: none succeeded).

    Pair it with `coverage()` (or the sampler's last sample) to check every partition is owned.
    """
    ends = [e["t"] for e in _window(events, since, until) if e["ev"] == "rebalance_end" and e.get("ok")]
    return max(ends) - since if ends else None


def conflicts(events: list[dict], since: float = -math.inf, until: float = math.inf) -> dict:
    """S1: NodeExists conflicts, attempts, failed attempts, and `ConsumerRebalanceFailed` count."""
    w = _window(events, since, until)
    attempts = [e for e in w if e["ev"] == "attempt_end"]
    return {
        "conflicts": sum(1 for e in w if e["ev"] == "conflict"),
        "attempts": len(attempts),
        "failed_attempts": sum(1 for e in attempts if not e.get("ok")),
        "rebalance_failures": sum(1 for e in w if e["ev"] == "rebalance_failed"),
    }


def disagreement(events: list[dict], since: float = -math.inf, until: float = math.inf) -> dict:
    """S2: compare each member's latest decision in the window.

    `views`: distinct view digests; `double_claimed`: partitions two members decided to own;
    `unclaimed`: partitions (of any member's view) that no member decided to own.
    """
    latest: dict[str, dict] = {}
    for e in _window(events, since, until):
        if e["ev"] == "decision":
            latest[e["member"]] = e
    owners: dict[str, set[str]] = defaultdict(set)
    universe: set[str] = set()
    for member, d in latest.items():
        for tp in d.get("mine", {}):
            owners[tp].add(member)
        for topic, n in d.get("partitions", {}).items():
            universe.update(f"{topic}-{p}" for p in range(n))
    return {
        "members": len(latest),
        "views": len({d["view"] for d in latest.values()}),
        "double_claimed": sorted(tp for tp, m in owners.items() if len(m) > 1),
        "unclaimed": sorted(universe - set(owners)),
    }


def unowned_partition_seconds(
    events: list[dict], since: float = -math.inf, until: float = math.inf, partitions: int | None = None
) -> float:
    """S3: ∫ (partitions without an owner node) dt, from `owners` samples (`OwnershipSampler`)."""
    samples = [e for e in events if e["ev"] == "owners"]
    total = 0.0
    for a, b in zip(samples, samples[1:], strict=False):
        lo, hi = max(a["t"], since), min(b["t"], until)
        if hi > lo:
            n = partitions if partitions is not None else a["partitions"]
            total += (n - len(a["owned"])) * (hi - lo)
    return total


def double_consumption(events: list[dict], since: float = -math.inf, until: float = math.inf) -> dict:
    """S4: per partition, overlap (seconds) of fetch intervals of different members."""
    intervals: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    open_: dict[tuple[str, str], float] = {}
    end = until if until != math.inf else max((e["t"] for e in events), default=0.0)
    for e in events:
        key = (e["member"], e.get("partition", ""))
        if e["ev"] == "fetch_start":
            open_.setdefault(key, e["t"])
        elif e["ev"] == "fetch_stop" and key in open_:
            intervals[key[1]].append((key[0], open_.pop(key), e["t"]))
    for (member, tp), t in open_.items():
        intervals[tp].append((member, t, end))
    overlap: dict[str, float] = {}
    for tp, ivs in intervals.items():
        o = 0.0
        for i, (m1, a1, b1) in enumerate(ivs):
            for m2, a2, b2 in ivs[i + 1 :]:
                if m1 != m2:
                    lo, hi = max(a1, a2, since), min(b1, b2, end)
                    o += max(0.0, hi - lo)
        if o > 0:
            overlap[tp] = o
    return {"partitions": len(overlap), "seconds": sum(overlap.values()), "by_partition": overlap}


def offset_regressions(events: list[dict]) -> list[dict]:
    """S5: commits (ordered by the offset node's mzxid) whose value is below the previous one."""
    by_tp: dict[str, list[dict]] = defaultdict(list)
    for e in events:
        if e["ev"] == "commit" and e.get("mzxid") is not None:
            by_tp[e["partition"]].append(e)
    out = []
    for commits in by_tp.values():
        commits.sort(key=lambda e: e["mzxid"])
        for prev, cur in zip(commits, commits[1:], strict=False):
            if cur["offset"] < prev["offset"]:
                out.append(
                    {
                        "partition": cur["partition"],
                        "from": prev["offset"],
                        "to": cur["offset"],
                        "member": cur["member"],
                        "previous_member": prev["member"],
                    }
                )
    return out


def zombie_lifetime(events: list[dict], member: str) -> float | None:
    """S6: others see `member` leave `/ids` (server-side expiry) → `member` stops fetching.

    0 when its log shows it had already stopped fetching by then (a fenced member); None when
    nobody saw it leave; `inf` when it never stopped fetching in the log (or has no fetch events:
    its log is missing, so it is assumed to fetch on).
    """
    left = next(
        (
            e["t"]
            for e in events
            if e["ev"] == "watch"
            and e.get("kind") == "ids"
            and e["member"] != member
            and member in e.get("left", [])
        ),
        None,
    )
    if left is None:
        return None
    fetching: set[str] = set()
    seen = False
    for e in events:  # in time order: replay the member's fetchers up to and past `left`
        if e["member"] != member or e["ev"] not in ("fetch_start", "fetch_stop"):
            continue
        seen = True
        if e["t"] >= left and not fetching:
            break
        if e["ev"] == "fetch_start":
            fetching.add(e["partition"])
        else:
            fetching.discard(e["partition"])
        if e["t"] >= left and not fetching:
            return e["t"] - left
    return 0.0 if seen and not fetching else math.inf


def coverage(zk, group: str, partitions: dict[str, int]) -> dict:
    """Server-side check (VerifyConsumerRebalance): owner of every partition and whether it is live.

    Returns `{"owned": {tp: owner}, "unowned": [...], "dead_owner": [...]}`; an owner is live
    when its consumer id (the owner value cut at the last `-`) is registered in `/ids`.
    """
    try:
        live = set(zk.get_children(f"/consumers/{group}/ids"))
    except Exception:
        live = set()
    owned, unowned, dead = {}, [], []
    for topic, n in partitions.items():
        for p in range(n):
            try:
                owner = zk.get(owner_path(group, topic, p))[0].decode()
            except Exception:
                unowned.append(f"{topic}-{p}")
                continue
            owned[f"{topic}-{p}"] = owner
            if owner.rpartition("-")[0] not in live:
                dead.append(f"{topic}-{p}")
    return {"owned": owned, "unowned": unowned, "dead_owner": dead}


class OwnershipSampler:
    """Polls the owner nodes of a group every `interval` s; writes `owners` samples (S3, H5)."""

    def __init__(
        self,
        zk_connect: str,
        group: str,
        partitions: dict[str, int],
        event_log: str | None,
        interval: float = 0.05,
    ):
        self.group, self.partitions, self.interval = group, partitions, interval
        self.events = EventLog(event_log, member="sampler")
        self.samples: list[dict] = []
        self._zk = connect(zk_connect)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="owners-sampler", daemon=True)

    def start(self) -> OwnershipSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        total = sum(self.partitions.values())
        while not self._stop.is_set():
            owned = {}
            for topic in self.partitions:
                try:
                    for p in self._zk.get_children(f"/consumers/{self.group}/owners/{topic}"):
                        owned[f"{topic}-{p}"] = True
                except Exception:
                    pass
            self.samples.append(self.events.emit("owners", owned=sorted(owned), partitions=total))
            time.sleep(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._zk.stop()
        self._zk.close()
        self.events.close()
