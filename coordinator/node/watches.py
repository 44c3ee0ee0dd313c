"""WatchGroup on a coordinator node: members parked until their group has news for them.

Under schemes two and three a member hears of a rebalance in its next heartbeat answer, up to a
heartbeat interval after it started; scheme one's consumers hear at once, from a ZooKeeper watch.
A member that sends WatchGroup (docs/protocol.md) on a connection of its own is answered

* at once when a heartbeat would already tell it something (`core.heartbeat_due`: the group is
  rebalancing or past the member's generation), with the error when the node does not serve the
  group or the member is unknown, and quietly when it asked for no wait;
* `changed` as soon as its group has news for it: a classic group (scheme three, or the draft's
  scheme two) enters PreparingRebalance (every parked watch of the group is answered: every member
  has to rejoin); an incremental group's record is written (its epoch, its target or a member's
  partitions moved), and the core's `heartbeat_due` says this member now has partitions to give
  up or to take (only those members are answered: waking the whole group on every write would
  make each member heartbeat once per write, a herd of our own);
* not changed after `max_wait_ms` (at most `MAX_WAIT_MS`), and NOT_COORDINATOR when the node gives
  the group's shard up.

A parked watch holds its connection (a connection's answers stay in order), so a member sends
nothing else there; the parked watches are bounded by the node's connections, and one whose
connection closed is forgotten at once. Nothing here changes the core (it is only asked
`heartbeat_due`): the watch only makes a member send its heartbeat sooner, and the heartbeat is
served as any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from coordinator.node.connection import Pending
from coordinator.wire.errors import REBALANCE_IN_PROGRESS
from coordinator.wire.schema import WatchGroupRequest, WatchGroupResponse

MAX_WAIT_MS = 30_000  # the longest a watch is parked; a member asks again after each answer


class GroupWatches:
    """The parked WatchGroup requests of one node, by group (see the module docstring)."""

    def __init__(self) -> None:
        self._by_group: dict[str, dict[Pending, asyncio.TimerHandle]] = {}
        self._request_of: dict[Pending, WatchGroupRequest] = {}  # the group, member and generation

    def __bool__(self) -> bool:
        return bool(self._by_group)

    def __len__(self) -> int:
        return sum(len(w) for w in self._by_group.values())

    def park(self, pending: Pending, body: WatchGroupRequest) -> None:
        """Hold `pending` (its connection is busy with it) until it is woken or `max_wait_ms` passed."""
        pending.conn.busy = pending
        group_id = body.group_id
        wait = min(body.max_wait_ms, MAX_WAIT_MS) / 1000
        handle = asyncio.get_running_loop().call_later(wait, self._expire, pending)
        self._by_group.setdefault(group_id, {})[pending] = handle
        self._request_of[pending] = body

    def wake(self, group_id: str, error_code: int = 0) -> None:
        """Answer every watch of `group_id`: `changed`, or `error_code` when it is not 0."""
        for pending in list(self._by_group.get(group_id, ())):
            self._answer(pending, error_code)

    def wake_due(self, group_id: str, due: Callable[[str, str, int], int]) -> None:
        """Answer the watches of `group_id` whose member has news: `due(group, member id,
        generation)` (the core's `heartbeat_due`) is REBALANCE_IN_PROGRESS (`changed`) or an
        error; the others stay parked."""
        for pending in list(self._by_group.get(group_id, ())):
            body = self._request_of[pending]
            code = due(group_id, body.member_id, body.generation_id)
            if code:
                self._answer(pending, 0 if code == REBALANCE_IN_PROGRESS else code)

    def _answer(self, pending: Pending, error_code: int) -> None:
        self.forget(pending)
        pending.conn.answer(pending, WatchGroupResponse(error_code=error_code, changed=not error_code))

    def wake_where(self, pick: Callable[[str], bool], error_code: int) -> None:
        """`wake` every group `pick` names with `error_code` (a shard given up)."""
        for group_id in [g for g in self._by_group if pick(g)]:
            self.wake(group_id, error_code)

    def forget(self, pending: Pending) -> None:
        """Drop `pending` unanswered (its connection closed)."""
        body = self._request_of.pop(pending, None)
        if body is None:
            return
        group_id = body.group_id
        watches = self._by_group[group_id]
        watches.pop(pending).cancel()
        if not watches:
            del self._by_group[group_id]

    def _expire(self, pending: Pending) -> None:
        if pending not in self._request_of:  # answered or forgotten already
            return
        self.forget(pending)
        pending.conn.answer(pending, WatchGroupResponse(error_code=0))  # quiet: watch again
