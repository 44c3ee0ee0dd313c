"""Benchmark of the pure coordinator core (`coordinator/group/`): heartbeats and a full rebalance.

Run on demand: `python -m bench.group_core [--members-per-group 10 --groups 1000 --rebalance 1000]`.
Prints the figures and their ratio to the targets of issue 6:

* heartbeats for 10k members in 1k Stable groups: >= 200,000 heartbeats/s;
* a full rebalance of a 1,000-member group (every JoinGroup and SyncGroup, the leader's
  assignment written and propagated): < 100 ms of core CPU time. Measured twice: a group forming
  from nothing (MEMBER_ID_REQUIRED round trip, initial delay) and a rejoin round of a Stable group.

Only core CPU time is measured (`time.process_time`); request bodies are built beforehand, as the
server's decoder would hand them over.
"""

from __future__ import annotations

import argparse
import gc
import time

from coordinator.group.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.group.messages import Respond, Write
from coordinator.wire.schema import (
    HEARTBEAT,
    JOIN_GROUP,
    SYNC_GROUP,
    HeartbeatRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    SyncGroupAssignment,
    SyncGroupRequest,
)

HEARTBEAT_TARGET_PER_S = 200_000
REBALANCE_TARGET_MS = 100.0
PROTOCOLS = [JoinGroupProtocol(name="range", metadata=b"\x82\xa7version\x00\xa6topics\x91\xa1t")]


def _join_body(group: str, member_id: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=45_000,
        rebalance_timeout_ms=300_000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=PROTOCOLS,
    )


def _sync_body(group: str, member_id: str, generation: int, assignments: list) -> SyncGroupRequest:
    return SyncGroupRequest(
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        protocol_type="consumer",
        protocol_name="range",
        assignments=assignments,
    )


class _Run:
    """A minimal driver: synchronous successful writes, responses collected by token."""

    def __init__(self, core: GroupCoordinator) -> None:
        self.core = core
        self.now = 0
        self.responses: dict = {}
        self._token = 0

    def absorb(self, outs: list) -> None:
        pending = list(outs)
        while pending:
            o = pending.pop()
            if type(o) is Respond:
                self.responses[o.request_token] = o.body
            elif isinstance(o, Write) and o.token is not None:
                pending.extend(self.core.persisted(o.token, True, self.now))

    def send(self, api: int, body: dict) -> int:
        self._token += 1
        self.absorb(self.core.handle(api, body, self.now, client_id="bench", request_token=self._token))
        return self._token

    def tick_until(self, tokens: list[int]) -> None:
        while not all(t in self.responses for t in tokens):
            nxt = self.core.next_deadline()
            assert nxt is not None
            self.now = nxt + 1
            self.absorb(self.core.tick(self.now))


def form_groups(run: _Run, groups: list[str], n: int) -> dict[str, tuple[list[str], int]]:
    """Every step of groups forming side by side: n new members each, MEMBER_ID_REQUIRED, rejoin,
    the initial delay, then every member's SyncGroup (the leader's last). Returns
    {group: (member ids, generation)}."""
    ids = {
        g: [run.responses[run.send(JOIN_GROUP, _join_body(g, ""))].member_id for _ in range(n)]
        for g in groups
    }
    tokens = {g: [run.send(JOIN_GROUP, _join_body(g, mid)) for mid in ids[g]] for g in groups}
    run.tick_until([t for ts in tokens.values() for t in ts])
    formed = {}
    for g in groups:
        first = run.responses[tokens[g][0]]
        generation, leader = first.generation_id, first.leader
        assignments = [SyncGroupAssignment(member_id=mid, assignment=b"a") for mid in ids[g]]
        syncs = [run.send(SYNC_GROUP, _sync_body(g, mid, generation, [])) for mid in ids[g] if mid != leader]
        syncs.append(run.send(SYNC_GROUP, _sync_body(g, leader, generation, assignments)))
        assert all(run.responses[t].error_code == 0 for t in syncs)
        formed[g] = (ids[g], generation)
    return formed


def rejoin_round(run: _Run, group: str, ids: list[str], leader: str) -> int:
    """A rebalance of a Stable group: the leader rejoins, then everyone else; then all sync."""
    order = [leader] + [m for m in ids if m != leader]
    tokens = [run.send(JOIN_GROUP, _join_body(group, mid)) for mid in order]
    assert all(t in run.responses for t in tokens)
    generation = run.responses[tokens[0]].generation_id
    assignments = [SyncGroupAssignment(member_id=mid, assignment=b"b") for mid in ids]
    syncs = [run.send(SYNC_GROUP, _sync_body(group, mid, generation, [])) for mid in order[1:]]
    syncs.append(run.send(SYNC_GROUP, _sync_body(group, leader, generation, assignments)))
    assert all(run.responses[t].error_code == 0 for t in syncs)
    return generation


def bench_heartbeats(groups: int, per_group: int, rounds: int) -> float:
    run = _Run(GroupCoordinator(CoordinatorConfig()))
    bodies = []
    for gid, (ids, generation) in form_groups(run, [f"group-{g}" for g in range(groups)], per_group).items():
        bodies += [HeartbeatRequest(group_id=gid, generation_id=generation, member_id=mid) for mid in ids]
    core, handle = run.core, run.core.handle
    now = run.now + 1
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        for _ in range(rounds):
            now += 1
            for token, body in enumerate(bodies):
                outs = handle(HEARTBEAT, body, now, request_token=token)
        elapsed = time.process_time() - start
    finally:
        gc.enable()
    assert outs[0].body.error_code == 0
    assert core.next_deadline() is not None
    return rounds * len(bodies) / elapsed


def bench_rebalance(n: int) -> tuple[float, float]:
    gc.collect()
    run = _Run(GroupCoordinator(CoordinatorConfig()))
    start = time.process_time()
    ((ids, _),) = form_groups(run, ["big"], n).values()
    formed_ms = (time.process_time() - start) * 1000
    leader = run.core._groups["big"].leader_id
    start = time.process_time()
    rejoin_round(run, "big", ids, leader)
    rejoin_ms = (time.process_time() - start) * 1000
    return formed_ms, rejoin_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--members-per-group", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=20, help="heartbeats per member")
    ap.add_argument("--rebalance", type=int, default=1000, help="members in the rebalanced group")
    args = ap.parse_args()

    rate = bench_heartbeats(args.groups, args.members_per_group, args.rounds)
    members = args.groups * args.members_per_group
    print(
        f"heartbeats ({members} members in {args.groups} groups): {rate:,.0f}/s "
        f"(target >= {HEARTBEAT_TARGET_PER_S:,}/s, ratio {rate / HEARTBEAT_TARGET_PER_S:.2f})"
    )
    runs = [bench_rebalance(args.rebalance) for _ in range(3)]
    formed, rejoin = min(r[0] for r in runs), min(r[1] for r in runs)
    for label, ms in (("forming from nothing", formed), ("rejoin round of a Stable group", rejoin)):
        print(
            f"rebalance of {args.rebalance} members, {label}: {ms:.1f} ms CPU "
            f"(target < {REBALANCE_TARGET_MS:.0f} ms, ratio {ms / REBALANCE_TARGET_MS:.2f})"
        )


if __name__ == "__main__":
    main()
