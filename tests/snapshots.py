"""Before/after snapshots for "bad input changes nothing": a full ZooKeeper tree and a directory listing.

    before = zk_tree(zk_server.connect_string), dir_tree(data_dir)
    ... run the command that must be refused ...
    assert (zk_tree(zk_server.connect_string), dir_tree(data_dir)) == before

`zk_tree` reads from the server's root (not a chroot), so a command that writes outside the
namespace it was given is caught too. `/zookeeper` (the server's own quota/config tree) is left out.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kazoo.client import KazooClient


def zk_tree(hosts: str, root: str = "/") -> dict[str, tuple[bytes, int]]:
    """Every znode under `root` on `hosts` (no chroot): path -> (data, data version)."""
    hosts = hosts.split("/", 1)[0]
    client = KazooClient(hosts=hosts, timeout=10.0)
    client.start(timeout=10)
    try:
        out: dict[str, tuple[bytes, int]] = {}
        stack = [root]
        while stack:
            path = stack.pop()
            if path == "/zookeeper":
                continue
            data, stat = client.get(path)
            out[path] = (data, stat.version)
            base = "" if path == "/" else path
            stack.extend(f"{base}/{child}" for child in client.get_children(path))
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
