"""Output of the inspection commands, pure: rows as an aligned table, CSV or JSON; a progress bar.

print(render([{"topic": "t", "lag": 3}], "table"))     # TOPIC  LAG / t      3
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

OUTPUTS = ("table", "json", "csv")


def cell(value: Any) -> str:
    return "-" if value is None else str(value)


def render(rows: Sequence[dict[str, Any]], output: str, columns: Sequence[str] | None = None) -> str:
    columns = list(columns or (rows[0].keys() if rows else []))
    if output == "json":
        return json.dumps([{c: r.get(c) for c in columns} for r in rows])
    if output == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow(["" if r.get(c) is None else r.get(c) for c in columns])
        return buf.getvalue().rstrip("\n")
    header = [c.upper().replace("_", "-") for c in columns]
    body = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=False)]
    lines = [
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in [header, *body]
    ]
    return "\n".join(lines)


class Progress:
    """`done/total` on stderr: a redrawn bar on a terminal, otherwise a plain line now and then."""

    MIN_TOTAL = 1_000  # smaller operations print nothing

    def __init__(self, what: str, stream: TextIO | None = None):
        self.what = what
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self._last = -1

    def __call__(self, done: int, total: int) -> None:
        if total < self.MIN_TOTAL:
            return
        pct = done * 100 // total
        if self.tty:
            bar = "#" * (pct // 5)
            self.stream.write(f"\r{self.what} [{bar:<20}] {done}/{total}")
            if done >= total:
                self.stream.write("\n")
        elif pct // 25 != self._last // 25 or done >= total:
            self.stream.write(f"{self.what}: {done}/{total} partitions\n")
        self._last = pct
        self.stream.flush()
