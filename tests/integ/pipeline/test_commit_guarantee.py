"""The commit guarantee of `pipeline.Consumer`, under both rebalancers, on real ZooKeeper.

`commit()` either commits every record `poll()` returned since the previous commit, or raises
`CommitFailed` and the records are delivered again: never a silent partial commit.

The churn test runs real consumer processes (this module run as a script with `--worker`): three
consumers with auto-commit off, a fourth joining and one leaving while records flow. Each process
logs, per poll, the offset ranges it processed and whether `commit()` confirmed them. Across all
processes no record may be confirmed twice, and every record must be confirmed once by the end
(so every batch whose commit failed was delivered again and committed by someone).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

if __name__ == "__main__":  # the worker process: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import pytest

from coordinator.node.process import CoordinatorNodes
from core.errors import CommitFailed, GroupshiftError
from core.types import TopicPartition as TP
from pipeline.consumer import Consumer
from topics.log import Log
from topics.registry import create_topic

REPO = Path(__file__).resolve().parents[3]
PARTITIONS = 8
CHUNKS = 40  # the producer appends CHUNKS times ...
PER_CHUNK = 150  # ... this many records to every partition: 48,000 records in all
CHUNK_PAUSE = 0.12
PROCESSING_S = 0.08  # each batch takes this long to process: a rebalance can land in between


def worker_options(rebalancer: str, bootstrap: str | None) -> dict:
    opts: dict = dict(
        rebalancer=rebalancer,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=200,
        session_timeout_ms=6000,
        heartbeat_interval_ms=200,
        max_poll_interval_ms=30_000,
    )
    if rebalancer == "coordinator":
        opts["bootstrap"] = bootstrap
        opts["membership_options"] = {"retry_backoff_ms": 50}
    else:
        # fence_commits: scheme one's opt-in fix; without it a zombie's commit is written anyway.
        opts["membership_options"] = {
            "fence_commits": True,
            "rebalance_backoff_ms": 150,
            "rebalance_max_retries": 40,
        }
    return opts


# --- the consumer process ---------------------------------------------------------------------


def worker_main(spec: dict) -> None:
    """Poll, log the processed ranges, commit, log the outcome; stop on "stop" (or EOF) on stdin."""
    consumer = Consumer(
        spec["group"],
        [spec["topic"]],
        zk=spec["zk"],
        log=Log(spec["log"]),
        **worker_options(spec["rebalancer"], spec["bootstrap"]),
    )
    stop = threading.Event()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=read_stdin, daemon=True).start()
    print("started", flush=True)
    with open(spec["out"], "a") as out:

        def emit(**event) -> None:
            out.write(json.dumps(event) + "\n")
            out.flush()

        while not stop.is_set():
            got = consumer.poll_batches(timeout_ms=100)
            if not got:
                continue
            ranges = []
            for tp, batch in got.items():
                offsets = batch.column("offset").to_pylist()
                first, last = offsets[0], offsets[-1]
                assert last - first + 1 == len(offsets), f"{tp}: a batch with a gap"
                ranges.append([tp.partition, first, last + 1])
            emit(ev="processed", ranges=ranges)
            time.sleep(PROCESSING_S)
            try:
                consumer.commit()
            except CommitFailed as exc:
                emit(ev="failed", ranges=ranges, why=str(exc))
            else:
                emit(ev="committed", ranges=ranges, generation=consumer.generation)
        consumer.close()
        emit(ev="closed")


# --- the test ----------------------------------------------------------------------------------


class Proc:
    """One consumer process and its event log."""

    def __init__(self, name: str, spec: dict, tmp: Path):
        self.name = name
        self.out = tmp / f"{name}.jsonl"
        self.err = open(tmp / f"{name}.err", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", json.dumps({**spec, "out": str(self.out)})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
            cwd=REPO,
        )

    def wait_started(self) -> None:
        line = self.proc.stdout.readline()
        assert line.strip() == "started", f"{self.name} did not start: {self.stderr_tail()}"

    def events(self) -> list[dict]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.endswith("}")]

    def stop(self, timeout: float = 60) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(f"{self.name} did not stop: {self.stderr_tail()}") from None
        self.err.close()
        assert self.proc.returncode == 0, f"{self.name} exited {self.proc.returncode}: {self.stderr_tail()}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.err.close()

    def stderr_tail(self) -> str:
        self.err.flush()
        return "\n".join(Path(self.err.name).read_text().splitlines()[-20:])


def records(events: list[dict], kind: str) -> Counter:
    out: Counter = Counter()
    for e in events:
        if e["ev"] == kind:
            for p, start, end in e["ranges"]:
                out.update((p, o) for o in range(start, end))
    return out


def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


@pytest.mark.parametrize("rebalancer", ["zk", "coordinator"])
def test_no_record_is_committed_twice_or_never_under_churn(rebalancer, zk, zk_connect, tmp_path):
    root = tmp_path / "data"
    log = Log(root)
    create_topic(zk, "t", partitions=PARTITIONS)
    log.create("t", PARTITIONS)
    nodes = CoordinatorNodes(zk_connect, count=1) if rebalancer == "coordinator" else None
    if nodes is not None:
        nodes.__enter__()
    group = f"churn-{rebalancer}"
    spec = {
        "rebalancer": rebalancer,
        "zk": zk_connect,
        "bootstrap": nodes.bootstrap if nodes else None,
        "log": str(root),
        "group": group,
        "topic": "t",
    }
    procs = {n: Proc(n, spec, tmp_path) for n in ("c0", "c1", "c2")}
    churn: dict[str, int] = {}
    try:
        for p in procs.values():
            p.wait_started()
        for i in range(CHUNKS):
            for p in range(PARTITIONS):
                log.produce("t", [(b"k", f"{p}-{i}-{j}".encode()) for j in range(PER_CHUNK)], partition=p)
            if i == CHUNKS // 4:  # a fourth consumer joins while records flow
                procs["c3"] = Proc("c3", spec, tmp_path)
                procs["c3"].wait_started()
                churn["joined_at_chunk"] = i
            if i == CHUNKS // 2:  # ... and, once it is consuming, one of the first three leaves
                joiner = procs["c3"]
                wait_for(lambda j=joiner: records(j.events(), "committed"), 40, "the joiner committing")
                procs["c0"].stop()
                churn["left_at_chunk"] = i
            time.sleep(CHUNK_PAUSE)
        ends = {p: log.latest(TP("t", p)) for p in range(PARTITIONS)}
        everything = {(p, o) for p, end in ends.items() for o in range(end)}

        def all_committed() -> bool:
            done: set = set()
            for proc in procs.values():
                done.update(records(proc.events(), "committed"))
            return done >= everything

        wait_for(all_committed, 60, "every record committed")
        for name in ("c1", "c2", "c3"):
            procs[name].stop()
        probe = Consumer(
            group, [], rebalancer=rebalancer, zk=zk_connect, log=log, bootstrap=spec["bootstrap"]
        )
        try:
            group_offsets = probe.committed([TP("t", p) for p in range(PARTITIONS)])
        finally:
            probe.close()
    finally:
        for proc in procs.values():
            proc.kill()
        if nodes is not None:
            nodes.__exit__(None, None, None)

    events = {name: proc.events() for name, proc in procs.items()}
    committed: Counter = Counter()
    failed: Counter = Counter()
    for evs in events.values():
        committed.update(records(evs, "committed"))
        failed.update(records(evs, "failed"))
    twice = sorted(k for k, n in committed.items() if n > 1)
    never = sorted(everything - set(committed))
    batches_failed = sum(1 for evs in events.values() for e in evs if e["ev"] == "failed")
    print(
        f"{rebalancer}: {len(everything)} records, {sum(committed.values())} confirmed, "
        f"{batches_failed} commits refused (CommitFailed) covering {len(failed)} records, churn {churn}"
    )
    assert not twice, f"{len(twice)} records confirmed by two commits, e.g. {twice[:5]}"
    assert not never, f"{len(never)} records never confirmed, e.g. {never[:5]}"
    assert set(failed) <= set(committed)  # every refused batch was delivered again and committed
    assert set(committed) == everything
    # the churn overlapped the flow: the joiner and the leaver both committed records
    assert records(events["c3"], "committed") and records(events["c0"], "committed")
    assert any(e["ev"] == "closed" for e in events["c0"])
    assert churn["left_at_chunk"] < CHUNKS - 1
    assert group_offsets == {TP("t", p): end for p, end in ends.items()}  # the group is at the log end


# --- in one process: where each scheme changes the assignment ------------------------------------


FAST = dict(session_timeout_ms=1500, heartbeat_interval_ms=100, max_poll_interval_ms=10_000)


def topic_with_records(zk, root: Path, partitions: int, per_partition: int) -> Log:
    log = Log(root)
    create_topic(zk, "t", partitions=partitions)
    log.create("t", partitions)
    for p in range(partitions):
        log.produce("t", [(b"k", b"v")] * per_partition, partition=p)
    return log


def poll_until(consumer: Consumer, cond, what: str, timeout: float = 20) -> dict:
    got: dict = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for tp, rs in consumer.poll(50).items():
            got.setdefault(tp, []).extend(r.offset for r in rs)
        if cond(got):
            return got
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def test_scheme_one_commit_after_a_background_release_raises_and_the_records_come_again(
    zk, zk_connect, tmp_path
):
    log = topic_with_records(zk, tmp_path, partitions=2, per_partition=30)
    opts = dict(
        rebalancer="zk",
        zk=zk_connect,
        log=log,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        membership_options={"fence_commits": True, "rebalance_backoff_ms": 100, "rebalance_max_retries": 40},
        **FAST,
    )
    a = Consumer("g1", ["t"], **opts)
    b = None
    try:
        got = poll_until(a, lambda g: len(g) == 2, "records of both partitions")
        before = a.assignment()
        b = Consumer("g1", ["t"], **opts)  # scheme one: a's member releases on its own thread
        wait_for(lambda: a.assignment() != before, 30, "a's member to release its partitions")
        with pytest.raises(CommitFailed, match="changed hands"):
            a.commit()
        probe = a.committed([TP("t", 0), TP("t", 1)])
        assert probe == {TP("t", 0): None, TP("t", 1): None}  # nothing was committed
        wait_for(lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1, 30, "one partition each")
        (kept,) = a.assignment()
        again = poll_until(a, lambda g: kept in g, "a's partition again")
        assert again[kept][0] == 0 and got[kept][0] == 0  # its records are delivered again
    finally:
        a.close()
        if b is not None:
            b.close()


def test_scheme_three_changes_the_assignment_only_inside_poll_on_the_callers_thread(zk, zk_connect, tmp_path):
    log = topic_with_records(zk, tmp_path, partitions=2, per_partition=30)
    calls: list[tuple[str, int]] = []

    class Listener:
        def on_partitions_revoked(self, tps):
            calls.append(("revoked", threading.get_ident()))

        def on_partitions_assigned(self, tps):
            calls.append(("assigned", threading.get_ident()))

    with CoordinatorNodes(zk_connect, count=1) as nodes:
        opts = dict(
            rebalancer="coordinator",
            zk=zk_connect,
            log=log,
            bootstrap=nodes.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **FAST,
        )
        a = Consumer("g3", ["t"], listener=Listener(), **opts)
        b = Consumer("g3", ["t"], **opts)
        stop = threading.Event()
        b_got: dict = {}

        def poll_b():
            while not stop.is_set():
                for tp, rs in b.poll(50).items():
                    b_got.setdefault(tp, []).extend(r.offset for r in rs)

        poller = threading.Thread(target=poll_b, daemon=True)
        try:
            poll_until(a, lambda g: sum(map(len, g.values())) == 60, "a reads both partitions")
            before, generation = a.assignment(), a.generation
            poller.start()  # b joins; a's heartbeat thread learns that a rebalance started
            wait_for(lambda: a.membership._rejoin_needed, 20, "a's heartbeat to flag the rebalance")
            time.sleep(0.5)  # no poll: nothing may change
            assert a.assignment() == before and a.generation == generation
            a.commit()  # the caller commits before it gives anything up
            positions = {tp: a.position(tp) for tp in before}
            assert a.committed(list(before)) == positions
            wait_for(
                lambda: a.poll(50) is not None and len(a.assignment()) == 1, 30, "a rebalanced in poll()"
            )
            me = threading.get_ident()
            assert [k for k, _ in calls][-2:] == ["revoked", "assigned"]
            assert all(ident == me for _, ident in calls)  # the listener ran on the caller's thread
            wait_for(lambda: len(b.assignment()) == 1, 20, "b assigned")
            assert not b_got  # b starts at a's committed offsets: nothing to re-read
        finally:
            stop.set()
            if poller.is_alive():
                poller.join(30)
            a.close()
            b.close()


def test_a_slow_caller_within_max_poll_interval_stays_in_the_group(zk, zk_connect, tmp_path):
    log = topic_with_records(zk, tmp_path, partitions=2, per_partition=10)
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        c = Consumer(
            "gslow",
            ["t"],
            rebalancer="coordinator",
            zk=zk_connect,
            log=log,
            bootstrap=nodes.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **FAST,
        )
        try:
            poll_until(c, lambda g: sum(map(len, g.values())) == 20, "every record")
            generation = c.generation
            time.sleep(3 * FAST["session_timeout_ms"] / 1000)  # processing: heartbeats go on meanwhile
            c.commit()
            assert c.generation == generation
            assert c.committed([TP("t", 0), TP("t", 1)]) == {TP("t", 0): 10, TP("t", 1): 10}
        finally:
            c.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    try:
        worker_main(json.loads(ap.parse_args().worker))
    except GroupshiftError as exc:
        print(f"worker failed: {exc}", file=sys.stderr)
        sys.exit(1)
