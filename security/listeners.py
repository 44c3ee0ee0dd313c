"""A listener's address and security protocol, written as Kafka writes its listeners.

    >>> parse_listener("SASL_SSL://0.0.0.0:9093", "kafka")
    Listener(protocol='SASL_SSL', host='0.0.0.0', port=9093)
    >>> parse_listener("127.0.0.1:9092", "native").tls
    False
    >>> parse_listener("TLS://[::1]:0", "native").host
    '::1'

The Kafka listener takes Kafka's four names; the native listener says `TLS` where Kafka says
`SSL` (`TLS://`, `SASL_TLS://`). A bare `HOST:PORT` is `PLAINTEXT`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.errors import GroupshiftError

Kind = Literal["kafka", "native"]

# protocol name -> (tls, sasl), per listener kind
PROTOCOLS: dict[str, dict[str, tuple[bool, bool]]] = {
    "kafka": {
        "PLAINTEXT": (False, False),
        "SSL": (True, False),
        "SASL_PLAINTEXT": (False, True),
        "SASL_SSL": (True, True),
    },
    "native": {
        "PLAINTEXT": (False, False),
        "TLS": (True, False),
        "SASL_PLAINTEXT": (False, True),
        "SASL_TLS": (True, True),
    },
}
MAX_HOST_LENGTH = 253


@dataclass(frozen=True)
class Listener:
    """`protocol` is one of `PROTOCOLS[kind]`; port 0 picks a free port."""

    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "TLS", "SASL_SSL", "SASL_TLS")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def secured(self) -> bool:
        return self.tls or self.sasl


def parse_listener(value: str, kind: Kind) -> Listener:
    """`[PROTOCOL://]HOST:PORT` as a `Listener`; raises `GroupshiftError` naming what is wrong."""
    names = PROTOCOLS[kind]
    expected = f"expected [{'|'.join(names)}://]HOST:PORT (PORT 0 picks a free port)"
    protocol, sep, address = value.partition("://")
    if not sep:
        protocol, address = "PLAINTEXT", value
    elif protocol.upper() not in names:
        other = "kafka" if kind == "native" else "native"
        hint = f" (that is the {other} listener's name)" if protocol.upper() in PROTOCOLS[other] else ""
        raise GroupshiftError(f"unknown security protocol {protocol!r} in {value!r}{hint}; {expected}")
    protocol = protocol.upper()
    host, colon, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not port.isdigit() or len(port) > 5 or not 0 <= int(port) < 65536:
        raise GroupshiftError(f"bad listener {value!r}; {expected}")
    if (
        not host
        or len(host) > MAX_HOST_LENGTH
        or any(ch.isspace() or not ch.isprintable() or ch in "/,[]" for ch in host)
    ):
        raise GroupshiftError(f"{host!r} in {value!r} is not a host name or address; {expected}")
    return Listener(protocol, host, int(port))
