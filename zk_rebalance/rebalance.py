"""0.8.2's `syncedRebalance` and `rebalance(cluster)`, step by step (docs/zk_rebalance.md).

Release everything, read the whole group again, assign locally, read offsets, claim every owner
node and roll all claims back on any NodeExists; up to `rebalance_max_retries` attempts with the
backoff slept after each failure, including the last. Every step is logged for the metrics.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time

from kazoo.exceptions import (
    NodeExistsError,
)

import zk_rebalance.fencing as fencing
from core.types import TopicPartition
from core.zk import ZooKeeperNoAuth
from topics.registry import decode_assignment
from zk_rebalance.assignors import View, group_decision, thread_sort_key
from zk_rebalance.layout import (
    BROKER_IDS,
    BROKER_TOPICS,
    InvalidRegistration,
    ThreadId,
    TopicCount,
    decode_registration,
    ids_dir,
    offset_path,
    owner_path,
    topic_path,
)
from zk_rebalance.state import ConsumerRebalanceFailed, ZkMemberState, _PartitionInfo
from zk_rebalance.zkclient import Closing

log = logging.getLogger("zk_rebalance.member")


class RebalanceMixin:
    """The rebalance algorithm of `ZkGroupMember`."""

    # -- syncedRebalance -----------------------------------------------------------------------
    def _synced_rebalance(self, trigger: str) -> None:
        with self._rebalance_lock:
            if self._shutting_down or self.fatal_error is not None:
                return
            self._transition(ZkMemberState.REBALANCING)
            self._stable.clear()
            self._rounds += 1
            rnd = self._rounds
            t0 = time.monotonic()
            self.events.emit("rebalance_begin", round=rnd, trigger=trigger)
            for attempt in range(self.rebalance_max_retries):
                if self._shutting_down:  # KAFKA-1848
                    return
                self._zkc.context.value = {"round": rnd, "attempt": attempt}
                self.events.emit("attempt_begin", round=rnd, attempt=attempt)
                log.info("begin rebalancing consumer %s try #%d", self.consumer_id, attempt)
                done, error = False, None
                try:
                    done = self._rebalance(rnd, attempt)
                except (Closing, ZooKeeperNoAuth):  # closing, or refused: no attempt can succeed
                    raise
                except Exception as exc:  # NoNode mid-iteration, the assignor's require(), bad JSON...
                    error = f"{type(exc).__name__}: {exc}"
                    log.info("exception during rebalance: %s", error)
                self.events.emit("attempt_end", round=rnd, attempt=attempt, ok=done, error=error)
                self._zkc.context.value = None
                if done:
                    self._generation += 1
                    self._last_error = None
                    with self._lock:
                        owned = sorted(str(tp) for tp in self._registry)
                    self.events.emit(
                        "rebalance_end",
                        round=rnd,
                        ok=True,
                        attempts=attempt + 1,
                        generation=self._generation,
                        owned=owned,
                        duration=time.monotonic() - t0,
                    )
                    self._transition(ZkMemberState.STABLE)
                    self._stable.set()
                    return
                self._stop_fetchers("attempt_failed")  # closeFetchersForQueues(all): stop, commit
                if self.auto_commit:
                    self._commit_registry("attempt_failed")
                self._sleep(self.rebalance_backoff_ms / 1000)  # also after the last attempt
            self.events.emit(
                "rebalance_end",
                round=rnd,
                ok=False,
                attempts=self.rebalance_max_retries,
                duration=time.monotonic() - t0,
            )
            self._transition(ZkMemberState.FAILED)
            raise ConsumerRebalanceFailed(
                f"{self.consumer_id} can't rebalance after {self.rebalance_max_retries} retries"
            )

    def _sleep(self, seconds: float) -> None:
        if self._closing.wait(seconds):
            raise Closing()

    def _rebalance(self, rnd: int, attempt: int) -> bool:
        """0.8.2's `rebalance(cluster)`; True when this member's whole decision is claimed."""
        if self.sync_before_read:
            self._zkc.sync(ids_dir(self.group))
        brokers = self._brokers()  # getCluster, in syncedRebalance
        my_threads = self._thread_ids(self.consumer_id)  # own registration, re-read
        brokers = self._brokers()  # getAllBrokersInCluster
        if not brokers and self.require_brokers:
            log.warning("no brokers found when trying to rebalance")
            self.events.emit("no_brokers", round=rnd, attempt=attempt)
            self._subscribe_children(BROKER_IDS)
            return True
        self._stop_fetchers("rebalance")
        if self.auto_commit:
            self._commit_registry("rebalance")
        with self._lock:
            revoked = set(self._registry)
        if revoked and self.listener:
            self.listener.on_partitions_revoked(revoked)
        self._release_all()
        view = self._assignment_context(my_threads)
        decision = self.assignor.assign(view)
        self._log_decision(rnd, attempt, view, decision)
        offsets = {} if self.read_offsets_after_claim else self._fetch_offsets(decision)
        with self._lock:
            for tp, off in offsets.items():
                self._checkpointed[tp] = off
        epochs = self._reflect(decision)
        if epochs is None:
            return False
        if self.read_offsets_after_claim:
            offsets = self._fetch_offsets(decision)
            with self._lock:
                for tp, off in offsets.items():
                    self._checkpointed[tp] = off
        with self._lock:
            self._registry = {
                tp: _PartitionInfo(tid, offsets[tp], epochs.get(tp)) for tp, tid in decision.items()
            }
        self._start_fetchers()
        if self.listener:
            self.listener.on_partitions_assigned(set(decision))
        return True

    def _brokers(self) -> list[str]:
        ids = self._zkc.children_maybe(BROKER_IDS)
        return [b for b in ids if self._zkc.read_maybe(f"{BROKER_IDS}/{b}") is not None]

    def _registration(self, consumer: str) -> TopicCount:
        path = f"{ids_dir(self.group)}/{consumer}"
        data, _ = self._zkc.read(path)  # NoNode (e.g. after expiry) fails the attempt, as in 0.8
        return decode_registration(data, path)

    def _thread_ids(self, consumer: str, sub: TopicCount | None = None) -> dict[str, list[ThreadId]]:
        sub = sub or self._registration(consumer)
        topics = self._zkc.children_maybe(BROKER_TOPICS) if sub.is_wildcard else None
        if sub.is_wildcard:
            topics = [t for t in topics if sub.filter.allows(t, self.exclude_internal_topics)]
        return sub.thread_ids(consumer, topics)

    def _assignment_context(self, my_threads_first: dict[str, list[ThreadId]]) -> View:
        """`AssignmentContext`: own registration again, partition maps, every member's registration."""
        my_threads = self._thread_ids(self.consumer_id)
        partitions = {}
        for topic in my_threads:
            found = self._zkc.read_maybe(topic_path(topic))
            partitions[topic] = sorted(decode_assignment(found[0].encode(), topic)) if found else []
        per_topic: dict[str, list[ThreadId]] = {}
        for consumer in self._zkc.children_maybe(ids_dir(self.group)):
            try:
                threads = self._thread_ids(consumer)
            except InvalidRegistration as exc:
                # 0.8 would fail the attempt on every member; groupshift reports the node and skips it.
                self.events.emit("bad_registration", path=f"{ids_dir(self.group)}/{consumer}", error=str(exc))
                log.warning("%s", exc)
                continue
            for topic, tids in threads.items():
                per_topic.setdefault(topic, []).extend(tids)
        consumers = sorted(self._zkc.children_maybe(ids_dir(self.group)))
        return View(
            consumer=self.consumer_id,
            my_threads=my_threads,
            partitions=partitions,
            consumers_for_topic={t: sorted(v, key=thread_sort_key) for t, v in per_topic.items()},
            consumers=consumers,
        )

    def _log_decision(self, rnd: int, attempt: int, view: View, decision: dict) -> None:
        material = view.digest_material()
        digest = hashlib.sha1(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]
        whole = group_decision(self.assignor, view)
        self.events.emit(
            "decision",
            round=rnd,
            attempt=attempt,
            view=digest,
            consumers=view.consumers,
            partitions=material["partitions"],
            mine={str(tp): str(t) for tp, t in sorted(decision.items())},
            group={str(tp): str(t) for tp, t in sorted(whole.items())},
        )

    def _fetch_offsets(self, decision: dict[TopicPartition, ThreadId]) -> dict[TopicPartition, int]:
        out = {}
        for tp in sorted(decision):
            found = self._zkc.read_maybe(offset_path(self.group, tp.topic, tp.partition))
            out[tp] = int(found[0]) if found and found[0].strip().lstrip("-").isdigit() else -1
        return out

    def _release_all(self) -> None:
        """`releasePartitionOwnership`: delete every owner node in the local registry."""
        with self._lock:
            mine = sorted(self._registry)
            self._registry = {}
        for tp in mine:
            self._zkc.delete(owner_path(self.group, tp.topic, tp.partition))
            self.events.emit("owner_deleted", partition=str(tp), reason="release")

    def _reflect(self, decision: dict[TopicPartition, ThreadId]) -> dict[TopicPartition, int] | None:
        """`reflectPartitionOwnershipDecision`: claim all, roll back every claim on any NodeExists.
        Returns the fencing epochs (empty unless `fence_commits`), or None when the attempt fails."""
        owned: list[TopicPartition] = []
        epochs: dict[TopicPartition, int] = {}
        conflicts = 0
        for tp, tid in sorted(decision.items()):
            path = owner_path(self.group, tp.topic, tp.partition)
            try:
                if self.fence_commits:
                    epochs[tp] = fencing.claim(self._zkc, self.group, tp, str(tid))
                else:
                    self._create_expect_conflict(path, str(tid).encode())
                owned.append(tp)
                self.events.emit("owner_created", partition=str(tp), thread=str(tid))
            except NodeExistsError:
                conflicts += 1
                found = self._zkc.read_maybe(path)
                self.events.emit("conflict", partition=str(tp), path=path, owner=found[0] if found else None)
                log.info("waiting for the partition ownership to be deleted: %s", tp.partition)
        if conflicts:
            for tp in owned:
                self._zkc.delete(owner_path(self.group, tp.topic, tp.partition))
                self.events.emit("owner_deleted", partition=str(tp), reason="rollback")
            return None
        return epochs
