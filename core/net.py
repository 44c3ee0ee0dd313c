"""Telling "nobody is there" from "not answering yet", before a client library's own connect.

    refusals("127.0.0.1:1,db:2181", timeout=2.0)   # [("127.0.0.1:1", "Connection refused"), ...]

A list of (address, reason) when every `HOST:PORT` (or `[v6]:PORT`) refuses the connection or does
not resolve; None as soon as one accepts, or when one cannot be told apart from a slow server (a
timeout, an unreachable route), which the client library then tries within its own bound.
"""

from __future__ import annotations

import socket


def address(hostport: str) -> tuple[str, int]:
    """`HOST:PORT` (`[v6]:PORT` too) as a socket address."""
    host, _, port = hostport.rpartition(":")
    return host.strip("[]"), int(port)


def refusals(addresses: str, timeout: float) -> list[tuple[str, str]] | None:
    reasons = []
    for hostport in addresses.split(","):
        try:
            with socket.create_connection(address(hostport), timeout=timeout):
                return None
        except (ConnectionRefusedError, socket.gaierror) as exc:
            reasons.append((hostport, exc.strerror or str(exc)))
        except OSError:
            return None
    return reasons
