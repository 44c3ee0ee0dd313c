"""What happened, computed from the processing logs: duplicates, gaps, double ownership, regressions.

Pure functions over merged events (`zk_rebalance.events.read_events` of the workers' logs, see
`experiments/worker.py`, plus the driver's own log of the faults it injected). Nothing is
estimated: every figure counts logged records, commits and ownership changes.

Ownership is what each member believed: a partition is *held* by a member from its `assigned`
event to its `revoked`/`lost` event, its `stop`, or the driver's `killed` event for it. A paused
member (`paused` .. `resumed` by the driver) still believes it holds its partitions but does
nothing; `active` holdings leave those spans out.

    events = read_events([*logdir.glob("*.jsonl")])
    summary(events, ends={"t-0": 1200, ...}, since=t_fault)
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, defaultdict

Interval = tuple[str, float, float]  # (member, start, end)


class _Index:
    """Lookups over one time-ordered event list in O(log n): a chaos run logs ~10^5 events and
    ~10^4 commits, and a scan of the whole list per commit made its analysis run for hours. Built
    by `summary` once for all its figures (the functions below build their own when not given one).

    Per partition, its *fresh reads* in the order of the assignments they follow: a member's first
    `process` of a partition after it was assigned it, which starts where the group's committed
    offset stood when the member took the partition. A later read by the same member continues
    from its own position and says nothing about what was committed. `landed` and `in_doubt` are
    computed once per list and kept."""

    def __init__(self, events: list[dict]):
        fresh: dict[str, list[tuple[float, dict]]] = defaultdict(list)
        taken: dict[tuple[str, str], float] = {}  # (member, tp): assigned at, until its first read
        for e in events:
            if e["ev"] == "assigned":
                for tp in e["partitions"]:
                    taken[(e["member"], tp)] = e["t"]
            elif e["ev"] == "process" and (at := taken.pop((e["member"], e["tp"]), None)) is not None:
                fresh[e["tp"]].append((at, e))
        for reads in fresh.values():
            reads.sort(key=lambda r: r[0])
        self.fresh = {tp: ([at for at, _ in rs], [x for _, x in rs]) for tp, rs in fresh.items()}
        self._landed: list[dict] | None = None
        self._in_doubt: list[dict] | None = None

    def next_fresh_read(self, tp: str, after: float, other_than: str | None = None) -> dict | None:
        """The first fresh read of `tp` by a member assigned it later than `after` (by another
        member than `other_than`, if given): where the group's committed offset stood after then."""
        times, xs = self.fresh.get(tp, ((), ()))
        for x in xs[bisect.bisect_right(times, after) :]:
            if x["member"] != other_than:
                return x
        return None


def holdings(events: list[dict], until: float | None = None) -> dict[str, list[Interval]]:
    """Per partition, the intervals during which each member believed it held it."""
    end = until if until is not None else max((e["t"] for e in events), default=0.0)
    open_: dict[tuple[str, str], float] = {}
    out: dict[str, list[Interval]] = defaultdict(list)

    def close(member: str, tp: str, t: float) -> None:
        start = open_.pop((member, tp), None)
        if start is not None:
            out[tp].append((member, start, t))

    for e in events:
        ev, member = e["ev"], e.get("member", "")
        if ev == "assigned":
            for tp in e["partitions"]:
                open_.setdefault((member, tp), e["t"])
        elif ev in ("revoked", "lost"):
            for tp in e["partitions"]:
                close(member, tp, e["t"])
        elif ev in ("stop", "killed"):
            victim = e.get("victim", member)
            for m, tp in [k for k in open_ if k[0] == victim]:
                close(m, tp, e["t"])
    for (member, tp), start in open_.items():
        out[tp].append((member, start, end))
    return dict(out)


