"""Burrow's consumer status rules, pure: a window of commits per partition in, a status out.

The window holds the last `WINDOW` (10) distinct commits of a partition, each with the lag seen
when it was recorded (`max(0, log end − offset)`), plus recent log end offsets. Rules, in order
(LinkedIn Burrow's `evaluator/caching.go`):

* OK when the window is less complete than `min_complete`, or the current lag ≤ `allowed_lag`;
* **STOP** when the group has not committed for longer than the window spans
  (`now − last.ts > last.ts − first.ts`) and no recent log end offset was ≤ the last commit
  (it was not simply caught up on an idle partition);
* **REWIND** when an offset is lower than its predecessor and no later one got back to it;
* only if the lag was never ≤ `allowed_lag` in the window: **STALL** when every offset is the
  same, else **WARN** when the lag never went down between successive commits;
* else OK.

The group's status is the worst: STOP, STALL and REWIND make it ERR, WARN makes it WARN.
A scheme-one consumer skips unchanged offset writes (and znode mtimes are the commit times),
so a stuck one shows as STOP, never STALL.

>>> c = [Commit(10, 1_000, 5), Commit(10, 2_000, 6)]
>>> evaluate(c, current_lag=8, now=100_000, ends=[20])
'STOP'
>>> evaluate(c, current_lag=8, now=2_500, ends=[20])
'STALL'
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

OK, WARN, ERR, STOP, STALL, REWIND, NOTFOUND = "OK", "WARN", "ERR", "STOP", "STALL", "REWIND", "NOTFOUND"
WINDOW = 10  # Burrow's `intervals`
_SEVERITY = {OK: 1, WARN: 2, ERR: 3}
_GROUP_OF = {OK: OK, WARN: WARN, STOP: ERR, STALL: ERR, REWIND: ERR}


class Commit(msgspec.Struct, frozen=True):
    offset: int
    ts: int  # ms
    lag: int  # log end − offset when the commit was recorded (≥ 0)


def evaluate(
    commits: Sequence[Commit],
    *,
    current_lag: int | None,
    now: int,
    ends: Sequence[int] = (),
    allowed_lag: int = 0,
    min_complete: float = 0.0,
    window: int = WINDOW,
) -> str | None:
    """A partition's status, or None when nothing was recorded for it yet."""
    commits = list(commits)[-window:]
    if not commits:
        return None
    if len(commits) / window < min_complete:
        return OK
    lag = commits[-1].lag if current_lag is None else current_lag
    if lag <= allowed_lag:
        return OK
    first, last = commits[0], commits[-1]
    if now - last.ts > last.ts - first.ts and not any(e <= last.offset for e in ends):
        return STOP
    if _rewound(commits):
        return REWIND
    if all(c.lag > allowed_lag for c in commits):
        if all(c.offset == first.offset for c in commits):
            return STALL
        if all(b.lag >= a.lag for a, b in zip(commits, commits[1:], strict=False)):
            return WARN
    return OK


def _rewound(commits: list[Commit]) -> bool:
    for i in range(1, len(commits)):
        before = commits[i - 1].offset
        if commits[i].offset < before and not any(c.offset >= before for c in commits[i + 1 :]):
            return True
    return False


def group_status(partition_statuses: Sequence[str | None]) -> str:
    """The worst partition status as Burrow reports a group: OK, WARN or ERR."""
    worst = OK
    for s in partition_statuses:
        if s is None:
            continue
        g = _GROUP_OF[s]
        if _SEVERITY[g] > _SEVERITY[worst]:
            worst = g
    return worst
