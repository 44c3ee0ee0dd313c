"""The README's map of rooms is the repository: the directories it draws are `tree -d`'s, and its
table of what each package may import is the one `test_import_layers` enforces.

A newcomer reads the map to find their room; a map that lists a folder that is gone, or misses a
new one, sends them to the wrong place, so both drifts fail here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.unit.repo.test_import_layers import PACKAGES_MAY_IMPORT

REPO = Path(__file__).resolve().parents[3]
README = REPO / "README.md"
ROOMS_HEADING = "## Rooms"


def _section() -> list[str]:
    lines = README.read_text().splitlines()
    start = lines.index(ROOMS_HEADING)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def drawn_directories(lines: list[str]) -> set[str]:
    """The directories a `tree -d` drawing names, as paths: `├── name  comment` one level per 4 columns.

    >>> sorted(drawn_directories([".", "├── a    x", "│   └── b   y", "└── c"]))
    ['a', 'a/b', 'c']
    """
    out: set[str] = set()
    stack: list[str] = []
    for line in lines:
        m = re.match(r"^((?:│   |    )*)[├└]── (\S+)", line)
        if not m:
            continue
        depth = len(m.group(1)) // 4
        stack[depth:] = [m.group(2).rstrip("/")]
        out.add("/".join(stack))
    return out


def _tree_block() -> list[str]:
    section = _section()
    fences = [i for i, line in enumerate(section) if line.startswith("```")]
    assert len(fences) >= 2, f"the README's {ROOMS_HEADING!r} section has no drawing of the rooms"
    return section[fences[0] + 1 : fences[1]]


def _tracked_directories() -> set[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    dirs: set[str] = set()
    for line in out.splitlines():
        parts = Path(line).parts[:-1]
        for i in range(1, len(parts) + 1):
            if not any(p.startswith(".") for p in parts[:i]):
                dirs.add("/".join(parts[:i]))
    return dirs


def test_the_map_of_rooms_is_tree_d():
    drawn, real = drawn_directories(_tree_block()), _tracked_directories()
    assert sorted(real - drawn) == [], "directories missing from the README's map of rooms"
    assert sorted(drawn - real) == [], "the README's map of rooms names directories that do not exist"


def test_the_import_table_is_the_enforced_one():
    """The README's `| package | may import |` rows equal test_import_layers.PACKAGES_MAY_IMPORT."""
    rows = {}
    for line in _section():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and (m := re.fullmatch(r"`(\w+)`", cells[0])):
            rows[m.group(1)] = set(re.findall(r"`(\w+)`", cells[1]))
    assert rows == PACKAGES_MAY_IMPORT
