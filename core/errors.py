"""Errors a user can act on. Each message says what went wrong and what to do about it.

The CLI turns any `GroupshiftError` into one line on stderr and exit code 1, never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.types import TopicPartition


class GroupshiftError(Exception):
    """Base of every error groupshift raises on purpose."""


class ZooKeeperUnavailable(GroupshiftError):
    """ZooKeeper could not be reached (or the session could not be established) in time."""


class EmbeddedZooKeeperError(GroupshiftError):
    """The embedded ZooKeeper could not be started or stopped."""


class UnknownTopic(GroupshiftError):
    """The topic does not exist (neither in ZooKeeper nor in the log directory)."""


class UnknownGroup(GroupshiftError):
    """The consumer group does not exist."""


class CommitFailed(GroupshiftError):
    """An offset commit was refused because this member no longer owns the partitions.

    The group rebalanced (the member was fenced or its generation is stale); the records
    processed since the last commit will be delivered again to the partitions' new owner.
    `partitions`: the partitions refused when the others of the commit were written (scheme one
    fences each partition on its own); None when nothing was written.
    """

    def __init__(self, *args: object, partitions: Iterable[TopicPartition] | None = None):
        super().__init__(*args)
        self.partitions = None if partitions is None else frozenset(partitions)


class RebalanceFailed(GroupshiftError):
    """A rebalance could not complete."""


class GroupAuthorizationFailed(RebalanceFailed):
    """The coordinator's ACLs refuse this client the group (Kafka's GROUP_AUTHORIZATION_FAILED):
    an operator grants it (`groupshift acls add`, docs/security.md)."""
