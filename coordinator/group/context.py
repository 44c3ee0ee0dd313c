"""What the parts of the group coordinator core share: its settings, the groups, the current input.

The core (`coordinator/group/coordinator.py`) composes a membership part (`membership_manager.py`) and an
offsets part (`offset_manager.py`), as Kafka's `GroupCoordinatorShard` composes its
`GroupMetadataManager` and `OffsetMetadataManager`. Both parts read and write the same
`CoreContext`: the groups this node holds, the time of the input being handled, the outputs it
produced so far, and the writes whose outcome the core still waits for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator.group.messages import Output, Respond
from coordinator.group.metadata import Group
from coordinator.wire.schema import Response

#: Called by the core with a group id; returns 0 if this node serves the group, else the
#: error a group request gets (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR).
GroupCheck = Callable[[str], int]


@dataclass(frozen=True)
class CoordinatorConfig:
    """Kafka's broker settings (with Kafka's defaults) plus the two protocol-version switches."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    offsets_retention_ms: int = 10080 * 60 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = 300_000
    # docs/protocol.md: every dynamic member goes through MEMBER_ID_REQUIRED (JoinGroup v4+).
    # False gives the v0-v3 behaviour (added at once).
    require_known_member_id: bool = True
    # JoinGroup v9+ semantics for a static replacement in Stable (KIP-345); docs/protocol.md's JoinGroup
    # response has no `skip_assignment`, so the default is the v8 behaviour.
    supports_skip_assignment: bool = False


class CoreContext:
    """The state both parts of the core share; `now` and `out` belong to the input being handled."""

    __slots__ = ("config", "groups", "now", "out", "_pending_writes", "_write_seq")

    def __init__(self, config: CoordinatorConfig) -> None:
        self.config = config
        self.groups: dict[str, Group] = {}
        self.now = 0
        self.out: list[Output] = []
        self._pending_writes: dict[int, Any] = {}
        self._write_seq = 0

    def respond(self, token: Any, body: Response) -> None:
        self.out.append(Respond(token, body))

    def expect(self, pending: Any) -> int:
        """The token of a write whose outcome `GroupCoordinator.persisted` will report; `pending`
        (a frozen dataclass of the part that issued the write) comes back from `take_pending`."""
        self._write_seq += 1
        token = self._write_seq
        self._pending_writes[token] = pending
        return token

    def take_pending(self, token: int) -> Any:
        """What `expect` remembered for `token` (once), or None for an unknown token."""
        return self._pending_writes.pop(token, None)