def paused_spans(events: list[dict], until: float) -> dict[str, list[tuple[float, float]]]:
    """Per member, the spans the driver kept it stopped (SIGSTOP .. SIGCONT) or cut off."""
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    started: dict[str, float] = {}
    for e in events:
        if e["ev"] == "paused":
            started.setdefault(e["victim"], e["t"])
        elif e["ev"] == "resumed" and e["victim"] in started:
            spans[e["victim"]].append((started.pop(e["victim"]), e["t"]))
    for m, t in started.items():
        spans[m].append((t, until))
    return dict(spans)


def _subtract(interval: tuple[float, float], holes: list[tuple[float, float]]) -> list[tuple[float, float]]:
    pieces = [interval]
    for h0, h1 in holes:
        nxt = []
        for a, b in pieces:
            if h1 <= a or h0 >= b:
                nxt.append((a, b))
                continue
            if a < h0:
                nxt.append((a, h0))
            if h1 < b:
                nxt.append((h1, b))
        pieces = nxt
    return pieces


def active_holdings(events: list[dict], until: float | None = None) -> dict[str, list[Interval]]:
    """`holdings` without the spans in which the holder was paused or cut off."""
    end = until if until is not None else max((e["t"] for e in events), default=0.0)
    holes = paused_spans(events, end)
    return {
        tp: [(m, a, b) for m, s, e in ivs for a, b in _subtract((s, e), holes.get(m, []))]
        for tp, ivs in holdings(events, end).items()
    }


def overlaps(held: dict[str, list[Interval]], since: float = -math.inf) -> list[tuple[str, float, float]]:
    """(partition, start, end) of every span in which two different members held one partition."""
    out = []
    for tp, ivs in held.items():
        for i, (m1, a1, b1) in enumerate(ivs):
            for m2, a2, b2 in ivs[i + 1 :]:
                lo, hi = max(a1, a2, since), min(b1, b2)
                if m1 != m2 and hi > lo:
                    out.append((tp, lo, hi))
    return sorted(out, key=lambda o: (o[0], o[1]))


def unowned_seconds(
    held: dict[str, list[Interval]], partitions: list[str], since: float, until: float
) -> float:
    """S3: ∫ (partitions nobody held) dt over [since, until)."""
    total = 0.0
    for tp in partitions:
        covered = sorted(
            (max(a, since), min(b, until)) for _, a, b in held.get(tp, []) if b > since and a < until
        )
        t, gap = since, 0.0
        for a, b in covered:
            if a > t:
                gap += a - t
            t = max(t, b)
        gap += max(0.0, until - t)
        total += gap
    return total


def processed(events: list[dict]) -> Counter:
    """How many times each (partition, offset) was processed, by anyone."""
    c: Counter = Counter()
    for e in events:
        if e["ev"] == "process":
            for o in range(e["first"], e["last"] + 1):
                c[(e["tp"], o)] += 1
    return c


def in_doubt(events: list[dict], index: _Index | None = None) -> list[dict]:
    """Commits whose outcome the member could not know, each with the batches the group's next reads
    show were committed after all: a member killed before logging the result (`commit_begin` not
    followed by a `commit`), and a failed commit (the client may report a refusal although an
    earlier attempt of the same commit landed). A batch `[tp, a, b]` was committed when the group's
    next read of `tp` from the committed offset began at `b + 1`: the first read of the first member
    assigned `tp` after the commit began (another member, or the committer assigned it again), since
    an assignment starts at the committed offset. A member that already held `tp` and reads on from
    its own position proves nothing: it may have committed that very range itself."""
    index = index or _Index(events)
    if index._in_doubt is not None:
        return index._in_doubt
    pending: dict[str, dict] = {}
    doubtful = []
    for e in events:
        if e["ev"] == "commit_begin":
            pending[e["member"]] = e
        elif e["ev"] == "commit":
            begin = pending.pop(e["member"], None)
            if not e.get("ok"):  # settled from its start: the next owner may have read meanwhile
                doubtful.append({**e, "t": begin["t"] if begin else e["t"]})
    doubtful += pending.values()
    out = []
    for begin in doubtful:
        member, committed = begin["member"], []
        for tp, first, last in begin["batches"]:
            nxt = index.next_fresh_read(tp, begin["t"])
            if nxt is not None and nxt["first"] == last + 1:
                committed.append([tp, first, last])
        out.append(
            {
                "member": member,
                "t": begin["t"],
                "batches": begin["batches"],
                "committed": committed,
                "reported_failed": begin["ev"] == "commit",
            }
        )
    index._in_doubt = out
    return out


