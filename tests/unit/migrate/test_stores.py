"""How the stores decode offset znodes as read: what counts as an offset, what is skipped."""

from __future__ import annotations

from kazoo.protocol.states import ZnodeStat

from coordinator.layout import OffsetZnode, encode_offset_znode
from core.types import TopicPartition as TP
from migrate.schemes import coordinator_store, zk_store, zkio
from migrate.schemes.model import Committed

STAT = ZnodeStat(1, 70, 2, 3000, 0, 0, 0, 0, 2, 0, 1)  # mzxid 70, mtime 3000


def test_scheme_one_offsets_are_decimal_znodes():
    leaves = {
        ("t", "0"): b"17",
        ("t", "1"): b" 18\n",
        ("t", "2"): b"-1",
        ("t", "3"): b"--5",  # int() would raise on these: skipped, not a crash
        ("t", "4"): b"+5",
        ("t", "5"): b"1_0",
        ("t", "6"): b"",
        ("t", "x"): b"9",  # not a partition
        ("é", "0"): b"4",
    }
    got = zk_store.offsets_of(zkio.Leaves(frozenset(), {k: (v, STAT) for k, v in leaves.items()}))
    assert got == {
        TP("t", 0): Committed(17, 3000, 70),
        TP("t", 1): Committed(18, 3000, 70),
        TP("t", 2): Committed(-1, 3000, 70),
        TP("é", 0): Committed(4, 3000, 70),
    }
    assert all(type(tp) is TP for tp in got)


def test_coordinator_offsets_decode_the_stored_record():
    record = encode_offset_znode(OffsetZnode(42, "meta", 3, 1234, None))
    leaves = {
        ("a%2Fb", "0"): (record, STAT),  # a topic name quoted as a znode name
        ("t", "1"): (encode_offset_znode(OffsetZnode(7, None, -1, 0, None)), STAT),  # no commit time: mtime
        ("t", "2"): (b"not json", STAT),
        ("t", "x"): (record, STAT),
    }
    got = coordinator_store.offsets_of(zkio.Leaves(frozenset(), leaves))
    assert got == {TP("a/b", 0): Committed(42, 1234, 70, "meta"), TP("t", 1): Committed(7, 3000, 70, "")}
    assert all(type(tp) is TP for tp in got)
