"""Which shards a coordinator node leads: claim, load, serve, hand over, give up (a recipe over the store).

Every shard has a preferred node among the live ones (balanced rendezvous hashing, `placement`).
A node claims an unled shard at once if it is the preferred one, and any node claims it after
`claim_grace_ms`; with `shard_handoff`, a node hands a shard to its preferred node once that node
has been live for `handoff_delay_ms` (so shards spread out as nodes join). A claimed shard is
`LOADING` while its groups are read back from ZooKeeper (group requests get
COORDINATOR_LOAD_IN_PROGRESS), then `LEADING`. When the leader znode watch fires, ZooKeeper is
asked again before the shard is given up; when the session is lost, every shard is given up
locally at once (`lose_all`), and claimed again with new epochs once ZooKeeper answers. A shard
one of whose writes ended with its outcome unknown is given up and claimed again the same way
(`reload`), so that its groups and offsets are read back as ZooKeeper holds them.

`ShardLeadership` is the part of `CoordinatorNode` that does this; it reaches into its node for
the store, the core (to load and unload groups) and the session state.

State transitions
-----------------

A shard this node holds is a `Shard` in `ShardLeadership.shards`, in one `ShardStatus`;
`ENTERED_FROM` (a `core.states.Transitions`) is the table of the statuses each may be entered from
(None: the node does not hold the shard), and `Shard` and `Shard.enter` refuse any other move
(`IllegalShardTransition`, a bug):

    (not held) ──claimed with a new epoch───────────────▶ LOADING
    LOADING    ──its groups and offsets read back───────▶ LEADING
    LOADING, LEADING ──dropped: handed over, fenced, leader znode lost, session lost,
                       load failed, a write's outcome unknown, shutdown──▶ (not held)

>>> ENTERED_FROM.entered_from(ShardStatus.LEADING)
frozenset({<ShardStatus.LOADING: 'loading'>})
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
import time
from typing import Any

from coordinator.layout import shard_of
from coordinator.wire.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
)
from core.states import IllegalTransition, Transitions
from core.zk import REFUSALS

log = logging.getLogger("coordinator.node.server")


class ShardStatus(enum.Enum):
    """What this node does with a shard it claimed; `ENTERED_FROM` lists what each may follow."""

    #: Claimed (its epoch is ours); its groups are being read from ZooKeeper: group requests get
    #: COORDINATOR_LOAD_IN_PROGRESS. Entered from: not held (a claim).
    LOADING = "loading"
    #: Loaded: this node serves the shard's groups and writes them with the shard's epoch.
    #: Entered from: Loading.
    LEADING = "leading"


LOADING = ShardStatus.LOADING
LEADING = ShardStatus.LEADING


class IllegalShardTransition(IllegalTransition):
    """A move `ENTERED_FROM` forbids: a bug in the node, never a client's fault."""


#: status -> the statuses a shard may be in before it (None: not held). Any status may be left
#: for "not held" (the shard is dropped from `ShardLeadership.shards`).
ENTERED_FROM: Transitions[ShardStatus | None] = Transitions(
    {LOADING: {None}, LEADING: {LOADING}}, IllegalShardTransition, none_name="not held"
)


class Shard:
    """A shard this node claimed: its status, its epoch, since when (monotonic seconds)."""

    __slots__ = ("status", "epoch", "since")

    def __init__(self, status: ShardStatus, epoch: int):
        ENTERED_FROM.check(None, status, "a shard")
        self.status = status
        self.epoch = epoch
        self.since = time.monotonic()

    def enter(self, status: ShardStatus) -> None:
        """Move to `status` (see the module docstring's table); `since` is now."""
        ENTERED_FROM.check(self.status, status, "a shard")
        self.status = status
        self.since = time.monotonic()


def _now_ms() -> int:
    return int(time.time() * 1000)


