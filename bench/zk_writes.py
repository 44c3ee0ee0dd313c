"""ZooKeeper's rate of transactions shaped as a coordinator node's OffsetCommit (`bench/scale_out.py`).

Each transaction is what `ZkAccess._commit` + `GroupData.commit_offsets` send for offsets that
exist: `check` of the shard's epoch, `check` of its leader znode, a `set_data` per partition.
Several kazoo clients in their own processes send them (one kazoo client tops out below
ZooKeeper: it is Python), 200 in flight each, all started together once set up.

    zk_commit_rate("127.0.0.1:2181", partitions=1, seconds=3.0)   # transactions/s
"""

from __future__ import annotations

import time
import uuid

from coordinator.layout import epoch_path, leader_path


def zk_commit_rate(zk_connect: str, partitions: int, seconds: float, clients: int = 3) -> float:
    """Commit-shaped transactions/s that ZooKeeper takes from `clients` kazoo clients."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    ready, counts = ctx.Barrier(clients), ctx.Queue()
    procs = [
        ctx.Process(target=_zk_commits, args=(zk_connect, partitions, seconds, ready, counts))
        for _ in range(clients)
    ]
    for p in procs:
        p.start()
    total = sum(counts.get(timeout=120) for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


def _zk_commits(zk_connect: str, partitions: int, seconds: float, ready, counts) -> None:
    """One client's transactions, 200 in flight, for `seconds` once every client is ready; puts how
    many committed on `counts`."""
    from core.zk import connect

    zk = connect(f"{zk_connect}/bench-scale-zk-{uuid.uuid4().hex[:8]}")
    try:
        zk.ensure_path(epoch_path(0))
        zk.create(leader_path(0), b"{}", ephemeral=True)
        epoch = zk.exists(epoch_path(0)).version
        paths = [[f"/offsets/{slot}/{p}" for p in range(partitions)] for slot in range(200)]
        zk.ensure_path("/offsets")
        for n, slot in enumerate(paths):
            txn = zk.transaction()
            txn.create(f"/offsets/{n}")
            for path in slot:
                txn.create(path)
            txn.commit()
        data = b'{"offset":123456,"metadata":"","generation":3,"commit_ts":1732170000000,"expire_ts":null}'

        def one(slot: list[str]):
            txn = zk.transaction()
            txn.check(epoch_path(0), epoch)
            txn.check(leader_path(0), -1)
            for path in slot:
                txn.set_data(path, data)
            return txn.commit_async()

        ready.wait(60)
        done, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            for r in [one(slot) for slot in paths]:
                assert not any(isinstance(x, Exception) for x in r.get(timeout=30))
            done += len(paths)
        counts.put(done)
    finally:
        zk.stop()
        zk.close()
