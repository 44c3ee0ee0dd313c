"""The live migration's member side: a coordinator consumer in a bridged group (scheme one -> three).

While `migrate run --mode live` keeps a group bridged, Kafka 0.8 consumers and coordinator
consumers share it during a rolling restart (docs/migrate.md, "Live migration"):

* every coordinator member registers a legacy consumer id under `/consumers/<g>/ids` (one stream
  per topic, the 0.8 registration JSON), so the legacy members count it when they assign, plus a
  marker `/groupshift/bridge/<g>/<id>` created in the same `multi` (same session) that tells the
  two kinds apart;
* the group leader assigns with `BridgeAssignor`: for each coordinator member, exactly what the
  legacy strategy (range or roundrobin) computes for its legacy id over the union of every
  registration under `/consumers/<g>/ids`;
* a member claims a partition's legacy owner znode, bumping scheme one's fencing epoch, before it
  fetches the partition; one still owned by a legacy member is claimed once that member released
  it (retried on every `poll()`);
* it commits to the legacy offsets first, fenced by that epoch (the authority while bridged: a
  commit that passed it has taken effect), then to the coordinator (retried on later polls when
  the coordinator refused it); a partition starts at the larger of the two offsets, and a new claim first
  brings the coordinator's offset up to the legacy one, so once no legacy member is left the
  coordinator holds every offset;
* any change of `/consumers/<g>/ids` makes the member rejoin (the legacy members rebalance too).

When the migration record reaches `switched`, members leave bridge mode in one more rebalance
(owner znodes released, registrations removed, coordinator commits only): an ordinary coordinator
group. A rolled-back migration stops them with an error: the legacy consumers own the group again.

    member = BridgedMember(zk, "billing", ["clicks"], record, listener, make_member)
    member.start(); member.poll(0.1); member.commit({tp: OffsetAndMetadata(42)}, member.generation)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from coordinator.assignors.base import Assignment, Assignor, Subscription
from coordinator.layout import bridge_marker_dir, migration_path
from core.errors import CommitFailed, GroupshiftError
from core.membership import call_listener
from core.types import OffsetAndMetadata, TopicPartition
from core.zk import KAZOO_REFUSALS, refused_by_acl
from migrate.migration import record as R
from migrate.schemes import zkio
from topics.registry import decode_assignment
from zk_rebalance import fencing
from zk_rebalance.assignors import View, partition_assignor, thread_sort_key
from zk_rebalance.events import EventLog
from zk_rebalance.layout import (
    BROKER_TOPICS,
    InvalidRegistration,
    ThreadId,
    TopicCount,
    consumer_id_string,
    decode_registration,
    encode_registration,
    ids_dir,
    offset_path,
    owner_path,
    topic_path,
)
from zk_rebalance.zkclient import Closing, ZkCalls

log = logging.getLogger(__name__)

BRIDGE_PROTOCOL = "groupshift-bridge"
BRIDGING = (R.PLANNED, R.BRIDGED, R.COPIED, R.VERIFIED)  # a live record in these states bridges
CLAIM_RETRY_S = 0.1


def read_record(zk: KazooClient, group: str) -> R.Migration | None:
    """The group's migration record (None: none); ZooKeeper's refusal as `ZooKeeperNoAuth`."""
    try:
        data, _ = zk.get(migration_path(group))
    except NoNodeError:
        return None
    except KAZOO_REFUSALS as exc:
        raise refused_by_acl(exc, migration_path(group)) from None
    return R.decode(data, migration_path(group))


def registered(zk: KazooClient, group: str) -> tuple[list[str], list[str]]:
    """(legacy consumer ids, bridged coordinator members' ids) registered under `/consumers/<g>/ids`."""
    ids = set(zkio.children(zk, ids_dir(group)) or [])
    bridged = set(zkio.children(zk, bridge_marker_dir(group)) or [])
    return sorted(ids - bridged), sorted(ids & bridged)


def bridging(rec: R.Migration | None, dest: str = "coordinator") -> bool:
    """Whether a consumer of scheme `dest` (coordinator, or server: `bridge_server`) starting now
    joins through the bridge."""
    return rec is not None and rec.mode == "live" and rec.state in BRIDGING and rec.dest == dest


def union_assignment(
    strategy: str,
    registrations: Mapping[str, TopicCount],
    partitions: Mapping[str, int],
    members: Mapping[str, str],
) -> Assignment:
    """What Kafka 0.8's `strategy` gives each coordinator member over every legacy registration.

    `registrations`: legacy consumer id -> its TopicCount (legacy and bridged members alike);
    `partitions`: topic -> partition count; `members`: coordinator member id -> its legacy id.
    Pure: the same decision each legacy member computes for itself.
    """
    cluster = sorted(partitions)
    threads = {cid: tc.thread_ids(cid, cluster) for cid, tc in registrations.items()}
    per_topic: dict[str, list[ThreadId]] = {}
    for cid in sorted(threads):
        for topic, tids in threads[cid].items():
            per_topic.setdefault(topic, []).extend(tids)
    consumers_for_topic = {t: sorted(v, key=thread_sort_key) for t, v in per_topic.items()}
    parts = {t: list(range(partitions.get(t) or 0)) for t in per_topic}
    assignor = partition_assignor(strategy)
    out: Assignment = {}
    for member, cid in members.items():
        if cid not in threads:
            out[member] = []  # registered after the leader read the group (or not at all): next round
            continue
        view = View(cid, threads[cid], parts, consumers_for_topic, sorted(threads))
        try:
            out[member] = sorted(assignor.assign(view, cid))
        except ValueError as exc:  # roundrobin with differing subscriptions, as 0.8 refuses it
            raise GroupshiftError(f"the legacy {strategy} assignment is impossible: {exc}") from None
    return out


class BridgeAssignor(Assignor):
    """The leader's assignor while bridged: `union_assignment` over what ZooKeeper holds now."""

    name = BRIDGE_PROTOCOL

    def __init__(self, bridge: BridgedMember):
        self.bridge = bridge

    def subscription_user_data(self) -> bytes:
        return self.bridge.consumer_id.encode()  # how the leader maps member ids to legacy ids

    def _assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> Assignment:
        members = {m: s.user_data.decode("utf-8", "replace") for m, s in subscriptions.items()}
        if self.bridge.exited:
            # No legacy member is left: the same legacy range over the coordinator members alone.
            regs = {
                cid: TopicCount.static(dict.fromkeys(subscriptions[m].topics, 1))
                for m, cid in members.items()
            }
            return union_assignment("range", regs, partitions_per_topic, members)
        regs, counts = self.bridge.read_union()
        return union_assignment(self.bridge.strategy, regs, counts, members)


class BridgedMember:
    """A coordinator member while its group is bridged (see the module docstring); it implements
    `core.membership.Membership` over the `CoordinatorMember` that `make_member(assignors,
    listener)` builds, which it drives from `poll()`."""

    def __init__(
        self,
        zk: KazooClient,
        group: str,
        topics: Sequence[str],
        rec: R.Migration,
        listener: object,
        make_member: Callable[[list, object], Any],
        *,
        assignors: Sequence[str] = ("range",),
        event_log: str | None = None,
    ):
        self.zk, self.group, self.topics = zk, group, list(topics)
        self.strategy = rec.legacy_assignor
        self.consumer_id = consumer_id_string(group)
        self.thread = str(ThreadId(self.consumer_id, 0))
        self.events = EventLog(event_log, member=self.consumer_id)
        self._closing = threading.Event()
        self._calls = ZkCalls(zk, self.events, self._closing)
        self._downstream = listener
        self._lock = threading.RLock()
        self._claimed: dict[TopicPartition, int] = {}  # partition -> fencing epoch
        self._pending: set[TopicPartition] = set()  # assigned, owner znode not claimed yet
        self._deferred: dict[TopicPartition, int] = {}  # committed to legacy, not yet to the coordinator
        self._next_claim = 0.0
        self._registered = False
        self._session_lost = False
        self._leaving = False  # the record reached switched: leave bridge mode at the next rebalance
        self.exited = False
        self._fatal: GroupshiftError | None = None
        self.member = make_member([BridgeAssignor(self), *assignors], _Listener(self))

    # -- Membership ----------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        return self.member.generation

    @property
    def rebalance_in_progress(self) -> bool:
        with self._lock:
            pending = bool(self._pending)
        return self.member.rebalance_in_progress or pending

    def start(self) -> None:
        self._register()
        self.zk.add_listener(self._on_session)
        self.zk.ChildrenWatch(ids_dir(self.group), self._on_ids, send_event=False)
        self.zk.DataWatch(migration_path(self.group), self._on_record)
        self.events.emit("bridge_start", strategy=self.strategy, topics=self.topics)
        self.member.start()

    def assignment(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._claimed) if not self.exited else self.member.assignment()

    def poll(self, timeout: float = 0.0, join_timeout: float | None = None) -> None:
        """The member's group work (`CoordinatorMember.poll`), then the owner znodes still to claim."""
        if self._fatal is not None:
            raise self._fatal
        if self._session_lost:
            self._recover_session()
        self.member.poll(timeout, join_timeout)
        self._claim_pending()
        self._flush_deferred()

    def record_poll(self) -> None:
        self.member.record_poll()

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], generation: int) -> None:
        """Legacy offsets first, each fenced by the partition's epoch, then the coordinator's."""
        if not offsets:
            return
        if not self.exited:
            if generation != self.member.generation:
                raise CommitFailed(
                    f"commit for generation {generation} refused: the member holds generation "
                    f"{self.member.generation}; the group rebalanced, these records are delivered again"
                )
            with self._lock:
                work = [(tp, _offset(om), self._claimed.get(tp)) for tp, om in sorted(offsets.items())]
            missing = [tp for tp, _, epoch in work if epoch is None]
            if missing:
                raise CommitFailed(
                    f"{self.consumer_id} does not own {', '.join(map(str, missing))} (legacy owner znode); "
                    "the group rebalanced - its new owner commits from here on"
                )
            fenced = []
            for tp, off, epoch in work:
                try:
                    stat = fencing.write_offset(self._calls, self.group, tp, off, epoch)
                except fencing.StaleEpoch:
                    fenced.append(tp)
                    continue
                self.events.emit(
                    "commit", partition=str(tp), offset=off, reason="commit", mzxid=stat.mzxid, epoch=epoch
                )
            if fenced:
                self.events.emit("commit_fenced", partitions=[str(tp) for tp in fenced])
                raise CommitFailed(
                    f"commit of {', '.join(map(str, fenced))} refused: a legacy member claimed them since "
                    "(owner epoch changed); the new owner re-delivers the records",
                    partitions=fenced,
                )
            try:
                self.member.commit(offsets, generation)
            except CommitFailed as exc:
                # The commit took effect where it counts while bridged (the fenced legacy write);
                # the coordinator's copy follows on a later poll (or the next owner's catch-up).
                with self._lock:
                    self._deferred.update({tp: off for tp, off, _ in work})
                self.events.emit("coordinator_commit_deferred", partitions=[str(tp) for tp, _, _ in work])
                log.info("group %s: coordinator commit deferred (%s)", self.group, exc)
            return
        self.member.commit(offsets, generation)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The coordinator's offsets, or while bridged the larger of the two schemes' (dual commit)."""
        partitions = sorted(set(partitions))
        coord = self.member.committed(partitions)
        if self.exited:
            return coord
        legacy = self._legacy_offsets(partitions)
        return {tp: _max(coord.get(tp), legacy.get(tp)) for tp in partitions}

    def close(self, timeout: float = 10.0) -> None:
        try:
            self.member.close(timeout)  # revokes through _Listener: commits, then releases owners
        finally:
            self._closing.set()
            try:
                self._deregister()
            except Exception:  # the session may be gone already; its ephemerals go with it
                log.debug("bridge deregistration failed", exc_info=True)
            self.zk.remove_listener(self._on_session)
            self.events.emit("closed")
            self.events.close()

    # -- ZooKeeper: registration, watches, session --------------------------------------------

    def _register(self) -> None:
        ids = f"{ids_dir(self.group)}/{self.consumer_id}"
        marker = f"{bridge_marker_dir(self.group)}/{self.consumer_id}"
        data = encode_registration(TopicCount.static(dict.fromkeys(self.topics, 1)), int(time.time() * 1000))
        self._calls.ensure(ids_dir(self.group))
        self._calls.ensure(bridge_marker_dir(self.group))

        def build(tx):
            tx.create(ids, data, ephemeral=True)
            tx.create(marker, self.thread.encode(), ephemeral=True)

        results = self._calls.multi(ids, build)
        errors = [r for r in results if isinstance(r, Exception)]
        if errors and not isinstance(results[0], NodeExistsError):
            raise GroupshiftError(
                f"could not register {self.consumer_id} in the bridged group: {errors[0]!r}"
            )
        self._registered = True
        self.events.emit("registered", path=ids, session=self.zk.client_id[0] if self.zk.client_id else None)

    def _deregister(self) -> None:
        if not self._registered:
            return
        self._registered = False
        for path in (
            f"{ids_dir(self.group)}/{self.consumer_id}",
            f"{bridge_marker_dir(self.group)}/{self.consumer_id}",
        ):
            try:
                self.zk.delete(path)
            except NoNodeError:
                pass
            except KazooException as exc:  # the session's end removes them anyway
                log.info("group %s: could not remove %s (%r)", self.group, path, exc)
        self.events.emit("deregistered")

    def _on_session(self, state: str) -> None:
        if state == KazooState.LOST:  # ephemerals gone: registration, marker and owner znodes
            self._session_lost = True
            self._rejoin("the ZooKeeper session of the bridge expired")

    def _recover_session(self) -> None:
        """A new session: the claimed partitions may be a legacy member's now; register again."""
        self._session_lost = False
        with self._lock:
            lost, self._claimed = set(self._claimed), {}
        if lost:
            self.events.emit("partitions_lost", partitions=sorted(map(str, lost)), reason="session expired")
            call_listener(self._downstream, "on_partitions_lost", lost)
        if not self.exited:
            self._register()

    def _on_ids(self, children: list[str]) -> bool | None:
        if self._closing.is_set():
            return False
        if not self.exited:
            self._rejoin("the legacy group's membership changed")
        return None

    def _on_record(self, data: bytes | None, stat: Any) -> bool | None:
        if self._closing.is_set():
            return False
        if data is None:
            return None
        try:
            rec = R.decode(data, migration_path(self.group))
        except GroupshiftError as exc:
            log.warning("%s", exc)
            return None
        if rec.state == R.ROLLED_BACK:
            self._fatal = GroupshiftError(
                f"the live migration of group {self.group!r} was rolled back: the legacy consumers own the "
                f"group again; stop this {rec.dest} consumer"
            )
            self._rejoin("migration rolled back")
        elif rec.state in (R.SWITCHED, R.DONE) and not self._leaving:
            self._leaving = True
            self.events.emit("bridge_leaving", state=rec.state)
            self._rejoin("the migration switched the group to the coordinator")
        return None

    def _rejoin(self, why: str) -> None:
        """The group must be assigned again (scheme three: the leader computes the union again)."""
        self.member.request_rejoin(why)

    def read_union(self) -> tuple[dict[str, TopicCount], dict[str, int]]:
        """Every registration under `/consumers/<g>/ids` and the partition counts of their topics."""
        regs: dict[str, TopicCount] = {}
        for cid in self._calls.children_maybe(ids_dir(self.group)):
            got = self._calls.read_maybe(f"{ids_dir(self.group)}/{cid}")
            if got is None:
                continue  # left meanwhile
            try:
                regs[cid] = decode_registration(got[0].encode(), f"{ids_dir(self.group)}/{cid}")
            except InvalidRegistration as exc:
                log.warning("%s", exc)
        topics = {t for tc in regs.values() if not tc.is_wildcard for t in tc.streams}
        if any(tc.is_wildcard for tc in regs.values()):
            topics |= set(self._calls.children_maybe(BROKER_TOPICS))
        counts = {}
        for t in sorted(topics):
            got = self._calls.read_maybe(topic_path(t))
            if got is not None:
                counts[t] = len(decode_assignment(got[0].encode(), t))
        return regs, counts

    def _legacy_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        out: dict[TopicPartition, int | None] = {}
        for tp in partitions:
            got = self._calls.read_maybe(offset_path(self.group, tp.topic, tp.partition))
            text = got[0].strip() if got else ""
            out[tp] = int(text) if text.isdigit() else None
        return out

    # -- owner znodes ----------------------------------------------------------------------------

    def _claim_pending(self, force: bool = False) -> None:
        """Claim what was assigned but is still owned by someone else; hand the claimed on."""
        now = time.monotonic()
        with self._lock:
            if not self._pending or (not force and now < self._next_claim):
                return
            self._next_claim = now + CLAIM_RETRY_S
            todo = sorted(self._pending)
        got: dict[TopicPartition, int] = {}
        try:
            for tp in todo:
                try:
                    got[tp] = fencing.claim(self._calls, self.group, tp, self.thread)
                except NodeExistsError:
                    continue  # its previous owner has not released it yet
                self.events.emit("owner_created", partition=str(tp), thread=self.thread, epoch=got[tp])
        except Closing:
            return
        if not got:
            return
        with self._lock:
            self._pending -= set(got)
            self._claimed.update(got)
        self._catch_up(sorted(got))
        call_listener(self._downstream, "on_partitions_assigned", set(got))

    def _flush_deferred(self) -> None:
        """Retry the coordinator's half of commits it refused (the legacy half took effect)."""
        with self._lock:
            if not self._deferred or self.member.rebalance_in_progress:
                return
            todo = {tp: OffsetAndMetadata(off) for tp, off in self._deferred.items() if tp in self._claimed}
            self._deferred = {}
        if todo:
            try:
                self.member.commit(todo, self.member.generation)
            except CommitFailed:
                with self._lock:
                    for tp, om in todo.items():
                        self._deferred.setdefault(tp, om.offset)

    def _catch_up(self, partitions: list[TopicPartition]) -> None:
        """Bring the coordinator's offsets of newly claimed partitions up to the legacy ones."""
        legacy = self._legacy_offsets(partitions)
        coord = self.member.committed(partitions)
        behind = {
            tp: OffsetAndMetadata(off)
            for tp, off in legacy.items()
            if off is not None and (coord.get(tp) is None or coord[tp] < off)
        }
        if behind:
            try:
                self.member.commit(behind, self.member.generation)
                self.events.emit("catch_up", partitions={str(tp): om.offset for tp, om in behind.items()})
            except CommitFailed as exc:  # the group moved on; the next owner catches up instead
                log.info("group %s: catch-up commit refused: %s", self.group, exc)

    def _release(self, partitions: Iterable[TopicPartition]) -> None:
        """Delete our owner znodes (only those that still name us)."""
        for tp in sorted(partitions):
            path = owner_path(self.group, tp.topic, tp.partition)
            got = self._calls.read_maybe(path)
            if got is not None and got[0] == self.thread:
                self._calls.delete(path)
                self.events.emit("owner_deleted", partition=str(tp), reason="release")

    def _revoke(self, method: str, partitions: set[TopicPartition]) -> None:
        with self._lock:
            self._pending -= partitions
            mine = partitions if self.exited else partitions & set(self._claimed)
        try:
            if mine:
                call_listener(self._downstream, method, set(mine))  # the consumer commits here
        finally:
            if not self.exited:
                with self._lock:
                    for tp in mine:
                        self._claimed.pop(tp, None)
                try:
                    self._release(mine)
                except Closing:
                    pass

    def _assigned(self, partitions: set[TopicPartition]) -> None:
        if self._leaving and not self.exited:
            with self._lock:
                self.exited = True
                leftover, self._claimed, self._pending = set(self._claimed), {}, set()
            self._release(leftover)
            self._deregister()
            self.events.emit("bridge_exited")
        if self.exited:
            call_listener(self._downstream, "on_partitions_assigned", partitions)
            return
        with self._lock:
            self._pending |= partitions
        self._claim_pending(force=True)


class _Listener:
    """What the coordinator member calls back: claims and releases around the consumer's listener."""

    def __init__(self, bridge: BridgedMember):
        self.bridge = bridge

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self.bridge._revoke("on_partitions_revoked", set(partitions))

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.bridge._revoke("on_partitions_lost", set(partitions))

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self.bridge._assigned(set(partitions))


def _offset(om: OffsetAndMetadata | int) -> int:
    return om.offset if isinstance(om, OffsetAndMetadata) else int(om)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
