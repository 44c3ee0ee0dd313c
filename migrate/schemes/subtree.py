"""A watch on a whole subtree of ZooKeeper: did anything below a path change since it was set?

ZooKeeper 3.6's persistent recursive watch (`addWatch`, mode 1) reports every znode created,
changed or deleted below a path for as long as the client's connection lasts. kazoo has no call
for it, so the request is built here on kazoo's serialisation (as `zkmulti.MultiRead` is), and
its events, which kazoo would drop (it knows no watcher for their paths), are seen by a hook on
the client's connection.

The watch proves that nothing changed only while it is `trusted`: ZooKeeper acknowledged it on a
server known to be 3.6+ (one that answered a multiRead: a 3.5 server acknowledges a request it
does not know without doing it), and the connection was never interrupted since it was set (a
reconnected client does not get it back). Events and answers come in the order ZooKeeper
applied them, so once the answer to a later request is in, every change made before that
request was served has been seen.

    w = watch(zk, "/consumers/billing/offsets")    # before the subtree is read (`zkio.read`: ("watch", path))
    ... read it, work, then any round trip ...
    w.changed       # (event type, path) of the first change seen below the path, or None
    w.trusted()     # and whether the watch proves that none was missed
    w.close()
"""

from __future__ import annotations

import threading
from collections import namedtuple

from kazoo.client import KazooClient
from kazoo.protocol.serialization import Watch, int_struct, write_string
from kazoo.protocol.states import KazooState

PERSISTENT_RECURSIVE = 1  # ZooDefs.AddWatchModes
ANY_WATCHER = 3  # WatcherType.Any, for RemoveWatches


class AddWatch(namedtuple("AddWatch", "path mode")):
    """ZooKeeper 3.6+'s addWatch (op 106); the answer has no body this client needs."""

    type = 106

    def serialize(self) -> bytearray:
        out = bytearray()
        out.extend(write_string(self.path))
        out.extend(int_struct.pack(self.mode))
        return out

    @classmethod
    def deserialize(cls, data, offset) -> bool:
        return True


class RemoveWatches(AddWatch):
    """removeWatches (op 18): the watches of this connection on `path` (`mode`: the watcher type)."""

    type = 18


class Subtree:
    """One watch on `path` and everything below it (`watch`)."""

    def __init__(self, zk: KazooClient, path: str):
        self.zk, self.path = zk, path
        self.full = (zk.chroot or "") + path
        self.changed: tuple[int, str] | None = None  # set by the connection's reader, in order
        self.interrupted = False
        self.closed = False
        self.answer = zk.handler.async_result()  # ZooKeeper's answer to the addWatch

    def trusted(self) -> bool:
        """True when no change below the path can have gone unseen since the watch was set."""
        proven = getattr(self.zk, "_groupshift_multi_read_proven", False)  # the server is 3.6+
        acknowledged = self.answer.ready() and self.answer.successful()
        return acknowledged and proven and not self.interrupted and not self.closed

    def __enter__(self) -> Subtree:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop seeing events; the server forgets the watch (not waited for)."""
        if self.closed:
            return
        self.closed = True
        _hook(self.zk).forget(self)
        if self.answer.ready() and self.answer.successful() and not self.interrupted:
            self.zk._call(RemoveWatches(self.full, ANY_WATCHER), self.zk.handler.async_result())


def watch(zk: KazooClient, path: str) -> Subtree:
    """Set a watch on `path` and below (sent now, acknowledged with the next answers): the first
    request of a batch, so that the reads after it are covered."""
    sub = Subtree(zk, path)
    _hook(zk).add(sub)
    zk._call(AddWatch(sub.full, PERSISTENT_RECURSIVE), sub.answer)
    return sub


class _Hook:
    """A client's live subtree watches: sees the events on its connection and its interruptions."""

    def __init__(self, zk: KazooClient):
        self.lock = threading.Lock()
        self.subtrees: list[Subtree] = []
        connection = zk._connection
        original = connection._read_watch_event

        def read_watch_event(buffer, offset):
            event, _ = Watch.deserialize(buffer, offset)
            with self.lock:
                live = list(self.subtrees)
            for sub in live:
                if sub.changed is None and (event.path == sub.full or event.path.startswith(sub.full + "/")):
                    sub.changed = (event.type, event.path)
            return original(buffer, offset)

        connection._read_watch_event = read_watch_event  # kazoo reads each event through it
        zk.add_listener(self.on_state)

    def on_state(self, state: str) -> None:
        if state != KazooState.CONNECTED:  # suspended or lost: the watches are gone from the server
            with self.lock:
                for sub in self.subtrees:
                    sub.interrupted = True

    def add(self, sub: Subtree) -> None:
        with self.lock:
            self.subtrees.append(sub)

    def forget(self, sub: Subtree) -> None:
        with self.lock:
            if sub in self.subtrees:
                self.subtrees.remove(sub)


_hooks_lock = threading.Lock()


def _hook(zk: KazooClient) -> _Hook:
    with _hooks_lock:
        hook = getattr(zk, "_groupshift_subtree_hook", None)
        if hook is None:
            hook = zk._groupshift_subtree_hook = _Hook(zk)
        return hook
