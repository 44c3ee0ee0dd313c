"""ZooKeeper's four-letter words (`ruok`, `srvr`, `mntr`, `wchc`) over a plain socket, no session.

Below both `core.zk` (the kazoo client factory) and `core.embedded` (the embedded server), which
both use it, so neither has to import the other to ask a server how it is.

    four_letter("127.0.0.1", 2181, "ruok")         # "imok"
    mntr("127.0.0.1", 2181)["zk_watch_count"]
"""

from __future__ import annotations

import socket


def four_letter(host: str, port: int, command: str, timeout: float = 2.0) -> str:
    """Send a four-letter word (`ruok`, `srvr`, `mntr`, `wchc`, ...) and return the server's answer."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(command.encode())
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def mntr(host: str, port: int) -> dict[str, str]:
    """ZooKeeper's `mntr` as a dict (`zk_packets_received`, `zk_watch_count`, ...)."""
    out = {}
    for line in four_letter(host, port, "mntr").splitlines():
        key, _, value = line.partition("\t")
        if key:
            out[key] = value
    return out
