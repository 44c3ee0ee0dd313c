"""Opt-in commit fencing for scheme one (`fence_commits`, docs/zk_rebalance.md, Opt-in fixes).

A version check on the owner node is not enough (a re-created node starts again at version 0),
so each partition gets a persistent epoch znode `/consumers/<g>/owner_epochs/<t>/<p>`. A claim
creates the ephemeral owner node *and* bumps the epoch in one `multi`; the epoch is the new
version. A commit is `multi(check(epoch, my_epoch), setData(offset))`: a zombie whose partition
was claimed by someone else since fails instead of overwriting the new owner's offset (S5).
Java 0.8 consumers ignore the extra nodes.

    epoch = claim(calls, "g", tp, "g_c1-0")         # NodeExistsError if someone owns it
    write_offset(calls, "g", tp, 42, epoch)          # raises StaleEpoch once another member claimed
"""

from __future__ import annotations

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from core.types import TopicPartition
from zk_rebalance.layout import epoch_path, offset_path, owner_path
from zk_rebalance.zkclient import ZkCalls, failed


class StaleEpoch(Exception):
    """The partition's epoch moved on: another member claimed it after us."""


def claim(calls: ZkCalls, group: str, tp: TopicPartition, owner: str) -> int:
    """Create the owner node and bump the epoch atomically; returns the new epoch."""
    opath = owner_path(group, tp.topic, tp.partition)
    epath = epoch_path(group, tp.topic, tp.partition)
    for _ in range(3):

        def build(tx):
            tx.create(opath, owner.encode(), ephemeral=True)
            tx.set_data(epath, owner.encode())

        results = calls.multi(opath, build)
        if not failed(results):
            return results[1].version
        if isinstance(results[0], NodeExistsError):
            found = calls.read_maybe(opath)
            if found and found[0] == owner:  # our own claim from an interrupted attempt
                stat = calls.exists(epath)
                return stat.version if stat else 0
            raise results[0]
        if not any(isinstance(r, NoNodeError) for r in results):
            raise failed(results)[0]
        # First claim of this partition: the owners dir or the epoch node does not exist yet.
        calls.ensure(opath.rsplit("/", 1)[0])
        try:
            calls.create(epath, b"")
        except NodeExistsError:
            pass
    raise NoNodeError(epath)


def write_offset(calls: ZkCalls, group: str, tp: TopicPartition, offset: int, epoch: int):
    """Write the offset only while the epoch is still ours; returns the offset node's stat."""
    path = offset_path(group, tp.topic, tp.partition)
    epath = epoch_path(group, tp.topic, tp.partition)
    data = str(offset).encode()
    for create in (False, True, False):

        def build(tx, create=create):
            tx.check(epath, epoch)
            (tx.create if create else tx.set_data)(path, data)

        results = calls.multi(path, build)
        if not failed(results):
            return calls.exists(path) if create else results[1]
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            raise StaleEpoch(f"{tp}: epoch {epoch} is stale")
        if isinstance(results[1], NoNodeError):
            calls.ensure(path.rsplit("/", 1)[0])
        elif not isinstance(results[1], NodeExistsError):
            raise failed(results)[0]
    raise StaleEpoch(f"{tp}: could not write the offset under epoch {epoch}")
