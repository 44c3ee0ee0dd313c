"""Fixtures of the migration tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def node(zk_connect):
    """One coordinator node process on the test's namespace (the live migrations need a leader)."""
    from coordinator.node.process import CoordinatorNodes

    with CoordinatorNodes(zk_connect, count=1) as nodes:
        yield nodes