def committed_outputs(events: list[dict], index: _Index | None = None) -> Counter:
    """How many times each (partition, offset) is in a batch whose commit succeeded (in-doubt
    commits settled by `in_doubt`)."""
    c: Counter = Counter()
    batches = [b for e in events if e["ev"] == "commit" and e.get("ok") for b in e["batches"]]
    batches += [b for d in in_doubt(events, index) for b in d["committed"]]
    for tp, first, last in batches:
        for o in range(first, last + 1):
            c[(tp, o)] += 1
    return c


def lost(outputs: Counter, ends: dict[str, int]) -> int:
    """Records below the log end that are in no committed output."""
    return sum(1 for tp, end in ends.items() for o in range(end) if outputs[(tp, o)] == 0)


def offset_regressions(events: list[dict], index: _Index | None = None) -> list[dict]:
    """S5: successful commits (in the order they took effect, `landed`) below the partition's
    previous commit."""
    last: dict[str, tuple[int, str]] = {}
    out = []
    for e in sorted(landed(events, index), key=lambda c: c["t"]):
        for tp, offset in e["offsets"].items():
            prev = last.get(tp)
            if prev is not None and offset < prev[0]:
                out.append(
                    {
                        "partition": tp,
                        "from": prev[0],
                        "to": offset,
                        "member": e["member"],
                        "previous": prev[1],
                    }
                )
            last[tp] = (offset, e["member"])
    return out


def landed(events: list[dict], index: _Index | None = None) -> list[dict]:
    """The successful commits, each at the time it took effect. A commit is logged when its answer
    arrives; a member paused while its commit was in flight logs it only after resuming, perhaps
    after the takeover. When, for every committed partition, the first read of the next member
    assigned it after the commit was sent began exactly at the committed offset, the commit had
    landed before that member fetched its position: it is
    placed at its `commit_begin` (sent while the member owned the partitions). Otherwise (no later
    reader, or one that read from an older offset) it stays at its acknowledgement."""
    index = index or _Index(events)
    if index._landed is not None:
        return index._landed
    begun: dict[str, float] = {}
    out = []
    for e in events:
        if e["ev"] == "commit_begin":
            begun[e["member"]] = e["t"]
        elif e["ev"] == "commit" and e.get("ok"):
            sent = begun.pop(e["member"], e["t"])
            nexts = [index.next_fresh_read(tp, sent, other_than=e["member"]) for tp in e["offsets"]]
            early = all(
                x is not None and x["first"] == e["offsets"][x["tp"]] and x["t"] < e["t"] for x in nexts
            )
            out.append({**e, "t": sent} if nexts and early else e)
        elif e["ev"] == "commit":
            begun.pop(e["member"], None)
    index._landed = out
    return out


def committing_owners(
    events: list[dict], held: dict[str, list[Interval]], index: _Index | None = None
) -> list[dict]:
    """For every successful commit of a partition (at the time it took effect, `landed`): the
    members that committed it successfully within the committer's holding interval up to that
    commit (the committer included). More than one is two owners acting on one partition at once."""
    commits: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for e in landed(events, index):
        for tp in e["offsets"]:
            commits[tp].append((e["t"], e["member"]))
    out = []
    for tp, cs in commits.items():
        ordered = sorted(cs)
        times = [t for t, _ in ordered]
        runs = _runs(ordered)  # (first index, end index, member) of each stretch of one member's commits
        run_ends = [times[b - 1] for _, b, _ in runs]
        for t, member in cs:
            interval = next(((a, b) for m, a, b in held.get(tp, []) if m == member and a <= t <= b), None)
            start = interval[0] if interval is not None else t
            owners = {member}
            for a, b, m in runs[bisect.bisect_left(run_ends, start) :]:
                if times[a] >= t:
                    break
                if m != member:
                    i = bisect.bisect_left(times, start, a, b)  # the run's first commit at/after start
                    if i < b and times[i] < t:
                        owners.add(m)
            out.append({"partition": tp, "member": member, "t": t, "owners": sorted(owners)})
    return out