def preferred_nodes(shards: int, live: tuple[int, ...]) -> list[int]:
    """The preferred node of every shard among the `live` node ids: balanced rendezvous hashing.

    Pairs (shard, node) are taken by descending hash score, each node up to
    ceil(shards / nodes) shards. Every node computes the same answer from the same live set,
    and a node joining or leaving moves few shards.

    >>> preferred_nodes(4, (1, 2))
    [1, 2, 1, 2]
    """
    cap = -(-shards // len(live))
    pairs = sorted(
        (
            (hashlib.blake2b(f"{s}:{node}".encode(), digest_size=8).digest(), s, node)
            for s in range(shards)
            for node in live
        ),
        reverse=True,
    )
    owner: list[int] = [-1] * shards
    load = dict.fromkeys(live, 0)
    for _, s, node in pairs:
        if owner[s] < 0 and load[node] < cap:
            owner[s] = node
            load[node] += 1
    return owner


class ShardLeadership:
    """The shards one node leads (see the module docstring)."""

    def __init__(self, node: Any):  # its CoordinatorNode
        self.node = node
        self.config = node.config
        self.shards: dict[int, Shard] = {}
        self._unled_since: dict[int, float] = {}
        self._first_seen: dict[int, float] = {}
        self._verifying: set[int] = set()
        self._placement_cache: tuple[tuple[int, ...], list[int]] = ((), [])
        self._shard_cache: dict[str, int] = {}

    def shard_for(self, group_id: str) -> int:
        """The group's shard: Kafka's `abs(java_hash(group)) % shards` (cached)."""
        s = self._shard_cache.get(group_id)
        if s is None:
            if len(self._shard_cache) > 200_000:
                self._shard_cache.clear()
            s = self._shard_cache[group_id] = shard_of(group_id, self.config.shards)
        return s

    def group_error(self, group_id: str) -> int:
        """0 if this node serves the group now, else the error a group request gets."""
        node = self.node
        if not node.serving or node._stopping:
            return COORDINATOR_NOT_AVAILABLE
        st = self.shards.get(self.shard_for(group_id))
        if st is None:
            return NOT_COORDINATOR
        if st.status is LOADING:
            return COORDINATOR_LOAD_IN_PROGRESS
        return 0

    def leading(self, group_id: str) -> Shard | None:
        """The group's shard if this node leads it and has loaded it."""
        st = self.shards.get(self.shard_for(group_id))
        return st if st is not None and st.status is LEADING else None

    def count(self, status: ShardStatus) -> int:
        return sum(1 for x in self.shards.values() if x.status is status)

    def placement(self, live: tuple[int, ...]) -> list[int]:
        """The preferred node of every shard (`preferred_nodes`), cached for the last live set."""
        if self._placement_cache[0] == live:
            return self._placement_cache[1]
        owner = preferred_nodes(self.config.shards, live)
        self._placement_cache = (live, owner)
        return owner

    async def run(self) -> None:
        while not self.node._stopping:
            self.node._wake.clear()
            try:
                await self.reconcile()
            except REFUSALS:
                raise  # no retry can claim or load the shard: the node stops (`refused`)
            except Exception:
                log.exception("shard reconciliation failed")
            try:
                await asyncio.wait_for(self.node._wake.wait(), 0.5)
            except TimeoutError:
                pass

    async def reconcile(self) -> None:
        if not self.node.serving or self.node._stopping or not self.node.zk.connected:
            return
        cfg = self.config
        store = self.node.store
        if self.node._need_register:
            await store.register_again()  # as at start: the same addresses and security protocols
            self.node._need_register = False
        now = time.monotonic()
        live_set = set(store.coordinators) | {cfg.node_id}
        for n in live_set:
            self._first_seen.setdefault(n, now)
        for n in list(self._first_seen):
            if n not in live_set:
                del self._first_seen[n]
        placement = self.placement(tuple(sorted(live_set)))
        claims: list[int] = []
        releases: list[int] = []
        for s in range(cfg.shards):
            leader = store.leaders.get(s)
            mine = self.shards.get(s)
            preferred = placement[s]
            if mine is None and leader is not None and leader.node == cfg.node_id:
                # Our leadership from before a session loss: take it again with a new epoch when
                # we are the preferred node, else hand it over at once.
                if preferred == cfg.node_id:
                    claims.append(s)
                else:
                    releases.append(s)
                continue
            if mine is not None:
                if leader is None or leader.node != cfg.node_id or leader.epoch != mine.epoch:
                    self.node._spawn(self._verify(s, mine))
                elif (
                    cfg.shard_handoff
                    and mine.status is LEADING
                    and preferred != cfg.node_id
                    and now - self._first_seen.get(preferred, now) >= cfg.handoff_delay_ms / 1000
                    and now - mine.since >= cfg.handoff_delay_ms / 1000
                ):
                    await self.drop(s, f"handoff to node {preferred}", release=True)
                continue
            if leader is None:
                since = self._unled_since.setdefault(s, now)
                if preferred == cfg.node_id or now - since >= cfg.claim_grace_ms / 1000:
                    claims.append(s)
            else:
                self._unled_since.pop(s, None)
        if releases:
            await asyncio.gather(*(self.node.store.release_stale(s) for s in releases))
        if claims:
            await asyncio.gather(*(self._take(s) for s in claims))

    async def _take(self, shard: int) -> None:
        session = self.node._session
        epoch = await self.node.store.claim_shard(
            shard, self.node.host, self.node.port, self.node.kafka_endpoint
        )
        if epoch is None or self.node._stopping or session != self.node._session or not self.node.serving:
            # (the session was lost, or ZooKeeper went away, while the claim was under way)
            if epoch is not None:
                await self.node.store.release_shard(shard, epoch)
            return
        st = self.shards[shard] = Shard(LOADING, epoch)
        self._unled_since.pop(shard, None)
        try:
            snapshots = await self.node.store.load_shard(shard)
        except REFUSALS:
            await self.drop(shard, "load refused", release=True)
            raise
        except Exception:
            log.exception("loading shard %d failed; releasing it", shard)
            await self.drop(shard, "load failed", release=True)
            return
        if self.shards.get(shard) is not st:
            return
        now = _now_ms()
        for snap in snapshots:
            self.node._apply(self.node.core.load_group(snap, now))
        st.enter(LEADING)
        self.node._schedule_timer()
        log.info(
            "leading shard %d (epoch %d, %d groups)",
            shard,
            epoch,
            len(snapshots),
            extra={"event": "shard_loaded", "shard": shard, "epoch": epoch, "groups": len(snapshots)},
        )

    async def _verify(self, shard: int, st: Shard) -> None:
        """The watch says our leader znode changed: check ZooKeeper itself before giving up."""
        if shard in self._verifying:
            return
        self._verifying.add(shard)
        try:
            leader = await self.node.store.read_leader(shard)
            still = leader is not None and leader.node == self.config.node_id and leader.epoch == st.epoch
        except Exception:  # no answer: decide on a later round
            still = True
        finally:
            self._verifying.discard(shard)
        if not still and self.shards.get(shard) is st:
            await self.drop(shard, "leader znode lost", release=False)

    async def drop(self, shard: int, reason: str, release: bool) -> None:
        st = self._unload(shard, reason)
        if st is not None and release:
            await self.node.store.release_shard(shard, st.epoch)

    def reload(self, shard: int, reason: str) -> None:
        """Stop serving `shard` now and take it again, with a new epoch, once ZooKeeper answers:
        its groups and offsets are then loaded afresh (a write may have landed unseen)."""
        log.warning("reloading shard %d from ZooKeeper: %s", shard, reason, extra={"event": "shard_reload"})
        self._unload(shard, reason)
        self.node._wake.set()

    def _unload(self, shard: int, reason: str) -> Shard | None:
        """Stop serving `shard` now (groups unloaded: parked requests get NOT_COORDINATOR)."""
        st = self.shards.pop(shard, None)
        if st is None:
            return None
        now = _now_ms()
        for g in self.node.core.group_ids():
            if self.shard_for(g) == shard:
                self.node._apply(self.node.core.unload_group(g, now))
        self.node.watches.wake_where(lambda g: self.shard_for(g) == shard, NOT_COORDINATOR)
        self.node.store.forget_shard(shard)
        log.info(
            "no longer leading shard %d (%s)",
            shard,
            reason,
            extra={"event": "shard_released", "shard": shard, "epoch": st.epoch, "reason": reason},
        )
        return st

    def lose_all(self, reason: str) -> None:
        """Give every shard up locally, at once (no ZooKeeper call: it may be unreachable)."""
        if self.shards:
            log.warning("giving up %d shards: %s", len(self.shards), reason, extra={"event": "shards_lost"})
        for s in list(self.shards):
            self._unload(s, reason)
