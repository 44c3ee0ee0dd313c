"""Sweeping what tests, benches and experiments left in Docker: `gstest-` containers and networks.

Every container and network `testing.zookeeper` and `testing.ensemble` create is named `gstest-...`
and labelled with the owning process id (`OWNER_LABEL`); its owner removes it, and once the owner
is gone (killed, say) `sweep_leftovers()` does:

    sweep_leftovers()                          # scripts/test.sh does this before every run
    remove_labelled("groupshift.run", run_id)  # what one experiment run labelled
"""

from __future__ import annotations

import os
import subprocess

from testing.zookeeper import OWNER_LABEL, PREFIX


def _owner_alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def sweep_leftovers(all_owners: bool = False) -> int:
    """Remove `gstest-` containers, then networks, whose owning process is gone (or all of them)."""
    removed = 0
    for listing, remove in ((["ps", "-a"], ["rm", "-f"]), (["network", "ls"], ["network", "rm"])):
        out = subprocess.run(
            [
                "docker",
                *listing,
                "--filter",
                f"name=^{PREFIX}",
                "--format",
                f'{{{{.ID}}}} {{{{.Label "{OWNER_LABEL}"}}}}',
            ],
            capture_output=True,
            text=True,
        ).stdout
        for line in out.splitlines():
            object_id, _, owner = line.partition(" ")
            if all_owners or not _owner_alive(owner.strip()):
                subprocess.run(["docker", *remove, object_id], capture_output=True)
                removed += 1
    return removed


def remove_labelled(label: str, value: str) -> int:
    """Remove every `gstest-` container, then network, labelled `label=value`; how many."""
    removed = 0
    for listing, remove in ((["ps", "-a"], ["rm", "-f"]), (["network", "ls"], ["network", "rm"])):
        out = subprocess.run(
            ["docker", *listing, "--filter", f"name=^{PREFIX}", "--filter", f"label={label}={value}", "-q"],
            capture_output=True,
            text=True,
        ).stdout
        for object_id in out.split():
            subprocess.run(["docker", *remove, object_id], capture_output=True)
            removed += 1
    return removed
