"""ZooKeeper access for the inspection tools: a connection that never creates anything, pipelined reads.

Read-only commands connect with `open_zk(connect)`: the chroot is never created, and a chroot
that does not exist is an error naming it. Reads of many znodes use ZooKeeper 3.6+'s
multiRead (1,000 getData or getChildren per request, mixed; kazoo has no call for it, so the
request is packed by `zkmulti.MultiRead`), and on older servers kazoo's async calls, all
sent before the first answer is awaited: describing 10,000 partitions costs ten requests.

Reads that depend on earlier ones (list the topics, then their partitions, then read the
offsets) are *readers*: generators that yield the reads of one round and get their results back
(`leaves_reader`). `staged` runs several side by side, each round of all of them in one batch,
so reading both sides of a migration costs the rounds of one. `requests` counts what was sent,
for the benchmark.

    zk = open_zk("127.0.0.1:2181/prod")
    datas = get_many(zk, ["/consumers/g/offsets/t/0", "/consumers/g/offsets/t/1"])
    src, dst = staged(zk, leaves_reader("/consumers/a/offsets"), leaves_reader("/consumers/b/offsets"))
"""

from __future__ import annotations

import threading
from collections import Counter, namedtuple
from collections.abc import Generator, Iterable, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, ZnodeStat

from core.errors import ZooKeeperUnavailable
from core.zk import ENV_GIVE_UP_MS, connect, env_seconds
from migrate.schemes import subtree
from migrate.schemes.zkmulti import MultiRead

# Pipelined requests in flight at once (bounds client memory; ZooKeeper answers them in order).
PIPELINE = 2_000
REQUEST_TIMEOUT_S = 30.0
# A command gives up when ZooKeeper stops answering in its middle for this long (kazoo would
# otherwise queue the next request until ZooKeeper is back, however long that takes);
# `$GROUPSHIFT_ZK_GIVE_UP_MS` overrides it (see `give_up_after`).
GIVE_UP_AFTER_S = 15.0

# Requests sent by this process, by kind (`get`, `children`, `multi`, ...): the benchmark prints it.
requests: Counter = Counter()


def open_zk(
    connect_string: str | None,
    *,
    connect_timeout: float = 10.0,
    give_up_after_s: float | None = -1.0,
) -> KazooClient:
    """A started client on `--zk` (or its defaults); a missing chroot is refused
    (`core.zk.ChrootMissing`), never created. When the connection is lost for `give_up_after_s`
    in the middle of the command, the client is stopped: the request waiting for ZooKeeper fails
    (`gave_up(client)` is then true) instead of waiting forever. A long-lived command (`groups
    watch`) passes None: it waits for ZooKeeper to come back, however long that takes. The default
    (-1) is `give_up_after()`."""
    if give_up_after_s is not None and give_up_after_s < 0:
        give_up_after_s = give_up_after()
    client = connect(connect_string, connect_timeout=connect_timeout, create_chroot=False)
    if give_up_after_s is not None:
        _give_up_when_away(client, give_up_after_s)
    return client


def give_up_after() -> float:
    """Seconds a one-shot command waits for ZooKeeper to answer again: `$GROUPSHIFT_ZK_GIVE_UP_MS`,
    else `GIVE_UP_AFTER_S`."""
    return env_seconds(ENV_GIVE_UP_MS, GIVE_UP_AFTER_S)


def gave_up(client: KazooClient) -> float | None:
    """Seconds the command waited before giving up on ZooKeeper, or None."""
    return getattr(client, "_groupshift_gave_up", None)


def _give_up_when_away(client: KazooClient, seconds: float) -> None:
    suspensions = [0]

    def check(n: int) -> None:
        if suspensions[0] == n and not client.connected:
            client._groupshift_gave_up = seconds
            client.stop()  # fails every queued request with ConnectionLoss

    def on_state(state: str) -> None:
        if state == KazooState.CONNECTED:
            suspensions[0] += 1
            return
        suspensions[0] += 1
        timer = threading.Timer(seconds, check, args=(suspensions[0],))
        timer.daemon = True
        timer.start()

    client.add_listener(on_state)


def close(zk: KazooClient) -> None:
    try:
        zk.stop()
    finally:
        zk.close()


