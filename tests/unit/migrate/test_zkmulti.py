"""migrate.schemes.zkmulti: the multi and multiRead requests packed from tuples are the bytes kazoo
builds for the same ops, and their answers parse as kazoo would give them."""

from __future__ import annotations

import pytest
from kazoo.exceptions import BadVersionError, NoAuthError, NodeExistsError, RolledBackError
from kazoo.protocol.serialization import (
    CheckVersion,
    Create,
    Delete,
    GetChildren,
    GetData,
    MultiHeader,
    SetData,
    Transaction,
    int_struct,
    multiheader_struct,
    stat_struct,
    write_string,
)
from kazoo.protocol.states import ZnodeStat
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from migrate.schemes import zkmulti

OPS = [
    ("mkdir", "/groupshift/groups/g"),
    ("create", "/groupshift/groups/g/offsets/t/0", b'{"offset":5}'),
    ("ephemeral", "/groupshift/migration-locks/g", b"{}"),
    ("set", "/groupshift/migrations/g", b"rec", 7),
    ("delete", "/groupshift/migration-locks/g", 0),
    ("delete", "/x"),
    ("check", "/groupshift/shards/3/epoch", 12),
]


class _Client:
    """What `transaction` reads of a KazooClient: its chroot and default ACL."""

    def __init__(self, chroot: str, default_acl=None):
        self.chroot, self.default_acl = chroot, default_acl


def _kazoo_ops(chroot: str, acl) -> list:
    return [
        Create(chroot + "/groupshift/groups/g", b"", acl, 0),
        Create(chroot + "/groupshift/groups/g/offsets/t/0", b'{"offset":5}', acl, 0),
        Create(chroot + "/groupshift/migration-locks/g", b"{}", acl, 1),
        SetData(chroot + "/groupshift/migrations/g", b"rec", 7),
        Delete(chroot + "/groupshift/migration-locks/g", 0),
        Delete(chroot + "/x", -1),
        CheckVersion(chroot + "/groupshift/shards/3/epoch", 12),
    ]


@pytest.mark.parametrize("chroot", ["", "/prod/kafka"])
@pytest.mark.parametrize("acl", [None, [make_digest_acl("alice", "pw", all=True)]], ids=["open", "digest"])
def test_multi_is_kazoos_transaction(chroot, acl):
    txn = zkmulti.transaction(_Client(chroot, acl), OPS)
    want = Transaction(_kazoo_ops(chroot, acl or OPEN_ACL_UNSAFE)).serialize()
    assert txn.request.serialize() == bytes(want)


def test_an_unknown_op_is_refused():
    with pytest.raises(ValueError, match="unknown op 'rename'"):
        zkmulti.transaction(_Client(""), [("rename", "/a", "/b")])


@pytest.mark.parametrize("chroot", ["", "/prod"])
def test_multi_read_is_kazoos_ops(chroot):
    reads = [("get", "/a/b"), ("children", "/a"), ("get", "/"), ("children", "/é")]
    want = b"".join(
        bytes(MultiHeader(op.type, False, -1).serialize()) + bytes(op.serialize())
        for op in (
            GetData(chroot + "/a/b", None),
            GetChildren(chroot + "/a", None),
            GetData(chroot or "/", None),
            GetChildren(chroot + "/é", None),
        )
    ) + multiheader_struct.pack(-1, True, -1)
    assert zkmulti.MultiRead(chroot, reads).serialize() == want


STAT = tuple(range(1, 12))


def _answer(*parts: bytes, end: bool = True) -> bytes:
    return b"".join(parts) + (multiheader_struct.pack(-1, True, -1) if end else b"")


def _get(data: bytes) -> bytes:
    return multiheader_struct.pack(4, False, 0) + int_struct.pack(len(data)) + data + stat_struct.pack(*STAT)


def _error(code: int, op: int = -1) -> bytes:
    return multiheader_struct.pack(op, False, code) + int_struct.pack(code)


def test_multi_read_answers():
    names = write_string("0") + write_string("é")
    children = multiheader_struct.pack(8, False, 0) + int_struct.pack(2) + names
    empty = multiheader_struct.pack(4, False, 0) + int_struct.pack(-1) + stat_struct.pack(*STAT)
    results, error = zkmulti.MultiRead.deserialize(
        b"head" + _answer(_get(b"17"), children, _error(-101), empty), 4
    )
    assert error is None
    assert results == [(b"17", ZnodeStat(*STAT)), ["0", "é"], None, (b"", ZnodeStat(*STAT))]
    assert type(results[0][1]) is ZnodeStat and results[0][1].mzxid == 2


def test_multi_read_keeps_the_first_error_other_than_no_node():
    results, error = zkmulti.MultiRead.deserialize(_answer(_error(-101), _error(-102), _error(-103)), 0)
    assert results == [None, None, None] and isinstance(error, NoAuthError)


def test_a_multi_read_answer_cut_short_is_refused():
    with pytest.raises(Exception):  # noqa: B017 - struct.error or ValueError: never a partial list
        zkmulti.MultiRead.deserialize(_answer(_get(b"17"), end=False), 0)


def test_multi_answers():
    created = multiheader_struct.pack(1, False, 0) + write_string("/chroot/a")
    stat = multiheader_struct.pack(5, False, 0) + stat_struct.pack(*STAT)
    checked, deleted = multiheader_struct.pack(13, False, 0), multiheader_struct.pack(2, False, 0)
    assert zkmulti.Multi.deserialize(_answer(created, stat, checked, deleted), 0) == [
        True,
        ZnodeStat(*STAT),
        True,
        True,
    ]
    failed = zkmulti.Multi.deserialize(_answer(_error(0), _error(-110), _error(-103), _error(-2)), 0)
    assert [type(r) for r in failed[:3]] == [RolledBackError, NodeExistsError, BadVersionError]
