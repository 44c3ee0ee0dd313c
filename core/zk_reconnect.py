"""How a groupshift ZooKeeper client reconnects: its retry policy and how long one attempt may wait.

`core.zk.connect` builds every kazoo client with `CONNECTION_RETRY` and `bound_reconnects(client)`.

kazoo gives each connection attempt the whole session timeout (divided by the number of servers)
for its TCP connect, and as much again for the server's answer to the handshake. While a network
drops a client's packets, or a proxy in front of the server accepts connections it cannot
forward, every attempt hangs that long; when the network heals, the client waits out the attempt
under way (the kernel retransmits a SYN 1 s, then 3 s after the first: the connect succeeds only
at one of those) and a retry backoff before its next attempt: up to a session timeout and 1.4 s
after ZooKeeper's return. An attempt to reconnect a session is bounded instead: its TCP connect by
`RECONNECT_TCP_S` (a live server's kernel answers a SYN at once, however busy the server), the
answer by `RECONNECT_ANSWER_S` (reconnecting a session costs the server no disk write: it looks the
session up). An attempt given up is made again after the backoff, so a client is connected within
about a second of ZooKeeper's return, wherever its attempts stood (docs/recovery.md). Creating a
session writes it to the server's log first: that attempt keeps kazoo's full wait, so a slow disk
never keeps a new client out.

    client = KazooClient(hosts=..., handler=handler(), connection_retry=dict(CONNECTION_RETRY), ...)
    bound_reconnects(client)   # before client.start()
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.protocol.connection import ConnectionHandler

#: kazoo's connection retry: its default backoff grows to an hour between attempts. 0.1 s, growing
#: to 0.25 s (kazoo adds up to 40 % of jitter): a returning server is tried again within a third of
#: a second, and a herd of clients still spreads over a few hundred milliseconds.
CONNECTION_RETRY = dict(max_tries=-1, delay=0.1, backoff=1.5, max_delay=0.25)
#: How long the TCP connect of an attempt to reconnect a session may take: past the kernel's first
#: SYN retransmission (1 s), so one lost SYN costs no attempt, and short of its second (3 s).
RECONNECT_TCP_S = 1.5
#: How long an attempt to reconnect a session waits for the server's answer to the handshake (and
#: a TLS handshake, which the server's process runs).
RECONNECT_ANSWER_S = 2.0


def attempt_timeout(kazoo_timeout_s: float, reconnecting: bool, bound_s: float) -> float:
    """How long one step of a connection attempt waits, given kazoo's own bound.

    >>> attempt_timeout(10.0, reconnecting=False, bound_s=RECONNECT_TCP_S)   # a new session: kazoo's
    10.0
    >>> attempt_timeout(10.0, reconnecting=True, bound_s=RECONNECT_TCP_S)
    1.5
    >>> attempt_timeout(1.0, reconnecting=True, bound_s=RECONNECT_ANSWER_S)  # never longer than kazoo's
    1.0
    """
    return min(kazoo_timeout_s, bound_s) if reconnecting else kazoo_timeout_s


def _reconnecting(client: KazooClient) -> bool:
    return bool(client._session_id)  # kazoo forgets the id once the session expired


class _BoundedHandler(SequentialThreadingHandler):
    """kazoo's threading handler whose connects to reconnect a session wait `RECONNECT_TCP_S`
    (`RECONNECT_ANSWER_S` with TLS, whose handshake is part of the connect)."""

    client: KazooClient | None = None

    def create_connection(self, *args, **kwargs):
        if self.client is not None and kwargs.get("timeout") is not None:
            bound = RECONNECT_ANSWER_S if kwargs.get("use_ssl") else RECONNECT_TCP_S
            kwargs["timeout"] = attempt_timeout(kwargs["timeout"], _reconnecting(self.client), bound)
        return super().create_connection(*args, **kwargs)


class _BoundedConnection(ConnectionHandler):
    """kazoo's connection whose handshake to reconnect a session waits `RECONNECT_ANSWER_S`
    (`_invoke` is kazoo's exchange while the connection is being established, and only then)."""

    def _invoke(self, timeout, request, xid=None):
        bounded = attempt_timeout(timeout, _reconnecting(self.client), RECONNECT_ANSWER_S)
        return super()._invoke(bounded, request, xid)


def handler() -> SequentialThreadingHandler:
    """The handler to build a client with (`KazooClient(handler=handler(), ...)`)."""
    return _BoundedHandler()


def bound_reconnects(client: KazooClient) -> None:
    """Bound `client`'s attempts to reconnect its session (see the module docstring); call it
    before `client.start()`, on a client built with `handler()`."""
    if isinstance(client.handler, _BoundedHandler):
        client.handler.client = client
    old = client._connection
    client._connection = _BoundedConnection(
        client, old.retry_sleeper, logger=old.logger, sasl_options=old.sasl_options
    )
