"""Processes a test started, found in /proc independently of the code under test.

    assert survivors(cluster_dir, seen=set(pids)) == []

A process counts when the test saw its pid while it ran (`seen`), or when its environment, command
line or working directory names `mark_dir`. A zombie (dead, not reaped yet) does not count.
"""

from __future__ import annotations

import os
from pathlib import Path


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def survivors(mark_dir: Path, seen: set[int] = frozenset()) -> list[str]:
    """Live processes of `seen` or naming `mark_dir`: `pid command line` of each."""
    mark = str(mark_dir).encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        base = f"/proc/{entry.name}"
        try:
            with open(f"{base}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "Z":
                    continue  # dead, not reaped yet
            with open(f"{base}/cmdline", "rb") as f:
                command = f.read()
            with open(f"{base}/environ", "rb") as f:
                environ = f.read()
            cwd = os.readlink(f"{base}/cwd").encode()
        except OSError:
            continue
        if int(entry.name) in seen or any(mark in s for s in (command, environ, cwd)):
            found.append(f"{entry.name} {cmdline(int(entry.name))[:160]}")
    return found
