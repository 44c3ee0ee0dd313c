"""The JSONL event log and counters every scheme-one member keeps, so H1–H5 and S1–S6 can be computed.

One line per event: `{"t": <time.monotonic()>, "wall": <epoch s>, "member": <consumer id>,
"ev": <name>, ...fields}`. `t` is the system-wide monotonic clock, so logs of members in one
machine (threads or processes) merge by `t`. Event names and fields: `docs/zk_rebalance.md`.

    log = EventLog("/tmp/m1.jsonl", member="grp_a")
    log.emit("watch", kind="ids", path="/consumers/grp/ids")
    log.counters["watch"]          # 1
    read_events(["/tmp/m1.jsonl"]) # merged, sorted by t
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path


class EventLog:
    """Append-only JSONL writer (thread-safe, line-buffered) plus in-memory counters."""

    def __init__(self, path: str | os.PathLike | None, member: str = ""):
        self.member = member
        self.path = Path(path) if path else None
        self.counters: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._file = None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", buffering=1, encoding="utf-8")

    def emit(self, ev: str, **fields) -> dict:
        rec = {"t": time.monotonic(), "wall": time.time(), "member": self.member, "ev": ev, **fields}
        with self._lock:
            self.counters[ev] += 1
            if ev == "zk":
                self.counters[f"zk.{fields.get('op')}"] += 1
            if self._file:
                self._file.write(json.dumps(rec, separators=(",", ":"), default=str) + "\n")
        return rec

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counters[key] += n

    def close(self) -> None:
        with self._lock:
            if self._file:
                self._file.close()
                self._file = None


def read_events(paths: Iterable[str | os.PathLike]) -> list[dict]:
    """Every event of the given logs, merged and sorted by monotonic time; bad lines are skipped."""
    out: list[dict] = []
    for p in paths:
        try:
            lines = Path(p).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    out.sort(key=lambda e: e["t"])
    return out