def _runs(ordered: list[tuple[float, str]]) -> list[tuple[int, int, str]]:
    runs: list[tuple[int, int, str]] = []
    for i, (_, m) in enumerate(ordered):
        if runs and runs[-1][2] == m:
            runs[-1] = (runs[-1][0], i + 1, m)
        else:
            runs.append((i, i + 1, m))
    return runs


def double_owner_commits(
    events: list[dict], held: dict[str, list[Interval]], index: _Index | None = None
) -> list[dict]:
    """Successful commits made while another member had also committed the partition within the
    committer's holding interval: two owners committed."""
    return [c for c in committing_owners(events, held, index) if len(c["owners"]) > 1]


def zombie(events: list[dict], victim: str, since: float) -> dict:
    """S6 for one victim: after `since`, another member is assigned a partition the victim still
    believes it holds (the takeover). Reported: how long the victim went on believing it, what it
    processed of those partitions meanwhile, and its commits refused or accepted meanwhile (an
    accepted commit counted at the time it took effect, `landed`)."""
    held = holdings(events)
    zombie_spans: dict[str, tuple[float, float]] = {}
    for tp, ivs in held.items():
        mine = [(a, b) for m, a, b in ivs if m == victim and b > since]
        for m, a, _ in ivs:
            if m == victim or a < since:
                continue
            span = next(((a, y) for x, y in mine if x <= a < y), None)
            if span is not None and (tp not in zombie_spans or a < zombie_spans[tp][0]):
                zombie_spans[tp] = span
    if not zombie_spans:
        return {
            "takeover": False,
            "lifetime_s": 0.0,
            "records": 0,
            "commits_refused": 0,
            "commits_accepted": 0,
        }

    def inside(tp: str, t: float) -> bool:
        span = zombie_spans.get(tp)
        return span is not None and span[0] <= t <= span[1]

    mine = [e for e in events if e.get("member") == victim]
    records = sum(
        e["last"] - e["first"] + 1 for e in mine if e["ev"] == "process" and inside(e["tp"], e["t"])
    )
    refused = [e for e in mine if e["ev"] == "commit" and not e.get("ok")]
    accepted = [e for e in landed(events) if e["member"] == victim]
    return {
        "takeover": True,
        "lifetime_s": round(max(b - a for a, b in zombie_spans.values()), 3),
        "records": records,
        "commits_refused": sum(1 for e in refused if any(inside(b[0], e["t"]) for b in e["batches"])),
        "commits_accepted": sum(1 for e in accepted if any(inside(b[0], e["t"]) for b in e["batches"])),
    }


def settled_at(events: list[dict], since: float, until: float = math.inf) -> float | None:
    """The last ownership change (assigned/revoked/lost) in [since, until): when the group settled."""
    ts = [e["t"] for e in events if e["ev"] in ("assigned", "revoked", "lost") and since <= e["t"] < until]
    return max(ts) if ts else None