# One read: ("get", path) -> (data, stat), or ("children", path) -> [names]; None: no such znode;
# ("watch", path) -> a `subtree.Subtree`.
Read = tuple[str, str]
# A reader: yields the reads of a round, is sent their results, returns what it read.
Reader = Generator[list[Read], list, object]


def get_many(zk: KazooClient, paths: Sequence[str]) -> list[tuple[bytes, ZnodeStat] | None]:
    """`get` of every path, pipelined; None where the znode does not exist."""
    return read(zk, [("get", p) for p in paths])


def get_existing(zk: KazooClient, paths: Sequence[str]) -> list[tuple[bytes, ZnodeStat] | None]:
    """`get_many`, reading only the znodes their parent lists: a path whose parent is absent or
    does not list it costs nothing beyond one listing per parent (a fresh destination)."""
    parents = sorted({p.rsplit("/", 1)[0] for p in paths})
    listed = {d: set(kids or ()) for d, kids in zip(parents, children_many(zk, parents), strict=True)}
    exist = [p for p in paths if p.rsplit("/", 1)[1] in listed[p.rsplit("/", 1)[0]]]
    got = dict(zip(exist, get_many(zk, exist), strict=True))
    return [got.get(p) for p in paths]


def children_many(zk: KazooClient, paths: Sequence[str]) -> list[list[str] | None]:
    """`get_children` of every path, pipelined; None where the znode does not exist."""
    return read(zk, [("children", p) for p in paths])


def children(zk: KazooClient, path: str) -> list[str] | None:
    return children_many(zk, [path])[0]


def read(zk: KazooClient, reads: Sequence[Read]) -> list:
    """Every read's result, in order (gets and listings mixed), pipelined; None where the znode
    does not exist. A ("watch", path) read sets a `subtree.Subtree` watch on the path before the
    others are sent (it covers them) and returns it."""
    if not reads:
        return []
    if any(kind == "watch" for kind, _ in reads):
        watches = {i: subtree.watch(zk, p) for i, (kind, p) in enumerate(reads) if kind == "watch"}
        requests["watches"] += len(watches)
        rest = iter(read(zk, [r for r in reads if r[0] != "watch"]))
        return [watches[i] if i in watches else next(rest) for i in range(len(reads))]
    requests["znodes read"] += len(reads)
    if len(reads) > 1 and getattr(zk, "_groupshift_multi_read", True):
        try:
            return _multi_read(zk, reads)
        except NoAuthError:
            raise  # an ACL refuses this client: the command says so (a plain read would too)
        except (KazooException, KazooTimeoutError, ValueError):
            zk._groupshift_multi_read = False  # a server before 3.6: one request per znode, pipelined
    out: list = []
    for start in range(0, len(reads), PIPELINE):
        chunk = reads[start : start + PIPELINE]
        pending = [(zk.get_async if kind == "get" else zk.get_children_async)(p) for kind, p in chunk]
        for kind, _ in chunk:
            requests["children" if kind == "children" else "get"] += 1
        for ar in pending:
            try:
                out.append(ar.get(timeout=REQUEST_TIMEOUT_S))
            except NoNodeError:
                out.append(None)
            except NoAuthError:
                raise
            except (KazooException, KazooTimeoutError) as exc:
                raise ZooKeeperUnavailable(f"ZooKeeper read failed: {exc!r}; is it up?") from None
    return out


def staged(zk: KazooClient, *readers: Reader) -> list:
    """Run `readers` side by side (`together`); their return values, in order."""
    return _drive(zk, together(*readers))


def _drive(zk: KazooClient, reader: Reader):
    try:
        reads = next(reader)
        while True:
            reads = reader.send(read(zk, reads))
    except StopIteration as done:
        return done.value


def together(*readers: Reader) -> Generator[list[Read], list, list]:
    """A reader of several: each round, the reads every unfinished one asks for, in one batch;
    returns their return values, in order."""
    out: list = [None] * len(readers)
    asked: dict[int, list[Read]] = {}
    for i, r in enumerate(readers):
        try:
            asked[i] = next(r)
        except StopIteration as done:
            out[i] = done.value
    while asked:
        got = yield [one for reads in asked.values() for one in reads]
        nxt: dict[int, list[Read]] = {}
        at = 0
        for i, reads in asked.items():
            part, at = got[at : at + len(reads)], at + len(reads)
            try:
                nxt[i] = readers[i].send(part)
            except StopIteration as done:
                out[i] = done.value
        asked = nxt
    return out


