"""Listeners in Kafka's form: every protocol of each kind, and what is refused."""

from __future__ import annotations

import pytest

from core.errors import GroupshiftError
from security.listeners import PROTOCOLS, parse_listener


@pytest.mark.parametrize("kind", ["kafka", "native"])
def test_every_protocol_of_a_kind(kind):
    for name, (tls, sasl) in PROTOCOLS[kind].items():
        got = parse_listener(f"{name.lower()}://host-1.example:9093", kind)
        assert (got.protocol, got.host, got.port, got.tls, got.sasl) == (
            name,
            "host-1.example",
            9093,
            tls,
            sasl,
        )


@pytest.mark.parametrize(
    "value, kind, words",
    [
        ("SSL://h:1", "native", "that is the kafka listener's name"),
        ("TLS://h:1", "kafka", "that is the native listener's name"),
        ("FOO://h:1", "kafka", "unknown security protocol 'FOO'"),
        ("h", "kafka", "bad listener"),
        ("h:99999", "kafka", "bad listener"),
        (":9092", "kafka", "is not a host name"),
        ("a b:1", "native", "is not a host name"),
    ],
)
def test_bad_listeners(value, kind, words):
    with pytest.raises(GroupshiftError, match=words):
        parse_listener(value, kind)
