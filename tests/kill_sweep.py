"""Kill points for the migration engines' crash tests, chosen by checkpoint name.

A migration passes named checkpoints — `before:copy`, `frozen` (the lock and the record's first
write, with the first copy transaction), `copy:1` ... `copy:n`, `copied`, `before:done`, `done`
— and `migrate.migration.offline.passed` lists them
(`GROUPSHIFT_MIGRATE_EXIT_AT=k` ends a run at the k-th). A full sweep kills one run at the first
checkpoint of every name, and at the first and the last copy transaction: each step boundary of
the engine once, however many copy transactions a run makes. Spot checks kill at a few of them.

    offline.passed.clear(); offline.run(...); names = list(offline.passed)   # one run, in-process
    for k, name in every_named(names).items(): ...spawn a run with GROUPSHIFT_MIGRATE_EXIT_AT=k...
"""

from __future__ import annotations

# Where a second direction or a second target is checked: in the middle of the copy, just before
# the switch commits, and just after it.
SPOTS = ("copy:1", "before:done", "done")


def every_named(names: list[str]) -> dict[int, str]:
    """Checkpoint number (1-based) -> name: the first of every name; of the copies, the first and
    the last."""
    points: dict[int, str] = {}
    copies = [k for k, name in enumerate(names, 1) if name.startswith("copy:")]
    seen: set[str] = set()
    for k, name in enumerate(names, 1):
        if name.startswith("copy:"):
            continue
        if name not in seen:
            seen.add(name)
            points[k] = name
    for k in copies[:1] + copies[-1:]:
        points[k] = names[k - 1]
    return dict(sorted(points.items()))


def spots(names: list[str], wanted: tuple[str, ...] = SPOTS) -> dict[int, str]:
    """The checkpoints named in `wanted` (each must be passed by the run)."""
    points = {k: name for k, name in every_named(names).items() if name in wanted}
    missing = set(wanted) - set(points.values())
    assert not missing, f"the run passed no checkpoint named {sorted(missing)}: {names}"
    return points
