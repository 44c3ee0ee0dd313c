"""Before/after snapshots for "bad input changes nothing": a test's ZooKeeper namespace and a directory.

    before = zk_tree(zk_connect), dir_tree(data_dir)
    ... run the command that must be refused ...
    assert (zk_tree(zk_connect), dir_tree(data_dir)) == before   # changes(b, a) says what differs

`zk_tree` reads the namespace its connect string names (the chroot; the whole server when there is
none): every znode's data and data version. Around it, it reads the names of the children of every
ancestor of the namespace up to the server's root, and the data and version of every znode at the
root. So a command that writes outside the namespace it was given is still caught — a stray znode
beside the namespace, in a parent or at the root, or new data on a top-level znode — while a
snapshot costs what the test's own namespace holds, not what other tests keep on the server.
Every level of the tree is read pipelined (all its requests in flight at once), as the test
servers' super user, so a tree whose znodes carry ACLs is read whole.
`/zookeeper` (the server's own quota/config tree) is left out.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from testing.zookeeper import SUPER_AUTH

TIMEOUT_S = 30.0


def _join(parent: str, child: str) -> str:
    return f"{'' if parent == '/' else parent}/{child}"


def _ancestors(namespace: str) -> list[str]:
    """`/`, `/a`, `/a/b` for `/a/b/c`; nothing for the root itself."""
    if namespace == "/":
        return []
    parts = namespace.strip("/").split("/")
    return ["/"] + ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def _read_level(client: KazooClient, paths: list[str]) -> list[tuple[bytes, int, list[str]] | None]:
    """data, data version and children of every path, pipelined; None where the znode is absent."""
    pending = [(client.get_async(p), client.get_children_async(p)) for p in paths]
    out: list[tuple[bytes, int, list[str]] | None] = []
    for got, kids in pending:
        try:
            data, stat = got.get(timeout=TIMEOUT_S)
            names = kids.get(timeout=TIMEOUT_S)
        except NoNodeError:
            out.append(None)
            continue
        out.append((data, stat.version, sorted(names)))
    return out


def zk_tree(connect: str, around: bool = True) -> dict[tuple[str, str], object]:
    """The namespace of `connect` (`host:port[/chroot]`) and, unless `around` is false, the names
    around it; see the module doc. Keys are `("znode", path)` -> `(data, version)` and
    `("children", ancestor)` -> names (None where the ancestor does not exist)."""
    hosts, slash, chroot = connect.partition("/")
    namespace = "/" + chroot.strip("/") if slash and chroot.strip("/") else "/"
    client = KazooClient(hosts=hosts, timeout=10.0, auth_data=SUPER_AUTH)  # reads znodes with ACLs too
    client.start(timeout=10)
    try:
        out: dict[tuple[str, str], object] = {}
        ancestors = _ancestors(namespace) if around else []
        for path, got in zip(ancestors, _read_level(client, ancestors), strict=True):
            out[("children", path)] = tuple(got[2]) if got else None
        if ancestors:  # the root's own znodes, with their data (the namespace is below one of them)
            top = [_join("/", c) for c in out[("children", "/")] or () if c != "zookeeper"]
            for path, got in zip(top, _read_level(client, top), strict=True):
                if got:
                    out[("znode", path)] = (got[0], got[1])
        level = [namespace]
        while level:
            below: list[str] = []
            for path, got in zip(level, _read_level(client, level), strict=True):
                if got is None:
                    continue
                out[("znode", path)] = (got[0], got[1])
                below += [_join(path, c) for c in got[2] if _join(path, c) != "/zookeeper"]
            level = below
        return out
    finally:
        client.stop()
        client.close()


def dir_tree(root: str | os.PathLike) -> dict[str, str]:
    """Every entry under `root`: relative path -> content digest for files, "dir" for directories."""
    root = Path(root)
    if not root.exists():
        return {}
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_dir():
            out[rel] = "dir"
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel] = "other"
    return out


def changes(before: dict, after: dict, limit: int = 10) -> list[str]:
    """What differs between two snapshots (of either kind), at most `limit` entries, for a failure message."""
    keys = sorted(set(before) | set(after), key=repr)
    diff = [f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in keys if before.get(k) != after.get(k)]
    return diff[:limit] + ([f"... and {len(diff) - limit} more"] if len(diff) > limit else [])
