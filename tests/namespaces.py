"""A test's own ZooKeeper namespace: a chroot named for the test, removed when the test ends.

    connect = f"{hosts}/{chroot_for('test_x')}"     # host:port/t-test_x-1a2b3c4d
    ... the test works below it (and may add siblings named `<chroot>-<suffix>`) ...
    remove_namespace(connect)                       # the chroot and its siblings, pipelined

A test reads and cleans only its own namespace, so the server holds what the running tests hold,
never what every earlier test left behind.
"""

from __future__ import annotations

import time
import uuid

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError, NotEmptyError

from testing.zookeeper import SUPER_AUTH

TIMEOUT_S = 30.0
# A test that leaves a process writing into its namespace keeps re-creating znodes; past this the
# teardown fails and says so instead of looping.
REMOVE_WITHIN_S = 20.0


def chroot_for(name: str) -> str:
    """`t-<name>-<8 hex>`: the name made of letters, digits and `_` (at most 60 of them)."""
    clean = "".join(ch if ch.isalnum() else "_" for ch in name)[:60]
    return f"t-{clean}-{uuid.uuid4().hex[:8]}"


def _subtree(client: KazooClient, root: str) -> list[list[str]]:
    """The levels of `root`'s subtree, root first; each level's listings are pipelined."""
    levels = [[root]]
    while levels[-1]:
        pending = [(p, client.get_children_async(p)) for p in levels[-1]]
        below = []
        for path, got in pending:
            try:
                below += [f"{path}/{c}" for c in got.get(timeout=TIMEOUT_S)]
            except NoNodeError:
                pass
        levels.append(below)
    return levels[:-1]


def remove_tree(client: KazooClient, root: str) -> None:
    """Delete `root` and everything below it, deepest level first, each level's deletes pipelined."""
    deadline = time.monotonic() + REMOVE_WITHIN_S
    while True:
        try:
            for level in reversed(_subtree(client, root)):
                pending = [client.delete_async(p) for p in level]
                for ar in pending:
                    try:
                        ar.get(timeout=TIMEOUT_S)
                    except NoNodeError:
                        pass
            return
        except NoAuthError:
            raise AssertionError(
                f"{root} holds znodes whose ACL lets only their owner delete them: "
                "the test that made them must delete them"
            ) from None
        except NotEmptyError:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{root} kept getting new znodes for {REMOVE_WITHIN_S:g} s after the test: "
                    "a process or client it started is still writing there"
                ) from None


def remove_namespace(connect: str) -> None:
    """Delete the top-level znode of `connect`'s chroot (`host:port/top[/...]`) with everything
    below it, and its siblings named `<top>-...`."""
    hosts, _, chroot = connect.partition("/")
    top = chroot.split("/", 1)[0]
    assert top, f"{connect!r} names no chroot: refusing to delete a whole server"
    # As the test servers' super user: a namespace whose znodes carry ACLs (tests of
    # --zk-auth-file) is deleted too.
    client = KazooClient(hosts=hosts, timeout=10.0, auth_data=SUPER_AUTH)
    client.start(timeout=10)
    try:
        for name in client.get_children("/"):
            if name == top or name.startswith(top + "-"):
                remove_tree(client, "/" + name)
    finally:
        client.stop()
        client.close()
