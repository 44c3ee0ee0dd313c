"""ZooKeeper access for the inspection tools: a connection that never creates anything, pipelined reads.

Read-only commands connect with `open_zk(connect)`: the chroot is never created, and a chroot
that does not exist is an error naming it. Reads of many znodes are pipelined (kazoo's async
calls, all sent before the first answer is awaited), so describing 10,000 partitions costs one
round trip per batch, not per znode. `Requests` counts what was sent, for the benchmark.

    zk = open_zk("127.0.0.1:2181/prod")
    datas = get_many(zk, ["/consumers/g/offsets/t/0", "/consumers/g/offsets/t/1"])
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterable, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from core.errors import GroupshiftError, ZooKeeperUnavailable
from core.zk import connect, parse_zk, resolve_zk

# Pipelined requests in flight at once (bounds client memory; ZooKeeper answers them in order).
PIPELINE = 2_000
REQUEST_TIMEOUT_S = 30.0

# Requests sent by this process, by kind (`get`, `children`, `multi`, ...): the benchmark prints it.
requests: Counter = Counter()


def open_zk(connect_string: str | None, *, connect_timeout: float = 10.0) -> KazooClient:
    """A started client on `--zk` (or its defaults); raises if the chroot does not exist. Creates nothing."""
    address = parse_zk(resolve_zk(connect_string))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kazoo warns about a missing chroot; we say it in one line below
        zk = connect(connect_string, connect_timeout=connect_timeout, create_chroot=False)
    if address.chroot:
        try:
            missing = zk.exists("/") is None
        except (KazooException, KazooTimeoutError) as exc:
            close(zk)
            raise ZooKeeperUnavailable(f"ZooKeeper at {address.hosts} did not answer: {exc!r}") from None
        if missing:
            close(zk)
            raise GroupshiftError(
                f"chroot {address.chroot} does not exist on ZooKeeper {address.hosts}; check --zk"
            )
    return zk


def close(zk: KazooClient) -> None:
    try:
        zk.stop()
    finally:
        zk.close()


def get_many(zk: KazooClient, paths: Sequence[str]) -> list[tuple[bytes, ZnodeStat] | None]:
    """`get` of every path, pipelined; None where the znode does not exist."""
    return _many(zk, paths, zk.get_async, "get")


def children_many(zk: KazooClient, paths: Sequence[str]) -> list[list[str] | None]:
    """`get_children` of every path, pipelined; None where the znode does not exist."""
    return _many(zk, paths, zk.get_children_async, "children")


def children(zk: KazooClient, path: str) -> list[str] | None:
    return children_many(zk, [path])[0]


def _many(zk: KazooClient, paths: Sequence[str], call, kind: str) -> list:
    out: list = []
    for start in range(0, len(paths), PIPELINE):
        chunk = paths[start : start + PIPELINE]
        pending = [call(p) for p in chunk]
        requests[kind] += len(chunk)
        for ar in pending:
            try:
                out.append(ar.get(timeout=REQUEST_TIMEOUT_S))
            except NoNodeError:
                out.append(None)
            except (KazooException, KazooTimeoutError) as exc:
                raise ZooKeeperUnavailable(f"ZooKeeper read failed: {exc!r}; is it up?") from None
    return out


def subtree_paths(zk: KazooClient, root: str) -> list[str]:
    """`root` and every descendant, children before parents (the order to delete them in)."""
    levels: list[list[str]] = [[root]]
    while levels[-1]:
        kids = children_many(zk, levels[-1])
        nxt = [f"{p}/{c}" for p, cs in zip(levels[-1], kids, strict=True) for c in (cs or [])]
        levels.append(nxt)
    return [p for level in reversed(levels) for p in level]


def chunked(items: Iterable, size: int) -> list[list]:
    items = list(items)
    return [items[i : i + size] for i in range(0, len(items), size)]
