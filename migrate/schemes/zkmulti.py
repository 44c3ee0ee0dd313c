"""ZooKeeper's multi (op 14) and multiRead (op 22) requests, serialised straight from plain tuples.

kazoo builds a transaction op by op: a namedtuple per op, its path normalised and each op logged,
then serialised piece by piece in its connection thread. For a migration's copy of 1,000 offsets
that was a third of the run's Python time. Here a transaction's ops are the tuples `zk_store.run_ops`
takes (("create", path, data), ("set", path, data, version), ...), packed into the request's bytes
at once, in the caller's thread; the answer is parsed with one struct call per field. Both go
through kazoo's connection (`KazooClient._call`) like any other request: its session, its
ordering, its errors.

    results = transaction(zk, [("create", "/a", b"1"), ("check", "/b", 3)]).commit()
    # [True, True], or per op the kazoo exception (RolledBackError for the ops a failure undid)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import EXCEPTIONS, NoNodeError
from kazoo.protocol.serialization import int_struct, multiheader_struct, stat_struct
from kazoo.protocol.states import ZnodeStat
from kazoo.security import OPEN_ACL_UNSAFE

# ZooKeeper's op codes (org.apache.zookeeper.ZooDefs.OpCode).
CREATE, DELETE, SET_DATA, CHECK, GET_DATA, GET_CHILDREN = 1, 2, 5, 13, 4, 8
EPHEMERAL = 1  # CreateMode's flag
REQUEST_TIMEOUT_S = 30.0

_int, _stat = int_struct.pack, stat_struct.unpack_from
_unpack_int, _header = int_struct.unpack_from, multiheader_struct.unpack_from
_HEADER, _STAT = multiheader_struct.size, stat_struct.size
_END = multiheader_struct.pack(-1, True, -1)
_OP_HEADER = {op: multiheader_struct.pack(op, False, -1) for op in (CREATE, DELETE, SET_DATA, CHECK)}
_READ_OP = {"get": GET_DATA, "children": GET_CHILDREN}
_head_int = struct.Struct(">i?ii")  # a multi header and the int after it
_HEAD_INT = _head_int.size


def chrooted(chroot: str, path: str) -> str:
    """`path` below the client's chroot, as kazoo sends it."""
    return chroot + path if path != "/" or not chroot else chroot


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return _int(len(b)) + b


def _acl_bytes(acl) -> bytes:
    """A create's ACL vector: the client's default ACL (secured clients set one), else open."""
    acl = acl or OPEN_ACL_UNSAFE
    return _int(len(acl)) + b"".join(_int(a.perms) + _string(a.id.scheme) + _string(a.id.id) for a in acl)


class Multi:
    """A `multi` of op tuples, its request bytes built once (`transaction`)."""

    type = 14

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def serialize(self) -> bytes:
        return self.payload

    @staticmethod
    def deserialize(data, offset) -> list:
        """Per op: True (create, delete, check), the new ZnodeStat (set), or the kazoo exception
        (RolledBackError for the ops a failing one undid)."""
        results: list = []
        append = results.append
        while True:
            kind, done, _ = _header(data, offset)
            offset += _HEADER
            if done:
                return results
            if kind == CREATE:
                (n,) = _unpack_int(data, offset)
                offset += 4 + max(n, 0)
                append(True)
            elif kind == SET_DATA:
                append(ZnodeStat._make(_stat(data, offset)))
                offset += _STAT
            elif kind in (DELETE, CHECK):
                append(True)
            elif kind == -1:
                (code,) = _unpack_int(data, offset)
                offset += 4
                append(EXCEPTIONS[code]())
            else:
                raise ValueError(f"unexpected multi result type {kind}")


class Transaction:
    """A built `multi`, not yet sent (`commit` sends it and waits for its results)."""

    def __init__(self, zk: KazooClient, payload: bytes) -> None:
        self.zk, self.request = zk, Multi(payload)

    def commit(self) -> list:
        """The per-op results; kazoo's connection and session errors raise, as kazoo's commit does."""
        ar = self.zk.handler.async_result()
        self.zk._call(self.request, ar)
        return ar.get(timeout=REQUEST_TIMEOUT_S)


def transaction(zk: KazooClient, ops: Sequence[tuple]) -> Transaction:
    """The `multi` of `ops`: ("create", path, data), ("ephemeral", path, data), ("mkdir", path),
    ("set", path, data, version), ("delete", path[, version]), ("check", path, version)."""
    chroot = zk.chroot or ""
    acl = flags = None
    parts: list[bytes] = []
    add = parts.append
    create, put = _OP_HEADER[CREATE], _OP_HEADER[SET_DATA]
    for op in ops:
        kind = op[0]
        path = chrooted(chroot, op[1]).encode("utf-8")
        if kind in ("create", "mkdir", "ephemeral"):
            if acl is None:
                acl, flags = _acl_bytes(zk.default_acl), (_int(0), _int(EPHEMERAL))
            data = b"" if kind == "mkdir" else op[2]
            add(
                b"".join(
                    (create, _int(len(path)), path, _int(len(data)), data, acl, flags[kind == "ephemeral"])
                )
            )
        elif kind == "set":
            add(b"".join((put, _int(len(path)), path, _int(len(op[2])), op[2], _int(op[3]))))
        elif kind in ("delete", "check"):
            version = op[2] if len(op) > 2 else -1
            add(
                b"".join(
                    (_OP_HEADER[DELETE if kind == "delete" else CHECK], _int(len(path)), path, _int(version))
                )
            )
        else:
            raise ValueError(f"unknown op {kind!r}")
    add(_END)
    return Transaction(zk, b"".join(parts))


class MultiRead:
    """ZooKeeper 3.6+'s multiRead: many getData/getChildren in one request, answered per op."""

    type = 22

    def __init__(self, chroot: str, reads: Sequence[tuple[str, str]]) -> None:
        parts: list[bytes] = []
        add, pack, ops = parts.append, _head_int.pack, _READ_OP
        for kind, path in reads:
            b = chrooted(chroot, path).encode("utf-8")
            add(pack(ops[kind], False, -1, len(b)) + b + b"\x00")  # the op's header, its path, no watch
        add(_END)
        self.payload = b"".join(parts)

    def serialize(self) -> bytes:
        return self.payload

    @staticmethod
    def deserialize(data, offset) -> tuple[list, Exception | None]:
        """(per read: (data, ZnodeStat), [child names], or None for a znode that does not exist;
        the first other error, a kazoo exception, or None)."""
        results: list = []
        append, new, error = results.append, tuple.__new__, None  # a ZnodeStat without `_make`'s frame
        head, last = _head_int.unpack_from, len(data) - _head_int.size
        while offset <= last:
            # Every answer is a header and an int: a value's length, a listing's count, an error's code.
            kind, done, _, n = head(data, offset)
            if done:
                break
            offset += _HEAD_INT
            if kind == GET_DATA:
                if n > 0:
                    value = data[offset : offset + n]
                    offset += n
                else:
                    value = b""
                append((value, new(ZnodeStat, _stat(data, offset))))
                offset += _STAT
            elif kind == GET_CHILDREN:
                names = []
                for _ in range(n):
                    (size,) = _unpack_int(data, offset)
                    names.append(data[offset + 4 : offset + 4 + size].decode("utf-8"))
                    offset += 4 + size
                append(names)
            elif kind == -1:
                append(None)
                if n != NoNodeError.code and error is None:
                    error = EXCEPTIONS[n]()
            else:
                raise ValueError(f"unexpected multiRead result type {kind}")
        if not _header(data, offset)[1]:
            raise ValueError("a multiRead answer without its end")
        return results, error
