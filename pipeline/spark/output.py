"""A Spark consumer's output: one directory per committed offset range, staged until committed.

    <out>/<topic>/partition=<p>/_staging-offsets=<start>-<end>-<id>   written, not yet committed
    <out>/<topic>/partition=<p>/offsets=<start:020d>-<end:020d>       committed and published

Only a writer whose commit passed the group's fence publishes (renames staging to final), so a
zombie never publishes over its successor; `recover` publishes what a writer committed but did
not publish before it died, and removes every other staging directory.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path

OUTPUT_RE = re.compile(r"offsets=(\d{20})-(\d{20})")
STAGING_RE = re.compile(r"_staging-offsets=(\d{20})-(\d{20})-[0-9a-f]{12}")


def output_dir(out: Path, topic: str, partition: int, start: int, end: int) -> Path:
    return out / topic / f"partition={partition}" / f"offsets={start:020d}-{end:020d}"


def staging_dir(out: Path, topic: str, partition: int, start: int, end: int) -> Path:
    """Where a batch writes before its commit ("_" names are skipped by Spark and `outputs`)."""
    name = f"_staging-offsets={start:020d}-{end:020d}-{uuid.uuid4().hex[:12]}"
    return out / topic / f"partition={partition}" / name


def publish(staging: Path) -> Path:
    """Give a committed batch's staging directory its final name (a consumer recovering it may have
    done so first: then it is only removed)."""
    m = STAGING_RE.fullmatch(staging.name)
    final = staging.parent / f"offsets={m.group(1)}-{m.group(2)}"
    try:
        staging.rename(final)
    except OSError:  # published already, or removed as abandoned
        shutil.rmtree(staging, ignore_errors=True)
    return final


def recover(partition_dir: Path, committed: int) -> None:
    """Before planning from the committed offset: publish the staging output of a batch that was
    committed but not published (its consumer died in between), and remove every other staging
    output (batches never committed: a crash, a fenced commit, a failed write)."""
    if not partition_dir.is_dir():
        return
    for d in sorted(partition_dir.iterdir()):
        m = STAGING_RE.fullmatch(d.name)
        if m is None:
            continue
        final = partition_dir / f"offsets={m.group(1)}-{m.group(2)}"
        if int(m.group(2)) <= committed and not final.exists():
            publish(d)
        else:
            shutil.rmtree(d, ignore_errors=True)


def outputs(out: Path, topic: str) -> Iterable[tuple[int, int, int, Path]]:
    """(partition, start, end, dir) of every output of `topic` under `out`."""
    root = Path(out) / topic
    if not root.is_dir():
        return []
    found = []
    for pdir in sorted(root.iterdir()):
        if not pdir.name.startswith("partition="):
            continue
        p = int(pdir.name.split("=", 1)[1])
        for d in sorted(pdir.iterdir()):
            m = OUTPUT_RE.fullmatch(d.name)
            if m:
                found.append((p, int(m.group(1)), int(m.group(2)), d))
    return found