def summary(
    events: list[dict],
    ends: dict[str, int],
    since: float,
    until: float | None = None,
    settle_by: float | None = None,
    upto: dict[str, int] | None = None,
) -> dict:
    """Every processing figure of a run: the fault at `since`, the group settled before `settle_by`
    (ownership changes after it are the final shutdown's), the logs closed by `until`. A record is
    lost when it has no committed output below `upto` (default: the log ends; a group that did
    not drain passes its committed offsets, so what it is still behind on is not counted lost)."""
    end = until if until is not None else max((e["t"] for e in events), default=since)
    held = holdings(events, end)
    active = active_holdings(events, end)
    dup = processed(events)
    index = _Index(events)
    outputs = committed_outputs(events, index)
    both = overlaps(active)
    settled = settled_at(events, since, settle_by if settle_by is not None else end)
    commits = [e for e in events if e["ev"] == "commit"]
    owners = committing_owners(events, held, index)
    two_owners = [c for c in owners if len(c["owners"]) > 1]
    return {
        "records": sum(ends.values()),
        "processed": sum(dup.values()),
        "duplicates": sum(n - 1 for n in dup.values() if n > 1),
        "duplicate_committed": sum(n - 1 for n in outputs.values() if n > 1),
        "lost": lost(
            outputs, ends if upto is None else {tp: min(e, upto.get(tp, 0)) for tp, e in ends.items()}
        ),
        "double_ownership_s": round(sum(b - a for _, a, b in both if b > since), 3),
        "double_owner_commits": len(two_owners),
        "two_owner_partitions": sorted({c["partition"] for c in two_owners}),
        "max_owners_at_commit": max((len(c["owners"]) for c in owners), default=0),
        "offset_regressions": len(offset_regressions(events, index)),
        "unowned_partition_s": round(unowned_seconds(active, sorted(ends), since, settled or since), 3),
        "time_to_stable_s": round(settled - since, 3) if settled is not None else 0.0,
        "commits": sum(1 for e in commits if e.get("ok")),
        # failed commits that landed all the same (the group's next owner started after them)
        "misreported_commits": sum(
            1 for d in in_doubt(events, index) if d["reported_failed"] and d["committed"]
        ),
        "fenced_commits": sum(1 for e in commits if not e.get("ok")),
    }


def behind(ends: dict[str, int], committed: dict[str, int]) -> dict[str, int]:
    """Partitions not drained: log end − committed offset, for those above 0."""
    return {tp: end - committed.get(tp, 0) for tp, end in sorted(ends.items()) if end > committed.get(tp, 0)}


def unrecovered(events: list[dict], live: list[str], since: float, lagging: dict[str, int]) -> list[dict]:
    """The live members that were not working in their group at the end of a drain (`since`: when
    the faults ended; `lagging`: `behind`'s partitions), each with why:

    * it has had no assignment since it (last) started: it never joined;
    * its latest ownership event is a revocation or a loss: it waits for an assignment (an eager
      or cooperative rebalance ends with `assigned`, possibly of nothing);
    * it holds partitions still behind and committed nothing since `since`.

    A member holding nothing, or only drained partitions, is working (there is nothing to do)."""
    out = []
    for member in sorted(live):
        mine = [e for e in events if e.get("member") == member]
        starts = [i for i, e in enumerate(mine) if e["ev"] == "start"]
        mine = mine[starts[-1] :] if starts else mine
        membership = [e for e in mine if e["ev"] in ("assigned", "revoked", "lost")]
        held: set[str] = set()
        for e in membership:
            if e["ev"] == "assigned":
                held.update(e["partitions"])
            else:
                held.difference_update(e["partitions"])
        committed = any(e["ev"] == "commit" and e.get("ok") and e["t"] >= since for e in mine)
        stuck = sorted(tp for tp in held if tp in lagging)
        if not any(e["ev"] == "assigned" for e in membership):
            reason = "no assignment since it started"
        elif membership[-1]["ev"] != "assigned" and not committed:
            reason = f"waiting for an assignment since its partitions were {membership[-1]['ev']}"
        elif stuck and not committed:
            reason = f"holds {', '.join(stuck[:4])}{' …' if len(stuck) > 4 else ''} but committed nothing"
        else:
            continue
        out.append({"member": member, "reason": reason})
    return out


def timeline(events: list[dict], t0: float, until: float | None = None) -> dict:
    """Ownership intervals per partition, relative to `t0`, and the overlaps (for the plots)."""
    held = active_holdings(events, until)
    return {
        "intervals": {
            tp: [[m, round(a - t0, 3), round(b - t0, 3)] for m, a, b in ivs]
            for tp, ivs in sorted(held.items())
        },
        "overlaps": [[tp, round(a - t0, 3), round(b - t0, 3)] for tp, a, b in overlaps(held)],
    }
