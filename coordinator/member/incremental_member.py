"""Scheme two's incremental form on the member's side: ConsumerGroupHeartbeat (KIP-848).

`IncrementalMember` is a `CoordinatorMember` (coordinator discovery, connections, offsets, the
poll timer, close) whose group protocol is one heartbeat instead of JoinGroup/SyncGroup; it fills
in `group_member.GroupMember`'s hooks `join_group`, `heartbeat_period`, `heartbeats_now`,
`heartbeat` and `leave_group` (and overrides the public `commit`):

* joining is a heartbeat with member epoch 0 and the subscription; the answer carries the member
  id, its epoch and the partitions it may fetch now;
* the heartbeat thread sends its epoch every `heartbeat_interval_ms` (sooner when the coordinator's
  answer suggests a shorter interval: it does while the member waits for partitions that are being
  released), with the partitions it owns only while they are what the latest answer assigned
  (`owned_report`); an answer whose assignment differs from what it owns flags work for the next
  `poll()`;
* `poll()` reconciles on the caller's thread: `on_partitions_revoked(owned - assignment)` (the
  consumer commits them), then `on_partitions_assigned(assignment - owned)`, then a heartbeat at
  once that tells the coordinator what it now owns — which releases revoked partitions to their
  new owners. Partitions that stay are never revoked, and a member whose partitions do not move
  only sees its epoch change;
* FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: the partitions are reported lost and the member
  joins again with epoch 0;
* commits carry the member's current epoch; the coordinator refuses any other (STALE_MEMBER_EPOCH
  makes the member retry once with the epoch it holds now, if it still owns the partitions).

    member = IncrementalMember("billing", ["clicks"], bootstrap="10.0.0.5:9092", server_assignor="uniform")
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from coordinator.assignors.consumer_protocol import by_topic, partitions_of
from coordinator.member.connection import Connection, ConnectionLost, error_name
from coordinator.member.consumer_member import CoordinatorMember, log, offset_commit_request
from coordinator.member.state import Generation, MemberState
from coordinator.wire import codec as wire
from coordinator.wire import errors as E
from coordinator.wire.schema import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from core.errors import CommitFailed, GroupshiftError, RebalanceFailed
from core.types import OffsetAndMetadata, TopicPartition

# GROUP_ID_NOT_FOUND: the group is a classic one the node may not upgrade (its migration policy).
FATAL = (
    E.UNSUPPORTED_ASSIGNOR,
    E.INCONSISTENT_GROUP_PROTOCOL,
    E.GROUP_ID_NOT_FOUND,
    E.INVALID_SESSION_TIMEOUT,
    E.INVALID_REQUEST,
)
LEAVE_EPOCH = -1


def owned_report(
    owned: set[TopicPartition], target: set[TopicPartition] | None, reconciling: bool
) -> set[TopicPartition] | None:
    """The owned partitions a heartbeat reports, or None ("unchanged"): only what the member holds
    once it has acted on the latest answer, as Kafka's consumer sends them only after a completed
    reconciliation. A coordinator reads a report without a partition it had given the member as
    "never took it" and may give it to another member at once; a report sent between an answer
    that gave a partition and the caller's thread taking it (or while that thread moves toward an
    older answer) would let the member take it afterwards all the same: two owners, both
    committing at the member's current epoch."""
    if reconciling or (target is not None and target != owned):
        return None
    return owned


def _no_topic_sizes(topic: str) -> int | None:
    raise AssertionError("the coordinator assigns; an incremental member never reads topic sizes")


