"""Fuzzing a coordinator node: random and mutated frames beside a live group, then is the node well?

Run on demand from the repository root::

    python -m fuzz [--frames 100000] [--seed 1] [--zk HOST:PORT] [--json out.json]

Without `--zk` a ZooKeeper container is started (testing/zookeeper.py). One coordinator node runs
as a child process (`groupshift coordinator serve`, logs to a file); three real coordinator members
(`CoordinatorMember`) form a group on a 6-partition topic, heartbeat and commit the whole time.
Meanwhile `--frames` bad frames go to the node, built at the byte level (MessagePack via msgspec,
and raw bytes; nothing from the node's own codec), in these kinds:

* ``random``: random bytes behind a correct length prefix;
* ``random_msgpack``: a random MessagePack value (maps, arrays, every scalar type);
* ``flipped``: a valid request (to throw-away groups, with made-up member ids) with 1-4 bytes flipped;
* ``wrong_type``: a valid request with one envelope or body field of the wrong type, missing, or
  out of range;
* ``deep_nesting``: arrays or maps nested 64 to 200,000 deep, as the whole frame, the body or a field;
* ``huge_declared``: a MessagePack str/bin/array/map header declaring up to 4 GiB that is not there;
* ``invalid_state``: well-formed requests the node must refuse with a known error code (unknown
  member or API, wrong version, another protocol type, deleting the live group, ...);
* ``truncated`` and ``huge_length``: a length prefix that promises more (or fewer) bytes than sent,
  or more than ``--max-frame-bytes``. These go on a connection of their own.

Frames whose length prefix is right go over 16 connections, one in flight each (so a closed
connection is the frame's own doing; see `answers_before_close` for pipelining), with a
well-formed OffsetFetch of the live group after every 10th, which must succeed: a refused frame
must not spoil its connection. Every bad frame must get an answer (a MessagePack map with an
``id`` and a ``body``) or its connection closed; one with neither within ``--answer-timeout`` is
*silent*. Afterwards the node must be alive, its log free of tracebacks, its RSS grown by less
than 50 MB, and the group stable with commits succeeding.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fuzz.frames import Frame, FrameFuzzer, Target, control_frame, framed  # noqa: E402

RSS_GROWTH_TARGET_MB = 50.0
FRAME_TIMEOUT_MS = 1_000  # the node's --frame-timeout-ms here, so truncated frames are closed soon
LIVE_PARTITIONS = 6

_decode = msgspec.msgpack.Decoder().decode  # the node's answers


async def answers_before_close(host: str, port: int) -> bool:
    """Does a request pipelined just before a frame the node refuses by closing still get its answer?

    Sends a well-formed OffsetFetch and an unreadable frame in one write; True when the OffsetFetch's
    answer arrives before the connection closes (as a Kafka broker sends it).
    """
    target = Target(group="fz-probe", topic="fz-topic")
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(control_frame(7, target).data + framed(b"\xc1"))
        payload = await _read_frame(reader, 10.0)
        return _decode(payload).get("id") == 7
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    finally:
        writer.close()


# ---------------------------------------------------------------------------------------------
# Sending, and what came back


@dataclass
class Outcomes:
    """Per kind: how each frame ended, and a few examples of anything wrong."""

    counts: dict[str, Counter] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def add(self, frame: Frame, outcome: str, detail: str = "") -> None:
        self.counts.setdefault(frame.kind, Counter())[outcome] += 1
        if outcome in ("silent", "bad_answer", "wrong_answer") and len(self.problems) < 20:
            self.problems.append(f"{frame.kind}: {outcome} {detail} frame={frame.data[:80]!r}")

    def total(self, outcome: str) -> int:
        """Bad frames (not the control requests, not the answers to a stream's leftover bytes)."""
        return sum(c[outcome] for k, c in self.counts.items() if k != "control" and not k.endswith("_rest"))

    def anywhere(self, outcome: str) -> int:
        return sum(c[outcome] for c in self.counts.values())

    def answer(self, frame: Frame, payload: bytes) -> None:
        try:
            obj = _decode(payload)
        except msgspec.DecodeError:
            self.add(frame, "bad_answer", "undecodable answer")
            return
        if (
            not isinstance(obj, dict)
            or type(obj.get("id")) is not int
            or not isinstance(obj.get("body"), dict)
        ):
            self.add(frame, "bad_answer", f"answer {obj!r:.200}")
            return
        body = obj["body"]
        if frame.rid is not None and obj["id"] != frame.rid:
            self.add(frame, "wrong_answer", f"id {obj['id']} for request {frame.rid}")
        elif frame.expect is not None and not frame.expect(body):
            self.add(frame, "wrong_answer", f"expected {frame.expect_text}, got {body!r:.300}")
        else:
            self.add(frame, "answered_error" if _has_error(body) else "answered_ok")


def _has_error(body: dict[str, Any]) -> bool:
    if body.get("error_code"):
        return True
    for key in ("topics", "members", "groups", "results"):
        for item in body.get(key) or ():
            if isinstance(item, dict):
                if item.get("error_code"):
                    return True
                for p in item.get("partitions") or ():
                    if isinstance(p, dict) and p.get("error_code"):
                        return True
    return False


async def _read_frame(reader: asyncio.StreamReader, timeout: float) -> bytes:
    head = await asyncio.wait_for(reader.readexactly(4), timeout)
    return await asyncio.wait_for(reader.readexactly(int.from_bytes(head, "big")), timeout)


async def _pipelined(host: str, port: int, todo: deque, out: Outcomes, window: int, timeout: float) -> None:
    """Send frames from `todo` with `window` in flight; a closed connection ends the oldest one."""
    while todo:
        reader, writer = await asyncio.open_connection(host, port)
        inflight: deque[Frame] = deque()
        try:
            while todo or inflight:
                while todo and len(inflight) < window:
                    f = todo.popleft()
                    writer.write(f.data)
                    inflight.append(f)
                try:
                    await writer.drain()
                    payload = await _read_frame(reader, timeout)
                except (asyncio.IncompleteReadError, ConnectionError):
                    out.add(inflight.popleft(), "closed")
                    todo.extendleft(reversed(inflight))  # never read by the node: send again
                    break
                except TimeoutError:
                    f = inflight.popleft()
                    out.add(f, "silent", f"no answer in {timeout:g}s")
                    todo.extendleft(reversed(inflight))
                    break
                out.answer(inflight.popleft(), payload)
        finally:
            writer.close()


async def _alone(
    host: str, port: int, frame: Frame, out: Outcomes, timeout: float, sem: asyncio.Semaphore
) -> None:
    """A frame on its own connection: answered (then idle) or closed within `timeout`."""
    async with sem:
        reader, writer = await asyncio.open_connection(host, port)
        answers = 0
        try:
            writer.write(frame.data)
            while True:
                payload = await _read_frame(reader, timeout)
                answers += 1
                out.answer(Frame(frame.kind + "_rest", b""), payload)  # the bytes after a short prefix
        except (asyncio.IncompleteReadError, ConnectionError):
            out.add(frame, "closed")
        except TimeoutError:
            out.add(
                frame,
                "answered_error" if answers else "silent",
                f"neither answered nor closed in {timeout:g}s",
            )
        finally:
            writer.close()


async def send_frames(
    host: str,
    port: int,
    frames: list[Frame],
    target: Target,
    connections: int = 16,
    window: int = 1,
    answer_timeout: float = 15.0,
    alone_concurrency: int = 64,
) -> Outcomes:
    out = Outcomes()
    todo: deque[Frame] = deque()
    alone = []
    ids = 10
    for i, f in enumerate(frames):
        (alone if f.alone else todo).append(f)
        if i % 10 == 9:
            ids += 1
            todo.append(control_frame(ids, target))
    sem = asyncio.Semaphore(alone_concurrency)
    close_timeout = FRAME_TIMEOUT_MS / 1000 + 3.0  # the node sweeps every 0.5 s
    await asyncio.gather(
        *(_pipelined(host, port, todo, out, window, answer_timeout) for _ in range(connections)),
        *(_alone(host, port, f, out, close_timeout, sem) for f in alone),
    )
    return out


# ---------------------------------------------------------------------------------------------
# The node and the live group


def start_node(zk: str, log_path: Path, **options: Any):
    """`groupshift coordinator serve` as a child process, its output in `log_path`."""
    from coordinator.node.process import TEST_DEFAULTS, NodeProcess

    opts = {**TEST_DEFAULTS, "frame_timeout_ms": FRAME_TIMEOUT_MS, "log_level": "warning", **options}
    return NodeProcess.start(zk, 1, log_path=log_path, timeout=60, **opts)


def tracebacks(log_path: Path) -> list[str]:
    """Log records carrying an exception (`log.exception`), or any raw traceback."""
    found = []
    for line in log_path.read_text(errors="replace").splitlines():
        if "Traceback" in line or '"exc":' in line:
            found.append(line)
    return found


def traceback_kinds(log_path: Path) -> Counter:
    """The exception that ended each logged traceback, e.g. `UnicodeDecodeError`, with counts."""
    kinds: Counter = Counter()
    for line in tracebacks(log_path):
        last = re.findall(r"\\n([A-Za-z_.]+(?:Error|Exception)):", line)
        kinds[last[-1] if last else "?"] += 1
    return kinds


class LiveGroup:
    """Three real coordinator members on one topic: heartbeating, and committing every 50 ms."""

    def __init__(self, zk_client, bootstrap: str, group: str, topic: str, members: int = 3):
        from coordinator.member.consumer_member import CoordinatorMember
        from topics.registry import create_topic

        create_topic(zk_client, topic, partitions=LIVE_PARTITIONS)
        self.members = [
            CoordinatorMember(
                group,
                [topic],
                zk=zk_client,
                bootstrap=bootstrap,
                session_timeout_ms=10_000,
                heartbeat_interval_ms=300,
                retry_backoff_ms=50,
                client_id=f"fuzz-live-{i}",
            )
            for i in range(members)
        ]
        self.commits = Counter()
        self.generations: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._commit_loop, daemon=True, name="fuzz-live-commits")

    def start(self, timeout: float = 60.0) -> None:
        for m in self.members:
            m.start()
        if not self.wait_stable(timeout):
            raise RuntimeError("the live group did not become stable")
        self._thread.start()

    def stable(self) -> bool:
        gens = {m.generation for m in self.members}
        owned = [m.assignment() for m in self.members]
        union = set().union(*owned)
        return len(gens) == 1 and -1 not in gens and len(union) == sum(map(len, owned)) == LIVE_PARTITIONS

    def wait_stable(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.stable():
                return True
            time.sleep(0.05)
        return False

    def commit_round(self, offset: int) -> bool:
        """Every member commits `offset` for what it owns; True if all succeeded."""
        from core.errors import GroupshiftError

        ok = True
        for m in self.members:
            gen = m.generation
            self.generations.add(gen)
            tps = m.assignment()
            try:
                m.commit(dict.fromkeys(tps, offset), gen)
                self.commits["ok"] += 1
            except GroupshiftError:
                self.commits["failed"] += 1
                ok = False
        return ok

    def _commit_loop(self) -> None:
        offset = 0
        while not self._stop.wait(0.05):
            offset += 1
            self.commit_round(offset)

    def stop_committing(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def close(self) -> None:
        self._stop.set()
        for m in self.members:
            m.close()


# ---------------------------------------------------------------------------------------------
# One run


@dataclass
class Report:
    frames: int
    seconds: float
    outcomes: Outcomes
    node_alive: bool
    tracebacks: list[str]
    rss_before_mb: float
    rss_after_mb: float
    group_stable_after: bool
    final_commit_ok: bool
    final_committed_ok: bool
    commits: dict[str, int]
    generations: list[int]
    traceback_kinds: dict[str, int] = field(default_factory=dict)
    answer_before_close: bool | None = None  # see answers_before_close()

    @property
    def rss_growth_mb(self) -> float:
        return self.rss_after_mb - self.rss_before_mb

    @property
    def failures(self) -> list[str]:
        """Every way this run missed a target (empty: the node passed)."""
        o = self.outcomes
        out = []
        if not self.node_alive:
            out.append("the node process died")
        for what in ("silent", "bad_answer", "wrong_answer"):
            if o.anywhere(what):
                out.append(f"{o.anywhere(what)} frames {what}")
        if self.tracebacks:
            out.append(f"{len(self.tracebacks)} tracebacks in the node's log")
        if not self.rss_growth_mb < RSS_GROWTH_TARGET_MB:
            out.append(f"RSS grew {self.rss_growth_mb:.1f} MB (target < {RSS_GROWTH_TARGET_MB:g})")
        if not (self.group_stable_after and self.final_commit_ok and self.final_committed_ok):
            out.append("the live group is not stable or its commits fail after the fuzzing")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "seconds": round(self.seconds, 1),
            "outcomes": {k: dict(v) for k, v in sorted(self.outcomes.counts.items())},
            "problems": self.outcomes.problems,
            "node_alive": self.node_alive,
            "tracebacks": len(self.tracebacks),
            "traceback_kinds": self.traceback_kinds,
            "answer_before_close": self.answer_before_close,
            "first_traceback": self.tracebacks[0][:3000] if self.tracebacks else None,
            "rss_before_mb": round(self.rss_before_mb, 1),
            "rss_after_mb": round(self.rss_after_mb, 1),
            "group_stable_after": self.group_stable_after,
            "final_commit_ok": self.final_commit_ok,
            "final_committed_ok": self.final_committed_ok,
            "commits_during": dict(self.commits),
            "generations_seen": self.generations,
            "failures": self.failures,
        }


def run(
    zk_connect: str, frames: int, seed: int = 1, log_path: Path | None = None, **node_options: Any
) -> Report:
    """Start a node on `zk_connect` (a fresh chroot), a live group, fuzz it; return what happened."""
    from core.types import TopicPartition
    from core.zk import connect

    log_path = log_path or Path("/tmp") / f"fuzz-frames-node-{uuid.uuid4().hex[:8]}.log"
    zk = connect(zk_connect, session_timeout=10.0)
    node = start_node(zk_connect, log_path, **node_options)
    target = Target(group="fuzz-live", topic="fuzz-live-topic")
    live = None
    try:
        live = LiveGroup(zk, node.bootstrap, target.group, target.topic)
        live.start()
        fuzzer = FrameFuzzer(seed, target)
        batch = list(fuzzer.frames(frames))
        rss_before = node.rss_mb()
        t0 = time.monotonic()
        outcomes = asyncio.run(send_frames(node.host, node.port, batch, target))
        seconds = time.monotonic() - t0
        live.stop_committing()
        stable = live.wait_stable(30.0)
        final_ok = stable and live.commit_round(1_000_000)
        tp = TopicPartition(target.topic, 0)
        committed_ok = final_ok and live.members[0].committed([tp]) == {tp: 1_000_000}
        probe = asyncio.run(answers_before_close(node.host, node.port))
        time.sleep(1.0)  # let the node finish closing connections before measuring
        rss_after = node.rss_mb() if node.alive else float("nan")
        return Report(
            frames=frames,
            seconds=seconds,
            outcomes=outcomes,
            node_alive=node.alive,
            tracebacks=tracebacks(log_path),
            rss_before_mb=rss_before,
            rss_after_mb=rss_after,
            group_stable_after=stable,
            final_commit_ok=final_ok,
            final_committed_ok=committed_ok,
            commits=dict(live.commits),
            generations=sorted(live.generations),
            traceback_kinds=dict(traceback_kinds(log_path)),
            answer_before_close=probe,
        )
    finally:
        if live is not None:
            live.close()
        node.stop()
        zk.stop()
        zk.close()


def print_report(r: Report) -> None:
    o = r.outcomes
    bad = r.frames
    print(f"{bad:,} bad frames in {r.seconds:.1f} s ({bad / r.seconds:,.0f}/s), seed-reproducible")
    print(
        f"{'kind':16} {'sent':>7} {'error answer':>13} {'ok answer':>10} {'closed':>8} "
        f"{'silent':>7} {'bad/wrong':>10}"
    )
    for kind, c in sorted(o.counts.items()):
        print(
            f"{kind:16} {sum(c.values()):7} {c['answered_error']:13} {c['answered_ok']:10} {c['closed']:8} "
            f"{c['silent']:7} {c['bad_answer'] + c['wrong_answer']:10}"
        )
    handled = o.total("answered_error") + o.total("answered_ok") + o.total("closed")
    print(f"bad frames answered or closed: {handled:,} / {bad:,} = {handled / bad:.4f} (target 1.0)")
    print(
        f"node alive: {r.node_alive}; tracebacks in its log: {len(r.tracebacks)} (target 0) "
        f"{r.traceback_kinds}"
    )
    print(
        f"answer to a request pipelined before a refused frame sent before closing: {r.answer_before_close}"
    )
    print(
        f"node RSS {r.rss_before_mb:.1f} -> {r.rss_after_mb:.1f} MB: grew {r.rss_growth_mb:.1f} MB = "
        f"{r.rss_growth_mb / RSS_GROWTH_TARGET_MB:.2f} of the {RSS_GROWTH_TARGET_MB:g} MB bound"
    )
    c = r.commits
    total = c.get("ok", 0) + c.get("failed", 0)
    print(
        f"live group: commits during fuzzing {c.get('ok', 0):,} / {total:,} succeeded "
        f"({c.get('ok', 0) / max(total, 1):.4f}); generations seen {r.generations}; stable after: "
        f"{r.group_stable_after}; final commit: {r.final_commit_ok}; read back: {r.final_committed_ok}"
    )
    for p in o.problems[:10]:
        print("  problem:", p)
    if r.tracebacks:
        print("  first traceback:", r.tracebacks[0][:1500])
    print("PASS" if not r.failures else "FAIL: " + "; ".join(r.failures))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--zk", default=None, help="ZooKeeper connect string (default: start a container)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    import logging

    logging.getLogger("asyncio").setLevel(logging.ERROR)  # writes to connections the node closed
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    server = None
    zk = args.zk
    if zk is None:
        from testing.zookeeper import ZkServer

        server = ZkServer.start_single()
        zk = server.connect_string
    try:
        log_path = Path("/tmp") / f"fuzz-frames-node-{uuid.uuid4().hex[:8]}.log"
        report = run(f"{zk}/bench-fuzz-{uuid.uuid4().hex[:8]}", args.frames, args.seed, log_path)
        print(f"node log: {log_path}")
        print_report(report)
        if args.json:
            args.json.write_text(json.dumps(report.as_dict(), indent=2))
    finally:
        if server is not None:
            server.remove()
    return 0 if not report.failures else 1


if __name__ == "__main__":
    sys.exit(main())
