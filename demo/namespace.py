"""The demos' namespace: a ZooKeeper chroot and a log directory of their own, deleted at the end.

Both demos (`demo.main_job`, `demo.compare`) run in one: a fresh ZooKeeper chroot
`<chroot>/groupshift-demo-<pid>-<random>` below the one they are given, holding their topic, groups
and coordinator nodes' registrations and shards, and a fresh log directory. An operator's
coordinator nodes, groups and topics on the same ZooKeeper are in other namespaces and neither see
a demo nor disturb it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError

from core.errors import GroupshiftError
from core.zk import connect, parse_zk


class DemoNamespace:
    """The demo's own ZooKeeper chroot and log directory; `close()` deletes both.

    with DemoNamespace("127.0.0.1:2181/team") as ns:
        ns.zk_connect    # "127.0.0.1:2181/team/groupshift-demo-4242-1a2b3c"
        ns.data          # a fresh directory under the system temp dir (or `data_parent`)

    Parents of the chroot that did not exist are created, and removed again on close when empty.
    """

    def __init__(self, zk_connect: str, data_parent: Path | None = None):
        if data_parent is not None and not Path(data_parent).is_dir():
            raise GroupshiftError(f"demo: {data_parent} is not a directory; create it or pass another one")
        address = parse_zk(zk_connect)
        self.name = f"groupshift-demo-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.hosts = address.hosts
        self.chroot = address.with_chroot(self.name).chroot
        self.zk_connect = self.hosts + self.chroot
        self._root = connect(self.hosts)
        self._created: list[str] = []
        self._closed = False
        try:
            path = ""
            for part in self.chroot.strip("/").split("/"):
                path += "/" + part
                try:
                    self._root.create(path)
                    self._created.append(path)
                except NodeExistsError:
                    if path == self.chroot:
                        raise GroupshiftError(f"demo: {path} already exists; run the demo again") from None
            self.data = Path(tempfile.mkdtemp(prefix=self.name + "-", dir=data_parent))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Delete the chroot (with what any demo process left in it) and the log directory."""
        if self._closed:
            return
        self._closed = True
        data = getattr(self, "data", None)
        if data is not None:
            shutil.rmtree(data, ignore_errors=True)
        try:
            for path in reversed(self._created):
                for _ in range(20):  # a closing session may still be dropping its ephemeral nodes
                    try:
                        self._root.delete(path, recursive=path == self.chroot)
                        break
                    except NoNodeError:
                        break
                    except NotEmptyError:
                        if path != self.chroot:
                            break  # a parent someone else now uses: not ours to delete
                        time.sleep(0.1)
        finally:
            self._root.stop()
            self._root.close()

    def __enter__(self) -> DemoNamespace:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
