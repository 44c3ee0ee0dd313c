"""The live migration's member side for scheme two: a `server` consumer in a bridged group.

`migrate run --from zk --to server --mode live` bridges a group as `--to coordinator` does
(`migrate.migration.bridge`): each scheme-two member registers a legacy consumer id with its
marker, claims a partition's legacy owner znode (bumping its fencing epoch) before fetching it,
commits to the legacy offsets first (fenced by that epoch) and then to the coordinator, and starts
a partition at the larger of the two offsets. What differs is who assigns: in scheme two the
coordinator does, among the scheme-two members only, over every partition; no member can make it
compute Kafka 0.8's decision. So a member splits the work in two:

* **granted**: what the coordinator gave it (incremental or draft form, as usual);
* **share**: what the legacy strategy (`range` / `roundrobin`) gives the bridged members as a
  whole over every registration under `/consumers/<g>/ids` (`bridge.union_assignment`) — the
  partitions the legacy members leave alone.

It fetches only `granted ∩ share` (once it holds the owner znode). The coordinator gives each
partition to one scheme-two member and the legacy strategy each to one kind, so no partition is
fetched twice, and the owner znode stays the one lock both kinds take. A change of
`/consumers/<g>/ids` does not make the member rejoin the coordinator group: it computes the share
again, releases (committing first) what left it and claims what entered it — partition by
partition, as the legacy members rebalance. Once the record reaches `switched` it leaves bridge
mode on its next `poll()`: owner znodes released, registration removed, and the rest of its grant
handed to the consumer (no legacy member is left, and the coordinator holds every offset).

    member = ServerBridgedMember(zk, "billing", ["clicks"], record, listener, lambda _, lst: make(lst))
"""

from __future__ import annotations

import threading
from typing import Any

from coordinator.layout import bridge_marker_dir
from core.membership import call_listener
from core.types import TopicPartition
from migrate.migration.bridge import BridgedMember, union_assignment


class ServerBridgedMember(BridgedMember):
    """A scheme-two member (a `ServerAssignedMember` or an `IncrementalMember`) while its group is
    bridged; see the module docstring."""

    def __init__(self, *args: Any, **kw: Any):
        """`BridgedMember`'s arguments; its `make_member(assignors, listener)` builds the scheme-two
        member (the assignors are unused: the coordinator assigns)."""
        self._granted: set[TopicPartition] = set()
        self._reshare = threading.Event()  # the registrations or the grant changed: compute the share
        self._reshare.set()
        super().__init__(*args, **kw)

    def poll(self, timeout: float = 0.0, join_timeout: float | None = None) -> None:
        """The member's group work, then the share: release what left it, claim what entered it."""
        if self._fatal is not None:
            raise self._fatal
        if self._session_lost:
            self._recover_session()
            self._reshare.set()
        self.member.poll(timeout, join_timeout)
        if self._leaving and not self.exited:
            self._exit()
        elif not self.exited and self._reshare.is_set():
            self._reshare.clear()
            self._apply_share(self._share())
        self._claim_pending()
        self._flush_deferred()

    # -- the share ------------------------------------------------------------------------------

    def _share(self) -> set[TopicPartition]:
        """The partitions the legacy strategy gives the bridged members, over every registration now."""
        regs, counts = self.read_union()
        bridged = set(self._calls.children_maybe(bridge_marker_dir(self.group)))
        members = {cid: cid for cid in regs if cid in bridged}
        assigned = union_assignment(self.strategy, regs, counts, members)
        return {tp for tps in assigned.values() for tp in tps}

    def _apply_share(self, share: set[TopicPartition]) -> None:
        with self._lock:
            drop = set(self._claimed) - share
            self._pending = (self._granted & share) - set(self._claimed) - drop
        if drop:
            self.events.emit("share_released", partitions=sorted(map(str, drop)))
            BridgedMember._revoke(self, "on_partitions_revoked", drop)  # commits, then releases

    def _exit(self) -> None:
        """Leave bridge mode: owner znodes and registration go; the whole grant is the consumer's."""
        with self._lock:
            self.exited = True
            claimed, self._claimed, self._pending = set(self._claimed), {}, set()
            granted = set(self._granted)
        self._release(claimed)
        self._deregister()
        self.events.emit("bridge_exited")
        if granted - claimed:
            call_listener(self._downstream, "on_partitions_assigned", granted - claimed)

    # -- what the coordinator member and ZooKeeper call back -------------------------------------

    def _assigned(self, partitions: set[TopicPartition]) -> None:
        with self._lock:
            self._granted |= partitions
        if self.exited:
            call_listener(self._downstream, "on_partitions_assigned", partitions)
        else:
            self._reshare.set()

    def _revoke(self, method: str, partitions: set[TopicPartition]) -> None:
        with self._lock:
            self._granted -= partitions
        super()._revoke(method, partitions)

    def _rejoin(self, why: str) -> None:
        """No rejoin (the coordinator's assignment stands): `poll()` computes the share again, and
        acts on a switch, a rollback or a new session."""
        self._reshare.set()
