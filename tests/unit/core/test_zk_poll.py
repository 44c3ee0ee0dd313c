"""core.zk_poll: kazoo's socket wait with a poll object answers as kazoo's selector_select does."""

from __future__ import annotations

import socket

import pytest
from kazoo.handlers.utils import selector_select

from core.zk_poll import poll_select


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _same(rlist, wlist, timeout):
    got, want = poll_select(rlist, wlist, [], timeout), selector_select(rlist, wlist, [], timeout)
    assert [sorted(map(id, x)) for x in got] == [sorted(map(id, x)) for x in want]
    return got


def test_readable_writable_and_neither(pair):
    a, b = pair
    assert _same([a], [], 0) == ([], [], [])  # nothing to read yet
    assert _same([], [a], 0) == ([], [a], [])  # writable at once
    # kazoo never waits on one socket both ways (selector_select would list it twice, or as readable only)
    assert poll_select([a], [a], [], 0) == ([], [a], [])
    b.send(b"x")
    assert _same([a, b], [], 0.5) == ([a], [], [])
    assert _same([a.fileno()], [], 0) == ([a.fileno()], [], [])  # a descriptor works too


def test_a_hang_up_is_readable(pair):
    a, b = pair
    b.close()
    readable, _, _ = poll_select([a], [], [], 0.5)
    assert readable == [a] and a.recv(1) == b""


@pytest.mark.parametrize("timeout, error", [(-1, ValueError), ("1", TypeError)])
def test_a_bad_timeout_is_refused(pair, timeout, error):
    with pytest.raises(error):
        poll_select([pair[0]], [], [], timeout)


def test_a_closed_socket_is_refused(pair):
    a, _ = pair
    a.close()
    with pytest.raises(ValueError, match="Invalid event mask or fd"):
        poll_select([a], [], [], 0)