def read_all(reads: list[Read]) -> Generator[list[Read], list, list]:
    """Reader of `reads`, in one round."""
    return (yield reads)


def result(value):
    """Reader that reads nothing and returns `value`."""
    return value
    yield  # a generator: `together` and `staged` drive it like any reader


def no_leaves() -> Leaves:
    return Leaves(frozenset(), {})


def exists_reader(path: str) -> Generator[list[Read], list, bool]:
    """Reader: does `path` exist?"""
    return (yield [("get", path)])[0] is not None


class Leaves(namedtuple("Leaves", "dirs leaves")):
    """A two-level tree `<base>/<a>/<b>` as read: `dirs`, the paths of the znodes that exist among
    `base` and its children; `leaves`, (a, b) -> (data, stat) of every leaf."""


def leaves_reader(
    base: str, known: Iterable[tuple[str, str]] = (), only: Iterable[tuple[str, str]] | None = None
) -> Generator[list[Read], list, Leaves]:
    """Reader of the tree `<base>/<a>/<b>` (a group's offsets: topic, partition) -> `Leaves`.

    Three rounds (list `base`, list each child, read the leaves); with `known` leaves (read
    before), one round when nothing was added since: their values are read beside the listings,
    and only what the listings add costs more rounds. `only`: read no other leaves than these."""
    known = list(known)
    only = None if only is None else set(only)
    tops_known = sorted({a for a, _ in known})
    got = yield [
        ("children", base),
        *(("children", f"{base}/{a}") for a in tops_known),
        *(("get", f"{base}/{a}/{b}") for a, b in known),
    ]
    tops = got[0]
    listed = dict(zip(tops_known, got[1 : 1 + len(tops_known)], strict=True))
    values = dict(zip(known, got[1 + len(tops_known) :], strict=True))
    new_tops = [a for a in tops or () if a not in listed]
    if new_tops:
        listed.update(zip(new_tops, (yield [("children", f"{base}/{a}") for a in new_tops]), strict=True))
    dirs = {base} if tops is not None else set()
    dirs.update(f"{base}/{a}" for a in tops or () if listed[a] is not None)
    leaves = [(a, b) for a in tops or () for b in listed[a] or ()]
    if not values and only is None:  # a first read: every leaf, in one round
        got = (yield [("get", f"{base}/{a}/{b}") for a, b in leaves]) if leaves else []
        read = {leaf: v for leaf, v in zip(leaves, got, strict=True) if v is not None}
        return Leaves(frozenset(dirs), read)
    unread = [leaf for leaf in leaves if leaf not in values and (only is None or leaf in only)]
    if unread:
        values.update(zip(unread, (yield [("get", f"{base}/{a}/{b}") for a, b in unread]), strict=True))
    return Leaves(frozenset(dirs), {leaf: v for leaf in leaves if (v := values.get(leaf)) is not None})


MULTI_READ_OPS = 1_000  # ops per multiRead (answers of ~200 bytes each stay far below 1 MB)


def _multi_read(zk: KazooClient, reads: Sequence[Read]) -> list:
    chroot = zk.chroot or ""
    pending = []
    for chunk in chunked(reads, MULTI_READ_OPS):
        ar = zk.handler.async_result()
        zk._call(MultiRead(chroot, chunk), ar)
        pending.append(ar)
        requests["multiRead"] += 1
    out: list = []
    for ar in pending:
        answers, error = ar.get(timeout=REQUEST_TIMEOUT_S)
        zk._groupshift_multi_read_proven = True  # a 3.6+ server (`subtree` trusts its watches then)
        if error is not None:
            raise error
        out += answers
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


def ensure_shared(zk: KazooClient, paths: Sequence[str]) -> None:
    """Create the missing ones of `paths`, parents first: containers every group shares
    (`/consumers`, `/groupshift/groups`), made just before a group's own write so that writes
    of two groups at once do not fail on each other's creation of them."""
    for path, got in zip(paths, get_many(zk, paths), strict=True):
        if got is None:
            try:
                zk.create(path, b"")
            except NodeExistsError:
                pass