class IncrementalMember(CoordinatorMember):
    """A member of an incremental scheme-two group (see the module docstring)."""

    def __init__(self, group_id: str, topics, *, server_assignor: str | None = None, **kw):
        kw.pop("assignors", None)
        kw.pop("server_assigned", None)
        kw.setdefault("partitions_for", _no_topic_sizes)
        super().__init__(group_id, topics, assignors=("range",), **kw)
        self.server_assignor = server_assignor
        self.assignors = [server_assignor or "uniform"]
        self._target: set[TopicPartition] | None = None  # the assignment of the latest answer
        self._suggested: float | None = None  # the coordinator's heartbeat interval, seconds
        self._hb_lock = threading.Lock()  # one heartbeat at a time: answers apply in order
        self._reconciling = False  # the caller's thread is moving `_owned` toward a target

    # -- the heartbeat ---------------------------------------------------------------------------

    def _beat(self, conn, gen: Generation, joining: bool = False, leaving: bool = False, report=False):
        """Send one ConsumerGroupHeartbeat and apply its answer; returns the answer (None: no answer).
        `report`: sent by the caller's thread right after it reconciled (not while it reconciles);
        the owned partitions go with it unless a newer answer arrived meanwhile."""
        with self._cv:
            owned = owned_report(set(self._owned), self._target, self._reconciling and not report)
        body = ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=gen.member_id,
            member_epoch=LEAVE_EPOCH if leaving else 0 if joining else gen.generation_id,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            subscribed_topic_names=list(self.topics) if joining else None,
            server_assignor=self.server_assignor if joining else None,
            topic_partitions=None if owned is None else by_topic(owned),
        )
        self.stats["joins" if joining else "heartbeats"] += 1
        with self._hb_lock:
            try:
                resp = conn.request(wire.CONSUMER_GROUP_HEARTBEAT, body, self.request_timeout)
            except ConnectionLost as exc:
                self.mark_coordinator_unknown(str(exc))
                return None
            if not leaving:
                self._on_answer(gen, resp)
        return resp

    def _on_answer(self, sent: Generation, resp: ConsumerGroupHeartbeatResponse) -> None:
        code = resp.error_code
        if code == E.NONE:
            target = partitions_of(resp.assignment or [])
            with self._cv:
                if self._generation.member_id not in ("", sent.member_id) or self._closed:
                    return  # answered for an incarnation we already left behind
                self._generation = Generation(resp.member_epoch, resp.member_id, self.assignors[0])
                self._last_heartbeat_ok = time.monotonic()
                self._target = target
                if resp.heartbeat_interval_ms > 0:
                    self._suggested = resp.heartbeat_interval_ms / 1000
                if target == self._owned:
                    self._stable_generation = resp.member_epoch  # nothing moves: only the epoch
                    self._set_state(MemberState.STABLE)
                else:
                    self._rejoin_needed = True  # the next poll() reconciles
                self._cv.notify_all()
            return
        log.debug("group %s: ConsumerGroupHeartbeat answered %s", self.group_id, error_name(code))
        if E.fences_member(code):
            with self._cv:
                self._target = None
            self._reset_generation(f"heartbeat answered {error_name(code)}")
        elif E.coordinator_moved(code):
            self.mark_coordinator_unknown(f"heartbeat answered {error_name(code)}")
        elif code == E.GROUP_AUTHORIZATION_FAILED:
            self.refused("ConsumerGroupHeartbeat")
        elif code in FATAL:
            self._fail(
                RebalanceFailed(
                    f"group {self.group_id!r}: ConsumerGroupHeartbeat failed with {error_name(code)}: "
                    f"{resp.error_message or ''}"
                )
            )
        # COORDINATOR_LOAD_IN_PROGRESS and the rest: the next heartbeat tries again

    # -- the caller's thread: join and reconcile ---------------------------------------------------

    def join_group(self, deadline: float | None) -> None:
        """Join (epoch 0) if needed, then converge on the latest assignment, telling the coordinator
        at once what was let go so the partitions reach their new owners."""
        for _ in range(100):  # every turn makes progress; the bound only guards against a bug
            with self._cv:
                if self._closed or self._poll_timed_out or self._coordinator is None:
                    return
                conn, gen = self._join_conn, self._generation
                joined = bool(gen.member_id) and gen.generation_id > 0
                target = self._target
            if conn is None:
                return
            if not joined:
                with self._cv:
                    if self._closed:
                        return  # closed meanwhile (close() on another thread): CLOSED is terminal
                    self._set_state(MemberState.PREPARING_REBALANCE)
                    self._rejoin_needed = False
                if self._beat(conn, gen, joining=True) is None:
                    return
                with self._cv:
                    if self.fatal_error is not None or not self._generation.member_id:
                        return
                continue
            with self._cv:
                owned = set(self._owned)
            if target is None or target == owned:
                with self._cv:
                    if self._closed:
                        return
                    if self._target == self._owned:
                        joining = self.state == MemberState.PREPARING_REBALANCE
                        self._rejoin_needed = False
                        self._set_state(MemberState.STABLE)
                        self._stable_generation = self._generation.generation_id
                        self._cv.notify_all()
                    else:
                        continue
                if joining:  # joined with nothing to own: the listener hears so, as after a rebalance
                    self._call_listener("on_partitions_assigned", set())
                return
            with self._cv:
                self._reconciling = True
            try:
                self._reconcile(owned, target)
            finally:
                with self._cv:
                    self._reconciling = False
            if self._beat(conn, self._generation, report=True) is None:  # what we own now
                return

    def _reconcile(self, owned: set[TopicPartition], target: set[TopicPartition]) -> None:
        revoked, added = owned - target, target - owned
        if revoked:
            self._call_listener("on_partitions_revoked", revoked)  # the consumer commits them first
            with self._cv:
                self._owned -= revoked
        with self._cv:
            self._owned |= added
            self._stable_generation = self._generation.generation_id
            self._last_assignment = set(self._owned)
        # After every reconciliation, even one that only revoked (Kafka's listener contract: called
        # after each completed rebalance, with the partitions added, possibly none).
        self._call_listener("on_partitions_assigned", added)
        self.stats["rebalances"] += 1
        for fn in list(self.rebalance_listeners):
            fn(self._stable_generation, set(target))
        log.info(
            "group %s: %s at epoch %d owns %d partitions (-%d +%d)",
            self.group_id,
            self._generation.member_id,
            self._stable_generation,
            len(target),
            len(revoked),
            len(added),
        )

    # -- the heartbeat thread ----------------------------------------------------------------------

    def heartbeat_period(self) -> float:
        # The coordinator may ask for sooner (waiting for partitions being released): an answer
        # that does wakes the heartbeat thread's wait up, so the new period counts from the last beat.
        interval = self.heartbeat_interval_ms / 1000
        return min(interval, self._suggested or interval)

    def heartbeats_now(self) -> bool:
        gen = self._generation
        return bool(gen.member_id) and gen.generation_id > 0 and self.state != MemberState.UNJOINED

    def heartbeat(self, conn: Connection, gen: Generation) -> bool:
        resp = self._beat(conn, gen)
        return resp is not None and resp.error_code == E.NONE

    def leave_group(self, member_id: str, reason: str) -> None:
        """Leave: a heartbeat with member epoch -1."""
        with self._cv:
            conn, gen = self._ctl_conn, self._generation
        if conn is None or not gen.member_id:
            return
        resp = self._beat(conn, gen, leaving=True)
        log.info(
            "group %s: %s left (%s): %s",
            self.group_id,
            member_id,
            reason,
            "no answer" if resp is None else error_name(resp.error_code),
        )

    # -- offsets -----------------------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], generation: int) -> None:
        """OffsetCommit with the member's current epoch, for partitions it owns; `CommitFailed` when
        it was fenced or no longer owns them (the records go to their new owner)."""
        if not offsets:
            return
        with self._cv:
            standalone = generation == -1 and not self._threads
        if standalone:
            return super().commit(offsets, generation)
        for attempt in range(2):
            with self._cv:
                gen, owned = self._generation, set(self._owned)
                if not gen.member_id or gen.generation_id <= 0 or self.state == MemberState.CLOSED:
                    raise CommitFailed(
                        f"commit refused: the member holds no epoch ({self.state.value}); it was fenced or "
                        "left, so these records will be delivered again — keep calling poll()"
                    )
                if not set(offsets) <= owned:
                    raise CommitFailed(
                        f"commit refused: {sorted(set(offsets) - owned)} are no longer this member's; "
                        "their new owner reads them from the last commit"
                    )
            code = self._commit_as(offsets, gen)
            if code == E.NONE:
                return
            if code == E.STALE_MEMBER_EPOCH and attempt == 0:
                continue  # our epoch moved on meanwhile: commit with the one we hold now
            if E.fences_member(code) or code == E.STALE_MEMBER_EPOCH:
                raise CommitFailed(
                    f"commit refused by the coordinator ({error_name(code)}): member epoch "
                    f"{gen.generation_id} is not current; the records go to the partitions' new owner"
                )
            raise GroupshiftError(f"offset commit failed: {error_name(code)}")

    def _commit_as(self, offsets, gen: Generation) -> int:
        body = offset_commit_request(self.group_id, offsets, gen.generation_id, gen.member_id)
        resp = self._control_request(wire.OFFSET_COMMIT, body, retry_coordinator=True)
        errors = {p.error_code for t in resp.topics for p in t.partitions if p.error_code}
        return min(errors) if errors else E.NONE
