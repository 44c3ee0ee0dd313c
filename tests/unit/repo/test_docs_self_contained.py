"""The repository explains itself: no file points at notes outside it, and every doc it names exists.

A user of the repository has its code, `README.md` and `docs/`. A docstring that says "see
§3.2" or names a design note kept elsewhere sends them nowhere, so such references fail here,
with the file and line to fix.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
OUTSIDE = re.compile(
    r"§|\.\./shared|PROTOCOL\.md|ENVIRONMENT\.md|ARCHITECTURE\.md|STYLE\.md|coordinator-spec\.md"
    r"|legacy-zk-and-migration\.md|spark-notes\.md|kafka-wire-notes\.md|testcontainers-notes\.md"
    r"|\bseeds?\s+00\d"
)
DOC_PATH = re.compile(r"\bdocs/[\w./-]+\.md\b")
THIS = Path(__file__).resolve()


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    paths = [REPO / line for line in out.splitlines()]
    return [p for p in paths if p.is_file() and p.resolve() != THIS and p.suffix not in {".png", ".parquet"}]


def _lines(path: Path):
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        return
    yield from enumerate(text.splitlines(), 1)


def test_the_pattern_catches_what_it_should():
    assert OUTSIDE.search("see coordinator-spec.md §3.2")
    assert OUTSIDE.search("as in seed 003")
    assert not OUTSIDE.search("see docs/protocol.md, JoinGroup")


def test_no_file_points_outside_the_repository():
    found = [
        f"{p.relative_to(REPO)}:{n}: {line.strip()[:100]}"
        for p in _tracked()
        for n, line in _lines(p)
        if OUTSIDE.search(line)
    ]
    assert found == [], "references to notes a user of the repository does not have:\n" + "\n".join(found)


def test_every_named_doc_exists():
    missing = sorted(
        {
            f"{p.relative_to(REPO)}:{n}: {m}"
            for p in _tracked()
            for n, line in _lines(p)
            for m in DOC_PATH.findall(line)
            if not (REPO / m).is_file()
        }
    )
    assert missing == [], "docs named but absent:\n" + "\n".join(missing)
