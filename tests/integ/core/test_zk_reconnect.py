"""A `core.zk` client reconnects its session with bounded attempts (`core.zk_reconnect`), on real ZooKeeper.

Between the client and the server runs a proxy on loopback that, held, accepts connections and
answers nothing: what a client meets behind a proxy whose server is unreachable, or on a network
that drops its packets, where kazoo alone waits a whole session timeout for each attempt's answer.
"""

from __future__ import annotations

from core import zk_reconnect
from core.zk import connect
from tests.inspect_helpers import wait_for
from tests.zk_proxy import ZkProxy


def test_an_unanswered_reconnect_is_tried_again_within_the_bound_and_keeps_the_session(
    zk_server, monkeypatch
):
    monkeypatch.setattr(zk_reconnect, "RECONNECT_ANSWER_S", 0.2)
    proxy = ZkProxy(zk_server.host, zk_server.port)
    client = connect(f"127.0.0.1:{proxy.port}", session_timeout=6.0)
    try:
        session = client.client_id[0]
        proxy.hold()
        # kazoo alone waits 6 s (the session timeout) for the answer of one attempt; bounded, the
        # attempts follow one another, each given up after 0.2 s.
        wait_for(lambda: proxy.held >= 2, 4.0, "a second attempt to reconnect, the first left unanswered")
        proxy.restore()
        wait_for(lambda: client.connected, 10.0, "the client connected again through the proxy")
        assert client.client_id[0] == session  # the same session: the bound cut short no answer
        client.get("/")
    finally:
        client.stop()
        client.close()
        proxy.close()
