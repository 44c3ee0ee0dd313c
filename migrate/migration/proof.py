"""What proves a migration's copy and an unchanged source, from what the run wrote and read (pure).

* **The copy.** A copy transaction that ZooKeeper applied wrote exactly its offsets (`multi` is
  all or nothing; an existing offset is set with the version read, so a writer in between fails
  it), and an OffsetCommit a node or broker answered without error stored them: what the last
  transaction or request wrote is proven without reading it back. The partitions it did not
  write (earlier transactions, or ones the destination already held) could have been written by
  someone else since, so they are read once after the copy (`read_back`): none for a group that
  fits one transaction.
* **The source.** The run reads the source once, with each offset znode's mzxid, and keeps the
  offsets as the snapshot. Before the switch it reads them again (`look.recheck`): a partition
  added, removed or written since — a commit changes the mzxid even when it writes the same
  offset — stops the run (`rewritten` compares the znodes as read, `source_moved` says which).
  A resumed run compares the offsets with the recorded snapshot (`snapshot_moved`; the record
  keeps no mzxids) and then goes on from its own read.
* **Why a second read, not `check` ops in the switch's `multi`.** A check of 1,000 versions
  costs ZooKeeper about twice what a multiRead of the same 1,000 znodes does (measured: docs/
  migrate.md#performance), and checks see no partition added; the read and a small write of the
  record cost less than the checks alone.

>>> from migrate.schemes.model import Committed
>>> from core.types import TopicPartition as TP
>>> a = {TP("t", 0): Committed(5, 0, 100), TP("t", 1): Committed(7, 0, 101)}
>>> moved(a, {TP("t", 0): Committed(5, 0, 100), TP("t", 1): Committed(7, 0, 140)})
[TopicPartition(topic='t', partition=1)]
>>> read_back(a, todo=[TP("t", 0), TP("t", 1)], batch=1)   # the last transaction wrote t-1
[TopicPartition(topic='t', partition=0)]
"""

from __future__ import annotations

from collections.abc import Iterable

from core.errors import GroupshiftError
from core.types import TopicPartition
from migrate.schemes import zkio
from migrate.schemes.model import Committed


def moved(
    before: dict[TopicPartition, Committed], now: dict[TopicPartition, Committed]
) -> list[TopicPartition]:
    """Partitions added, removed or written since `before` was read (another mzxid or offset)."""
    out = []
    for tp in sorted(set(before) | set(now)):
        was, is_ = before.get(tp), now.get(tp)
        if was is None or is_ is None or (was.order, was.offset) != (is_.order, is_.offset):
            out.append(tp)
    return out


def rewritten(before: zkio.Leaves, now: zkio.Leaves) -> bool:
    """Any offset znode of `before` written, removed or added since (another mzxid, another set)."""
    if now is before:  # not read again (a watch proved nothing changed)
        return False
    if before.leaves.keys() != now.leaves.keys():
        return True
    return any(stat.mzxid != now.leaves[key][1].mzxid for key, (_, stat) in before.leaves.items())


def read_back(
    want: Iterable[TopicPartition], todo: Iterable[TopicPartition], batch: int
) -> list[TopicPartition]:
    """The partitions of `want` that the copy of `todo`, `batch` a transaction (or request) in
    partition order, did not write in its last one: read them once after it."""
    todo = sorted(todo)
    last = set(todo[-(len(todo) % batch or batch) :]) if todo else set()
    return sorted(tp for tp in want if tp not in last)


def copy_differs(
    want: dict[TopicPartition, int], back: list[TopicPartition], have: dict[TopicPartition, int]
) -> GroupshiftError | None:
    """The refusal when partitions read back after the copy (`back`, found `have`) are not `want`'s."""
    bad = [tp for tp in back if have.get(tp) != want[tp]]
    if not bad:
        return None
    tp = bad[0]
    return GroupshiftError(
        f"{len(bad)} partition(s) differ after the copy ({tp.topic}-{tp.partition}: "
        f"source {want[tp]}, destination {have.get(tp)}); run again to copy them again, or roll back"
    )


def source_moved(
    group: str, scheme: str, before: dict[TopicPartition, Committed], now: dict[TopicPartition, Committed]
) -> GroupshiftError | None:
    """The refusal when the source changed since this run read it, else None."""
    changed = moved(before, now)
    if not changed:
        return None
    tp = changed[0]
    was, is_ = before.get(tp), now.get(tp)
    what = f"{_offset(was)} -> {_offset(is_)}" + (
        " (committed again)" if was and is_ and was.offset == is_.offset else ""
    )
    return _changed(group, scheme, len(changed), tp, what)


def snapshot_moved(
    group: str, scheme: str, snapshot: dict[TopicPartition, int], now: dict[TopicPartition, int]
) -> GroupshiftError | None:
    """The refusal when the source's offsets are not the recorded snapshot's, else None."""
    changed = [tp for tp in sorted(set(now) | set(snapshot)) if now.get(tp) != snapshot.get(tp)]
    if not changed:
        return None
    tp = changed[0]
    return _changed(group, scheme, len(changed), tp, f"{snapshot.get(tp)} -> {now.get(tp)}")


def _offset(c: Committed | None) -> int | None:
    return None if c is None else c.offset


def _changed(group: str, scheme: str, n: int, tp: TopicPartition, what: str) -> GroupshiftError:
    return GroupshiftError(
        f"the source group {group!r} ({scheme}) changed since it was frozen: {n} partition(s) "
        f"differ ({tp.topic}-{tp.partition}: {what}); a consumer committed "
        "meanwhile; stop it and roll back (`migrate rollback`), then migrate again"
    )
