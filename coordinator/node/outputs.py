"""A coordinator node applies the core's outputs: answers, state changes, topic watches, writes.

`CoreOutputs` is the part of `CoordinatorNode` (coordinator/node/server.py) that carries out what
the pure core (`coordinator.group`, `coordinator.server_side`) asks for: a `Respond` is sent on
its request's connection, a `StateChanged` is counted in the metrics, `WatchTopics` (scheme two)
puts a data watch on each topic's registration (and one children watch lists every topic, for the
incremental form's regex subscriptions), a `Discarded` parked request closes its
connection, and every `Write` is persisted through the store with the shard's epoch — its
outcome (done, fenced, too large, timed out, failed) goes back to the core (`persisted`). A group
entering PreparingRebalance wakes the group's parked WatchGroup requests (`watches`); an
incremental group's record written wakes those whose member now has news (`heartbeat_due`). A write
whose outcome the node cannot know (the connection to ZooKeeper was lost with it unanswered: it may
have landed) makes the node reload the shard from ZooKeeper, so that nothing it answers afterwards
— a committed offset, a generation — lags what ZooKeeper holds.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from coordinator.group.messages import (
    DeleteGroup,
    DeleteOffsets,
    Discarded,
    Respond,
    StateChanged,
    Write,
    WriteGroupMetadata,
    WriteOffsets,
)
from coordinator.group.state import DEAD, PREPARING_REBALANCE, STABLE
from coordinator.node.connection import Pending
from coordinator.node.dispatch import _now_ms
from coordinator.node.zk_async import Fenced, StoreError, StoreUnavailable, WriteTooLarge
from coordinator.server_side.assigned import WatchTopics
from coordinator.server_side.incremental_groups import INCREMENTAL_PROTOCOL_TYPE as INCREMENTAL
from coordinator.wire.errors import (
    KAFKA_STORAGE_ERROR,
    MESSAGE_TOO_LARGE,
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
)
from coordinator.wire.schema import DeleteGroupsResponse, DeleteGroupsResult
from core.errors import GroupshiftError
from topics.registry import TOPICS_PATH, decode_assignment, topic_path

log = logging.getLogger("coordinator.node.server")


class CoreOutputs:
    """Applying the core's outputs (see the module docstring); a base of `CoordinatorNode`."""

    def _apply(self, outputs: list) -> None:
        deletes: dict[str, asyncio.Task] | None = None  # this batch's group deletions, by group
        held: list[Respond] = []
        for out in outputs:
            kind = type(out)
            if kind is Respond:
                token = out.request_token
                if type(out.body) is DeleteGroupsResponse:
                    held.append(out)  # answered once the deletions it reports are in ZooKeeper
                elif isinstance(token, Pending):
                    token.conn.answer(token, out.body)
            elif kind is StateChanged:
                self._state_changed(out)
            elif kind is WatchTopics:
                self._watch_topics(out.topics)
            elif kind is Discarded:
                token = out.request_token
                # Kafka never answers it; with answers in order, the connection could not carry
                # anything else, so close it (the client reconnects and learns its fate).
                if isinstance(token, Pending) and token.conn.busy is token:
                    log.info(
                        "closing connection from %s: its parked request was discarded", token.conn.peer_host
                    )
                    token.conn.close()
            else:
                if kind is WriteGroupMetadata and self.watches and out.record.protocol_type == INCREMENTAL:
                    # its assignments moved: the members with partitions to give up or take hear it
                    self.watches.wake_due(out.group_id, self.core.heartbeat_due)
                task = self._spawn(self._persist(out))
                if kind is DeleteGroup:
                    deletes = deletes or {}
                    deletes[out.group_id] = task
        for out in held:
            self._spawn(self._answer_deleted(out, deletes or {}))

    async def _answer_deleted(self, out: Respond, deletes: dict[str, asyncio.Task]) -> None:
        """DeleteGroups' answer after the deletions it reports succeeded, as Kafka answers after
        its tombstones are written: a group said deleted is gone from ZooKeeper (a failed
        deletion's group reports the store's error instead)."""
        results = []
        for r in out.body.results:
            task = deletes.get(r.group_id) if not r.error_code else None
            ok, code = await task if task is not None else (True, 0)
            results.append(r if ok else DeleteGroupsResult(group_id=r.group_id, error_code=code))
        token = out.request_token
        if isinstance(token, Pending):
            token.conn.answer(token, DeleteGroupsResponse(results=results))

    def _watch_topics(self, topics: tuple[str, ...]) -> None:
        """Scheme two: the node (and no member) watches the partition counts of subscribed topics."""
        for topic in topics:
            if topic not in self._topic_watches:
                self._topic_watches.add(topic)
                self._spawn(
                    asyncio.to_thread(self.zk.DataWatch, topic_path(topic), self._topic_watcher(topic))
                )

    def _topic_watcher(self, topic: str):
        loop = self._loop

        def changed(data: bytes | None, stat: Any) -> bool | None:  # kazoo's thread
            if self._stopping:
                return False  # ends the watch
            try:
                count = len(decode_assignment(data, topic)) if data else 0
            except GroupshiftError:
                count = 0  # an unreadable registration assigns nothing
            loop.call_soon_threadsafe(self._topic_sized, topic, count)
            return None

        return changed

    def _topic_sized(self, topic: str, count: int) -> None:
        if self._stopping:
            return
        if not self.serving:  # nothing in the core moves while ZooKeeper is away: try again later
            self._loop.call_later(0.2, self._topic_sized, topic, count)
            return
        self._apply(self.core.topics_changed({topic: count}, _now_ms()))
        self._schedule_timer()

    def _watch_topic_list(self) -> None:
        """Every topic's name, for the incremental form's regex subscriptions: one children watch
        on /brokers/topics, started with the node."""
        loop = self._loop

        def listed(children: list[str]) -> bool | None:  # kazoo's thread
            if self._stopping:
                return False  # ends the watch
            loop.call_soon_threadsafe(self._topics_listed, frozenset(children))
            return None

        def start() -> None:
            self.zk.ensure_path(TOPICS_PATH)  # a watch on a missing node would end at once
            self.zk.ChildrenWatch(TOPICS_PATH, listed)

        self._spawn(asyncio.to_thread(start))

    def _topics_listed(self, names: frozenset[str] | None = None) -> None:
        if names is not None:
            self._listed_topics = names  # a later listing wins over one still waiting below
        if self._stopping or self._listed_topics is None:
            return
        if not self.serving:  # nothing in the core moves while ZooKeeper is away: try again later
            self._loop.call_later(0.2, self._topics_listed)
            return
        self._apply(self.core.topics_listed(self._listed_topics, _now_ms()))
        self._schedule_timer()

    def _state_changed(self, out: StateChanged) -> None:
        counts = self._state_counts
        old, new = out.old, out.new
        if old is not None:
            counts[old] = counts.get(old, 0) - 1
        if new is not DEAD:
            counts[new] = counts.get(new, 0) + 1
        if new is PREPARING_REBALANCE:
            self.metrics.inc("rebalances")
            if self.watches:
                self.watches.wake(out.group_id)
        elif new is STABLE:
            self.metrics.inc("rebalances_completed")
        if log.isEnabledFor(logging.DEBUG):
            was = "" if old is None else old.value
            log.debug(
                "group %r %s -> %s",
                out.group_id,
                was or "(new)",
                new.value,
                extra={"event": "group_state", "group": out.group_id, "old": was, "new": new.value},
            )

    async def _persist(self, out: Write) -> tuple[bool, int]:
        shard = self.leadership.shard_for(out.group_id)
        st = self.leadership.leading(out.group_id)
        ok, code = False, NOT_LEADER_OR_FOLLOWER
        if st is not None:
            store = self.store
            try:
                match out:
                    case WriteGroupMetadata():  # (a WriteStaticReplacement too)
                        await store.write_group(shard, st.epoch, out.record)
                    case WriteOffsets():
                        await store.commit_offsets(
                            shard, st.epoch, out.group_id, out.offsets, out.generation_id
                        )
                        if self.offsets_mirror is not None:
                            self.offsets_mirror.offer(out.group_id, out.offsets)
                    case DeleteOffsets():
                        await store.delete_offsets(shard, st.epoch, out.group_id, out.partitions)
                        if self.offsets_mirror is not None:
                            self.offsets_mirror.forget(out.group_id, out.partitions)
                    case DeleteGroup():
                        await store.delete_group(shard, st.epoch, out.group_id)
                    case _:
                        raise TypeError(f"not a write: {out!r}")
                ok, code = True, 0
            except Fenced as exc:
                log.warning(
                    "shard %d fenced: %s", shard, exc, extra={"event": "shard_fenced", "shard": shard}
                )
                if self.leadership.shards.get(shard) is st:
                    self._spawn(self.leadership.drop(shard, "fenced", release=False))
            except WriteTooLarge as exc:
                log.warning("write refused for group %r: %s", out.group_id, exc)
                code = MESSAGE_TOO_LARGE
            except StoreUnavailable as exc:
                log.warning("write for group %r failed: %s", out.group_id, exc)
                code = REQUEST_TIMED_OUT
                if self.leadership.shards.get(shard) is st:
                    # The write may have landed unseen: what the core holds may now lag ZooKeeper.
                    why = f"the outcome of a write for group {out.group_id!r} is unknown"
                    self.leadership.reload(shard, why)
            except StoreError as exc:
                log.warning("write for group %r failed: %s", out.group_id, exc)
                code = KAFKA_STORAGE_ERROR
            except Exception:
                log.exception("write for group %r failed", out.group_id)
                code = KAFKA_STORAGE_ERROR
        if not ok:
            self.metrics.inc("store_write_failures")
        if out.token is not None:
            self._apply(self.core.persisted(out.token, ok, _now_ms(), code))
            self._schedule_timer()
        return ok, code
