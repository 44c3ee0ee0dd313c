"""How a groupshift ZooKeeper client reconnects: its retry policy and how long one attempt may wait.

`core.zk.connect` builds every kazoo client with `CONNECTION_RETRY` and `bound_reconnects(client)`.

kazoo waits for a server's answer to a connection attempt for the whole session timeout (divided
by the number of servers): the TCP connect, then the ZooKeeper handshake. While a network drops a
client's packets, or a proxy in front of the server accepts connections it cannot forward, every
attempt hangs that long; when the network heals, the client waits out the attempt under way (the
kernel's SYN retransmissions, at 1 s and 3 s, get through only if they fall within it) and a retry
backoff before its next attempt. Reconnecting a session is answered without a disk write (the
server looks the session up), so an attempt to reconnect one is bounded by `RECONNECT_ATTEMPT_S`:
one that gets no answer within it is given up and made again, and the client is connected within
about a second of ZooKeeper's return instead of up to a session timeout and a backoff later
(docs/recovery.md). Creating a session writes a transaction to the server's log: that attempt
keeps kazoo's full wait, so a slow disk never keeps a new client out.

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
#: How long one attempt to reconnect a session waits for the TCP connect, then for the server's
#: answer (never longer than kazoo's own bound, the session timeout per server). Above the kernel's
#: first SYN retransmission (1 s), so a connect whose first SYN was lost still succeeds.
RECONNECT_ATTEMPT_S = 2.0


def attempt_timeout(kazoo_timeout_s: float, reconnecting: bool) -> float:
    """How long one connection attempt waits for an answer, given kazoo's own bound.

    >>> attempt_timeout(10.0, reconnecting=False)   # a new session: kazoo's, the session timeout
    10.0
    >>> attempt_timeout(10.0, reconnecting=True)
    2.0
    >>> attempt_timeout(1.0, reconnecting=True)     # never longer than kazoo's
    1.0
    """
    return min(kazoo_timeout_s, RECONNECT_ATTEMPT_S) if reconnecting else kazoo_timeout_s


def _reconnecting(client: KazooClient) -> bool:
    return bool(client._session_id)  # kazoo forgets the id once the session expired


class _BoundedHandler(SequentialThreadingHandler):
    """kazoo's threading handler whose TCP connects to reconnect a session wait `attempt_timeout`."""

    client: KazooClient | None = None

    def create_connection(self, *args, **kwargs):
        if self.client is not None and kwargs.get("timeout") is not None:
            kwargs["timeout"] = attempt_timeout(kwargs["timeout"], _reconnecting(self.client))
        return super().create_connection(*args, **kwargs)


class _BoundedConnection(ConnectionHandler):
    """kazoo's connection whose handshake to reconnect a session waits `attempt_timeout`
    (`_invoke` is kazoo's exchange while the connection is being established, and only then)."""

    def _invoke(self, timeout, request, xid=None):
        return super()._invoke(attempt_timeout(timeout, _reconnecting(self.client)), request, xid)


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
