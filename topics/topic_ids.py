"""Topic ids: one stable, non-zero UUID per topic, kept where Kafka 2.8+ keeps it.

That is the `topic_id` field of `/brokers/topics/<t>`.

KIP-848's clients name assigned topics by id only, and Kafka's tools read a topic's id from its
registration znode. A topic gets its id on first need (`ensure_topic_id`): the id groupshift
wrote in the topic's data directory when it created the topic (`/groupshift/topics/<t>`), else a
new random one for a topic registered by another tool, written into the registration with a
versioned set, so two nodes minting at once agree on the first one written. The payload keeps
Kafka 0.8's fields and bytes otherwise; 0.8 consumers watching the znode see one data change.
A deleted and re-created topic has a new id.

    u = ensure_topic_id(zk, "clicks")     # uuid.UUID, never the zero UUID (written if need be)
    known_topic_id(zk, "clicks")          # the same, or None; never writes
    kafka_string(u)                        # "xKz2...": Kafka's form (URL-safe base64, no padding)
    from_kafka_string(kafka_string(u)) == u
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from kazoo.exceptions import BadVersionError, NoNodeError

from core.errors import UnknownTopic
from topics.errors import InvalidTopic
from topics.registry import kafka_topic_id, topic_id, topic_path

ZERO = uuid.UUID(int=0)
_ATTEMPTS = 5


def kafka_string(u: uuid.UUID) -> str:
    """Kafka's `Uuid.toString()`: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def from_kafka_string(text: str) -> uuid.UUID:
    """The UUID of Kafka's string form (ValueError if it is not one)."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a Kafka topic id")
    return uuid.UUID(bytes=raw)


def from_groupshift_id(hex_id: str) -> uuid.UUID:
    """The UUID of the id groupshift writes in a topic's data directory (32 hex digits)."""
    return uuid.UUID(hex=hex_id)


def _fresh() -> uuid.UUID:
    while True:
        u = uuid.uuid4()
        # Kafka reserves the zero id and ids whose string form starts with "-" (not a valid
        # command-line argument); skip both.
        if u != ZERO and not kafka_string(u).startswith("-"):
            return u


def with_topic_id(data: bytes, u: uuid.UUID) -> bytes:
    """`data` (a `/brokers/topics/<t>` payload) with `topic_id` set, every other field kept in order."""
    try:
        body = json.loads(data.decode("utf-8"))
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError):
        raise InvalidTopic(f"a topic registration is not a Kafka partition map: {data[:200]!r}") from None
    out = {"version": body.pop("version", 1), "topic_id": kafka_string(u)}
    body.pop("topic_id", None)
    out.update(body)
    return json.dumps(out, separators=(",", ":")).encode("utf-8")


def _registered(zk, name: str) -> tuple[bytes, Any, uuid.UUID | None]:
    """The registration's payload and stat, and the id in it (None: none, or unreadable)."""
    try:
        data, stat = zk.get(topic_path(name))
    except NoNodeError:
        raise UnknownTopic(f"topic {name!r} is not registered in ZooKeeper") from None
    found = kafka_topic_id(data)
    try:
        return data, stat, None if found is None else from_kafka_string(found)
    except ValueError:
        return data, stat, None  # unreadable: `ensure_topic_id` replaces it


def _groupshift_id(zk, name: str) -> uuid.UUID | None:
    mine = topic_id(zk, name)
    return from_groupshift_id(mine) if mine else None


def known_topic_id(zk, name: str) -> uuid.UUID | None:
    """The topic's id without writing anything: its registration's, else the one groupshift keeps
    for a topic it created, else None (a topic another tool registered, not given one yet)."""
    return _registered(zk, name)[2] or _groupshift_id(zk, name)


def ensure_topic_id(zk, name: str) -> uuid.UUID:
    """The topic's id, written into its registration first if it has none; raises `UnknownTopic`."""
    for _ in range(_ATTEMPTS):
        data, stat, found = _registered(zk, name)
        if found is not None:
            return found
        u = _groupshift_id(zk, name) or _fresh()
        try:
            zk.set(topic_path(name), with_topic_id(data, u), version=stat.version)
        except BadVersionError:
            continue  # changed meanwhile (another node minted, partitions added): read again
        except NoNodeError:
            raise UnknownTopic(f"topic {name!r} is not registered in ZooKeeper") from None
        return u
    raise UnknownTopic(f"topic {name!r} keeps changing in ZooKeeper; its id could not be written")
