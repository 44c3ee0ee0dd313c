"""WatchGroup on a coordinator node: members parked until their group has news for them.

Under schemes two and three a member hears of a rebalance in its next heartbeat answer, up to a
heartbeat interval after it started; scheme one's consumers hear at once, from a ZooKeeper watch.
A member that sends WatchGroup (docs/protocol.md) on a connection of its own is answered

* at once when a heartbeat would already tell it something (`core.heartbeat_due`: the group is
  rebalancing or past the member's generation), with the error when the node does not serve the
  group or the member is unknown, and quietly when it asked for no wait;
* `changed` as soon as its group has news: a classic group (scheme three, or the draft's scheme
  two) enters PreparingRebalance, or an incremental group's record is written (its epoch, its
  target or a member's partitions moved, so any member's next heartbeat may bring it something).
  Every parked watch of the group is answered; each member then heartbeats once;
* not changed after `max_wait_ms` (at most `MAX_WAIT_MS`), and NOT_COORDINATOR when the node gives
  the group's shard up.

A parked watch holds its connection (a connection's answers stay in order), so a member sends
nothing else there; the parked watches are bounded by the node's connections. Nothing here
touches the core: the watch only makes a member send its heartbeat sooner, and the heartbeat is
served as any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from coordinator.node.connection import Pending
from coordinator.wire.schema import WatchGroupResponse

MAX_WAIT_MS = 30_000  # the longest a watch is parked; a member asks again after each answer


class GroupWatches:
    """The parked WatchGroup requests of one node, by group (see the module docstring)."""

    def __init__(self) -> None:
        self._by_group: dict[str, dict[Pending, asyncio.TimerHandle]] = {}
        self._group_of: dict[Pending, str] = {}

    def __bool__(self) -> bool:
        return bool(self._by_group)

    def __len__(self) -> int:
        return sum(len(w) for w in self._by_group.values())

    def park(self, pending: Pending, group_id: str, max_wait_ms: int) -> None:
        """Hold `pending` (its connection is busy with it) until `wake` or `max_wait_ms`."""
        pending.conn.busy = pending
        wait = min(max_wait_ms, MAX_WAIT_MS) / 1000
        handle = asyncio.get_running_loop().call_later(wait, self._expire, group_id, pending)
        self._by_group.setdefault(group_id, {})[pending] = handle
        self._group_of[pending] = group_id

    def wake(self, group_id: str, error_code: int = 0) -> None:
        """Answer every watch of `group_id`: `changed`, or `error_code` when it is not 0."""
        watches = self._by_group.pop(group_id, None)
        if not watches:
            return
        answer = WatchGroupResponse(error_code=error_code, changed=not error_code)
        for pending, handle in watches.items():
            handle.cancel()
            del self._group_of[pending]
            pending.conn.answer(pending, answer)

    def wake_where(self, pick: Callable[[str], bool], error_code: int) -> None:
        """`wake` every group `pick` names with `error_code` (a shard given up)."""
        for group_id in [g for g in self._by_group if pick(g)]:
            self.wake(group_id, error_code)

    def forget(self, pending: Pending) -> None:
        """Drop `pending` unanswered (its connection closed)."""
        group_id = self._group_of.pop(pending, None)
        if group_id is None:
            return
        watches = self._by_group[group_id]
        watches.pop(pending).cancel()
        if not watches:
            del self._by_group[group_id]

    def _expire(self, group_id: str, pending: Pending) -> None:
        if self._group_of.get(pending) != group_id:
            return
        self.forget(pending)
        pending.conn.answer(pending, WatchGroupResponse(error_code=0))
