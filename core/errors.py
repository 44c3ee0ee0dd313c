"""Errors a user can act on. Each message says what went wrong and what to do about it.

The CLI turns any `GroupshiftError` into one line on stderr and exit code 1, never a traceback.
"""

from __future__ import annotations


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
    """


class RebalanceFailed(GroupshiftError):
    """A rebalance could not complete."""
