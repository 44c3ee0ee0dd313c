"""Print the N slowest tests of one or more JUnit XML reports (scripts/test.sh's phases).

python scripts/slowest_tests.py 20 parallel.xml alone.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def slowest(reports: list[Path], count: int) -> list[tuple[float, str]]:
    """(seconds, nodeid-like name) of the `count` slowest test cases (setup, call and teardown)."""
    cases: list[tuple[float, str]] = []
    for report in reports:
        if not report.is_file():
            continue
        for case in ET.parse(report).iter("testcase"):
            name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name', '')}"
            cases.append((float(case.get("time") or 0.0), name))
    return sorted(cases, reverse=True)[:count]


def main(argv: list[str]) -> int:
    count, reports = int(argv[0]), [Path(p) for p in argv[1:]]
    rows = slowest(reports, count)
    if rows:
        print(f"[test] the {len(rows)} slowest tests (setup + call + teardown):", file=sys.stderr)
        for seconds, name in rows:
            print(f"[test] {seconds:8.2f} s  {name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
