"""Ports for the servers a test starts itself, and starting again when another process took one.

A port chosen free can be bound by another process (a parallel test, a container) before the
server binds it. Starting a server is therefore retried on a new port when, and only when, the
server says its port is taken:

    port, proc = on_a_free_port(lambda p: groupshift("zk", "start", "--port", str(p), check=False),
                                taken=lambda proc: "is already in use" in proc.stderr)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from testing.zookeeper import free_port  # the one the ZooKeeper containers pin, retried the same way

T = TypeVar("T")
ATTEMPTS = 5

__all__ = ["free_port", "on_a_free_port"]


def on_a_free_port(start: Callable[[int], T], taken: Callable[[T], bool]) -> tuple[int, T]:
    """`start(port)` on a free port, again on another one while `taken(result)` says another
    process had bound it first (at most ATTEMPTS times)."""
    for _ in range(ATTEMPTS):
        port = free_port()
        result = start(port)
        if not taken(result):
            return port, result
    raise AssertionError(f"{ATTEMPTS} free ports in a row were taken before the server bound them")
