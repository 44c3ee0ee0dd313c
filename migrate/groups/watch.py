"""`groups watch`: a window of commits per partition, kept in a local file (never in the group's znodes).

Each sample reads the group's committed offsets and the log end offsets; a commit is new when
its order (the offset znode's mzxid) changed since the last sample, as Burrow orders ZooKeeper
commits. Per partition the file keeps the last `status.WINDOW` commits and log end offsets, so
its size is bounded by the number of partitions (about 0.5 KB each).

    path = samples_path("zk", "billing", "127.0.0.1:2181/prod")
    state = WatchState.load(path)
    state.record(view, ends, now_ms)
    state.save(path)
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import msgspec

from core.errors import GroupshiftError
from core.scheme import Rebalancer
from core.types import TopicPartition
from migrate.groups.status import WINDOW, Commit
from migrate.schemes.model import GroupView, as_store

ENV_HOME = "GROUPSHIFT_HOME"


class PartitionWindow(msgspec.Struct):
    commits: list[tuple[int, int, int, int]] = msgspec.field(default_factory=list)  # offset, ts, order, lag
    ends: list[int] = msgspec.field(default_factory=list)


class WatchState(msgspec.Struct):
    scheme: str  # the store's spelling, as the file holds it: "zk" | "coordinator"
    group: str
    partitions: dict[str, PartitionWindow] = msgspec.field(default_factory=dict)  # "topic:partition"
    samples: int = 0
    last_ts: int = 0
    version: int = 1

    @classmethod
    def load(cls, path: Path, scheme: str | Rebalancer, group: str) -> WatchState:
        scheme = as_store(scheme).value
        if not path.exists():
            return cls(scheme, group)
        if path.is_dir():
            raise GroupshiftError(f"samples file {path} is a directory; pass a file with --samples")
        try:
            state = msgspec.json.decode(path.read_bytes(), type=cls)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise GroupshiftError(
                f"cannot read samples file {path} ({exc}); remove it or pass another --samples"
            ) from None
        if (state.scheme, state.group) != (scheme, group):
            raise GroupshiftError(
                f"samples file {path} holds group {state.group!r} ({state.scheme}), not {group!r} ({scheme})"
            )
        return state

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(msgspec.json.encode(self))
        os.replace(tmp, path)

    def record(self, view: GroupView, ends: dict[TopicPartition, int | None], now: int) -> int:
        """Add one sample; returns how many new commits it saw."""
        new = 0
        for tp in sorted(set(view.offsets) | {tp for tp, e in ends.items() if e is not None}):
            w = self.partitions.setdefault(key(tp), PartitionWindow())
            end = ends.get(tp)
            if end is not None:
                w.ends = (w.ends + [end])[-WINDOW:]
            c = view.offsets.get(tp)
            if c is not None and (not w.commits or w.commits[-1][2] != c.order):
                lag = max(0, end - c.offset) if end is not None else 0
                w.commits = (w.commits + [(c.offset, c.commit_ts, c.order, lag)])[-WINDOW:]
                new += 1
        self.samples += 1
        self.last_ts = now
        return new

    def window(self, tp: TopicPartition) -> tuple[list[Commit], list[int]]:
        w = self.partitions.get(key(tp))
        if w is None:
            return [], []
        return [Commit(o, ts, lag) for o, ts, _, lag in w.commits], list(w.ends)


def key(tp: TopicPartition) -> str:
    return f"{tp.topic}:{tp.partition}"


def samples_path(scheme: str | Rebalancer, group: str, zk: str, explicit: str | None = None) -> Path:
    """`--samples`, else `$GROUPSHIFT_HOME/watch/<scheme>-<group digest>-<zk digest>.json`."""
    if explicit:
        return Path(explicit)
    home = Path(os.environ.get(ENV_HOME, ".groupshift"))
    g = hashlib.sha1(group.encode()).hexdigest()[:12]
    z = hashlib.sha1(zk.encode()).hexdigest()[:8]
    return home / "watch" / f"{as_store(scheme).value}-{g}-{z}.json"
