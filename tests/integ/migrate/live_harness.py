"""The live-migration test harness: consumer processes, a producer, and the exactly-once checks.

`test_live.py` (scheme one -> three) and `test_live_server.py` (scheme one -> two) drive it: legacy
consumer processes consume while records are produced, the group is bridged, each is replaced by a
consumer of the destination scheme, and the run is finished. Every process logs what `poll()`
returned; every member logs each commit to the legacy offsets with its ZooKeeper order (mzxid)
and the partition's owner epoch. `check_commits` / `check_run` read those logs: per partition, the
commits in ZooKeeper order never move backwards, each epoch belongs to one member, the records
between two consecutive commits were all polled by the member that made the second, and no record
is in two successful commits.

Run as a script (`python tests/integ/migrate/live_harness.py SPEC`) this module is the consumer process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path

if __name__ == "__main__":  # the worker process: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


from core.errors import CommitFailed
from core.types import TopicPartition as TP
from tests import cli_fork
from tests.inspect_helpers import wait_for

REPO = Path(__file__).resolve().parents[3]
PARTITIONS = 6
SESSION_MS = 3000


# -- the consumer process ----------------------------------------------------------------------


def worker_main(spec: dict) -> None:
    """Poll, commit after every non-empty poll, log what was polled; close on SIGTERM."""
    from pipeline.consumer import Consumer
    from topics.log import Log

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if spec["rebalancer"] == "zk":
        options = {
            "fence_commits": True,
            "rebalance_backoff_ms": 150,
            "rebalance_max_retries": 50,
            "event_log": spec["events"],
        }
    else:
        options = {"retry_backoff_ms": 50, "bridge_event_log": spec["events"]}
    c = Consumer(
        spec["group"],
        [spec["topic"]],
        rebalancer=spec["rebalancer"],
        zk=spec["zk"],
        bootstrap=spec.get("bootstrap"),
        log=Log(spec["root"]),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=200,
        max_poll_records=50,
        membership_options=options,
        **({"incremental": spec["incremental"]} if "incremental" in spec else {}),  # scheme two's forms
    )
    with open(spec["out"], "a", buffering=1) as out:
        out.write(json.dumps({"member": c.membership.consumer_id, "pid": os.getpid()}) + "\n")
        while not stop.is_set():
            got = c.poll(timeout_ms=100)
            if not got:
                continue
            spans = {str(tp.partition): [rs[0].offset, rs[-1].offset + 1] for tp, rs in got.items() if rs}
            out.write(
                json.dumps({"polled": spans, "assigned": sorted(p.partition for p in c.assignment())}) + "\n"
            )
            try:
                c.commit()
                out.write(json.dumps({"committed": spans}) + "\n")
            except CommitFailed as exc:
                out.write(json.dumps({"commit_failed": str(exc)[:200]}) + "\n")
        c.close()
        out.write(json.dumps({"closed": True}) + "\n")


# -- the test's side ------------------------------------------------------------------------------


class Proc:
    def __init__(self, tmp: Path, name: str, spec: dict):
        self.name = name
        self.out = tmp / f"{name}.jsonl"
        self.events = tmp / f"{name}.events.jsonl"
        spec = {**spec, "out": str(self.out), "events": str(self.events)}
        self.popen = subprocess.Popen(
            [sys.executable, __file__, json.dumps(spec)], cwd=REPO, stderr=open(tmp / f"{name}.err", "w")
        )

    def lines(self) -> list[dict]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]

    def member(self) -> str | None:
        return next((d["member"] for d in self.lines() if "member" in d), None)

    def polled_partitions(self) -> set[int]:
        return {int(p) for d in self.lines() if "committed" in d for p in d["committed"]}

    def stop(self, timeout: float = 30) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            assert self.popen.wait(timeout) == 0, f"{self.name} exited with {self.popen.returncode}"
        except subprocess.TimeoutExpired:
            self.popen.kill()
            raise AssertionError(f"{self.name} did not stop within {timeout}s") from None
        assert any(d.get("closed") for d in self.lines()), f"{self.name} did not close cleanly"


def cli(*args: str) -> subprocess.CompletedProcess:
    return cli_fork.shared().run(list(args), dict(os.environ), timeout=120, cwd=REPO, text=True)


class Producer(threading.Thread):
    def __init__(self, log, topic: str):
        super().__init__(daemon=True)
        self.log, self.topic = log, topic
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(0.05):
            for p in range(PARTITIONS):
                self.log.produce(self.topic, [(b"k", b"v")] * 5, partition=p)


def check_commits(procs: list[Proc], ends: dict[int, int]) -> dict:
    """The exactly-once and single-owner checks over every member's commit events and poll log."""
    polled: dict[str, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for proc in procs:
        member = proc.member()
        for d in proc.lines():
            for p, (lo, hi) in d.get("polled", {}).items():
                polled[member][int(p)].update(range(lo, hi))
    commits: dict[int, list[tuple[int, int, str, int]]] = defaultdict(
        list
    )  # p -> (mzxid, offset, member, epoch)
    for proc in procs:
        for line in proc.events.read_text().splitlines():
            ev = json.loads(line)
            if ev.get("ev") == "commit":
                tp = ev["partition"]
                commits[int(tp.rsplit("-", 1)[1])].append(
                    (ev["mzxid"], ev["offset"], ev["member"], ev["epoch"])
                )
    owners: dict[tuple[int, int], set[str]] = defaultdict(set)
    for p in range(PARTITIONS):
        seq = sorted(commits[p])
        assert seq, f"partition {p} was never committed"
        previous, last_epoch = 0, -1
        for _mzxid, offset, member, epoch in seq:
            assert offset >= previous, f"partition {p}: offset moved back {previous} -> {offset} ({member})"
            assert epoch >= last_epoch, (
                f"partition {p}: a commit under epoch {epoch} after epoch {last_epoch}"
            )
            missing = set(range(previous, offset)) - polled[member][p]
            assert not missing, f"partition {p}: {member} committed {sorted(missing)[:5]}... it never polled"
            owners[(p, epoch)].add(member)
            previous, last_epoch = offset, epoch
        assert previous == ends[p], f"partition {p}: last commit {previous}, log end {ends[p]}"
    double = {k: v for k, v in owners.items() if len(v) > 1}
    assert not double, f"two members committed under one owner epoch: {double}"
    return {p: len(commits[p]) for p in range(PARTITIONS)}


def legacy_world(zk, zk_connect: str, tmp_path: Path):
    """(log, consumer spec, producer): topic `events` with 100 records per partition, group `billing`."""
    from topics.log import Log
    from topics.registry import create_topic

    root = tmp_path / "log"
    log = Log(root)
    create_topic(zk, "events", partitions=PARTITIONS)
    log.create("events", PARTITIONS)
    for p in range(PARTITIONS):
        log.produce("events", [(b"k", b"v")] * 100, partition=p)
    spec = {"group": "billing", "topic": "events", "zk": zk_connect, "root": str(root)}
    return log, spec, Producer(log, "events")


def start_legacy(tmp_path: Path, spec: dict, producer: Producer, procs: list[Proc]) -> list[Proc]:
    """Three legacy consumer processes (added to `procs`) consuming every partition while `producer` runs."""
    legacy = [Proc(tmp_path, f"legacy-{i}", {**spec, "rebalancer": "zk"}) for i in range(3)]
    procs += legacy
    producer.start()
    # Each of them has read (so registered and taken its share), and together they read everything:
    # two early ones may cover every partition before the third has registered.
    wait_for(
        lambda: (
            all(p.polled_partitions() for p in legacy)
            and set().union(*(p.polled_partitions() for p in legacy)) == set(range(PARTITIONS))
        ),
        60,
        "each legacy consumer to consume, and all of them every partition",
    )
    return legacy


def owned(zk) -> set[int]:
    """The partitions of `events` with a legacy owner znode."""
    path = "/consumers/billing/owners/events"
    return {int(p) for p in zk.get_children(path)} if zk.exists(path) else set()


def replace_legacy(
    zk, tmp_path: Path, spec: dict, legacy: list[Proc], procs: list[Proc], **dest
) -> list[Proc]:
    """Each legacy consumer replaced, one at a time, by a bridged consumer process of `dest`'s spec
    (`rebalancer`, `bootstrap`, ...), added to `procs`; returns the new consumers once they consume
    every partition and no legacy consumer is registered."""
    from migrate.migration import bridge

    members = []
    for i, old in enumerate(legacy):
        new = Proc(tmp_path, f"{dest['rebalancer']}-{i}", {**spec, **dest})
        procs.append(new)
        members.append(new)
        # A new member may get nothing until a legacy consumer leaves (scheme two: its grant within
        # the bridged share): wait until it is registered and every partition has an owner again.
        wait_for(lambda i=i: len(bridge.registered(zk, "billing")[1]) == i + 1, 60, f"{new.name} to register")
        wait_for(lambda: owned(zk) == set(range(PARTITIONS)), 60, "every partition to be owned")
        old.stop()
    wait_for(
        lambda: set().union(*(m.polled_partitions() for m in members)) == set(range(PARTITIONS)),
        60,
        "the new consumers to consume every partition",
    )
    legacy_left, bridged = bridge.registered(zk, "billing")
    assert legacy_left == [] and len(bridged) == len(legacy)
    return members


def switch(zk, zk_connect: str, dest: str) -> None:
    """`migrate run` again once no legacy consumer is left: done; the members leave bridge mode."""
    args = ("migrate", "run", "billing", "--from", "zk", "--to", dest, "--mode", "live", "--zk", zk_connect)
    finished = cli(*args, "-o", "json")
    assert finished.returncode == 0, finished.stderr
    assert json.loads(finished.stdout)["state"] == "done"
    # The members leave bridge mode by themselves: no legacy registration is left.
    wait_for(lambda: not zk.get_children("/consumers/billing/ids"), 30, "the members to leave bridge mode")


def finish(zk, zk_connect: str, dest: str, log, producer: Producer, members: list[Proc]) -> dict:
    """`switch`; then the members consume to the end once the producer stops. Returns the log end
    offsets (what they reach)."""
    from migrate.migration import offline as O

    switch(zk, zk_connect, dest)
    producer.stop_event.set()
    producer.join(5)
    want = {TP("events", p): log.latest(TP("events", p)) for p in range(PARTITIONS)}
    wait_for(lambda: O.offsets(zk, dest, "billing") == want, 60, f"the {dest} consumers to finish")
    for c in members:
        c.stop()
    return want


def end_run(producer: Producer, procs: list[Proc]) -> None:
    producer.stop_event.set()
    for p in procs:
        if p.popen.poll() is None:
            p.popen.kill()
            p.popen.wait(10)


def committed_spans(procs: list[Proc]) -> list[tuple[str, int, int, int]]:
    """(process, partition, first offset, next offset) of every successful commit a process logged."""
    return [
        (proc.name, int(p), lo, hi)
        for proc in procs
        for d in proc.lines()
        for p, (lo, hi) in d.get("committed", {}).items()
    ]


def check_tiling(spans: list[tuple[str, int, int, int]], ends: dict[int, int]) -> None:
    """Each partition's committed spans follow each other from 0 to its end: every record committed
    exactly once, none skipped."""
    for p, end in ends.items():
        at = 0
        for name, _, lo, hi in sorted((s for s in spans if s[1] == p), key=lambda s: s[2]):
            assert lo == at, f"partition {p}: {name} committed {lo}..{hi} after {at} was reached"
            at = hi
        assert at == end, f"partition {p}: committed up to {at}, the log ends at {end}"


def check_run(
    zk, zk_connect: str, procs: list[Proc], members: list[Proc], want: dict, extra_spans: list = ()
) -> None:
    """The whole run's checks, once every process ended: `members` are the destination's consumers,
    `want` its final offsets; `extra_spans` are commits of other consumers (as `committed_spans`)."""
    from migrate.migration import offline as O

    # The legacy offsets are the log of every commit made while bridged; after the switch the
    # destination carries on. Check the bridged period from the members' commit logs.
    legacy_offsets = O.offsets(zk, "zk", "billing")
    counts = check_commits(procs, {p: legacy_offsets[TP("events", p)] for p in range(PARTITIONS)})
    print("commits per partition while bridged:", counts)
    # After the switch nothing moved backwards either, and everything was committed to the end.
    assert all(want[tp] >= legacy_offsets[tp] for tp in want)
    # Over the whole run (after the switch too): no record is in two successful commits.
    seen: dict[tuple[int, int], str] = {}
    for name, p, lo, hi in [*committed_spans(procs), *extra_spans]:
        for off in range(lo, hi):
            assert (p, off) not in seen, f"{p}:{off} committed by {seen[(p, off)]} and {name}"
            seen[(p, off)] = name
    for c in members:
        events = [json.loads(line)["ev"] for line in c.events.read_text().splitlines()]
        assert "bridge_exited" in events, c.name
    assert (
        json.loads(cli("migrate", "status", "billing", "--zk", zk_connect, "-o", "json").stdout)["state"]
        == "done"
    )


# -- the leader's assignment is each legacy member's own decision ----------------------------------


if __name__ == "__main__":
    worker_main(json.loads(sys.argv[1]))
