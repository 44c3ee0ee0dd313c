"""A TCP proxy on loopback in front of ZooKeeper, for tests that take ZooKeeper away from one client.

    proxy = ZkProxy(zk_server.host, zk_server.port)
    client = connect(f"127.0.0.1:{proxy.port}/chroot")
    proxy.cut()       # connections reset, new ones refused: ZooKeeper is gone
    proxy.hold()      # connections reset, new ones accepted and never answered: a proxy whose
                      # server is unreachable, or a network that drops packets
    proxy.restore()   # new connections forwarded again
    proxy.close()

`held` counts the connections accepted and left unanswered.
"""

from __future__ import annotations

import select
import socket
import threading


class ZkProxy:
    """Forwards loopback connections to ZooKeeper; `cut()` or `hold()` take it away (see above)."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.mode = "forward"
        self.held = 0
        self.conns: list[socket.socket] = []  # forwarded: closed by their pump
        self.unanswered: list[socket.socket] = []  # held
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                mode = self.mode
                if mode == "hold":
                    self.held += 1
                    self.unanswered.append(client)
                    continue
            if mode == "cut":
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        """Both directions on one thread, which alone closes both sockets (a socket closed under
        another thread's `recv` can hand its descriptor, and the next connection's bytes, to it)."""
        peer = {a: b, b: a}
        try:
            while True:
                for src in select.select([a, b], [], [])[0]:
                    data = src.recv(65536)
                    if not data:
                        return
                    peer[src].sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            a.close()
            b.close()

    def _take_away(self, mode: str) -> None:
        with self.lock:
            self.mode = mode
            conns, self.conns = self.conns, []
            unanswered, self.unanswered = self.unanswered, []
        for s in conns + unanswered:  # shut down, not closed: a pump's recv returns and it closes them
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for s in unanswered:
            s.close()

    def cut(self) -> None:
        self._take_away("cut")

    def hold(self) -> None:
        self._take_away("hold")

    def restore(self) -> None:
        with self.lock:
            self.mode = "forward"

    def close(self) -> None:
        self._take_away("cut")
        self.listener.close()
