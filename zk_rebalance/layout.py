"""Kafka 0.8's consumer layout in ZooKeeper: paths, ids, names and the registration JSON, byte-exact.

Everything here is pure (no I/O). docs/zk_rebalance.md describes the layout.

    cid = consumer_id_string("grp", "host1-1420070400000-1a2b3c4d")   # "grp_host1-1420070400000-1a2b3c4d"
    sub = TopicCount.static({"t1": 2, "t2": 1})
    encode_registration(sub, 1420070400000)
    # b'{"version":1,"subscription":{"t1":2,"t2":1},"pattern":"static","timestamp":"1420070400000"}'
    sub.thread_ids(cid, topics_in_cluster=[])["t1"]    # [ThreadId(cid, 0), ThreadId(cid, 1)]
"""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from core.errors import GroupshiftError
from topics.errors import InvalidTopic

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
INTERNAL_TOPICS = frozenset({"__consumer_offsets"})
# 0.8.2's Topic.validate: 255 characters (0.10 lowered it to 249 for log directory names).
MAX_TOPIC_LENGTH = 255
_LEGAL = re.compile(r"[a-zA-Z0-9._-]*")


class InvalidGroupId(GroupshiftError):
    """A group id Kafka 0.8 refuses (`Config.validateChars`)."""


class InvalidRegistration(GroupshiftError):
    """An ids node that is not a 0.8 consumer registration (e.g. pykafka's plain topic name)."""


# -- names ---------------------------------------------------------------------------------------


def validate_group_id(group: str) -> str:
    """`group.id` as 0.8.2 checks it: required, only ASCII alphanumerics, `.`, `_` and `-`."""
    if not isinstance(group, str) or not group:
        raise InvalidGroupId("group.id is required: pass a non-empty group id such as 'my-group'")
    if not _LEGAL.fullmatch(group):
        raise InvalidGroupId(
            f"group.id {group} is illegal, contains a character other than ASCII alphanumerics, "
            "'.', '_' and '-'; rename the group"
        )
    return group


def validate_topic(topic: str) -> str:
    """Kafka 0.8.2's `Topic.validate`: non-empty, not `.`/`..`, at most 255 legal characters."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopic("topic name is illegal, can't be empty")
    if topic in (".", ".."):
        raise InvalidTopic('topic name cannot be "." or ".."')
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopic(f"topic name is illegal, can't be longer than {MAX_TOPIC_LENGTH} characters")
    if not _LEGAL.fullmatch(topic):
        raise InvalidTopic(
            f"topic name {topic} is illegal, contains a character other than ASCII alphanumerics, "
            "'.', '_' and '-'"
        )
    return topic


# -- paths (ZKGroupDirs / ZKGroupTopicDirs) ----------------------------------------------------


def ids_dir(group: str) -> str:
    return f"/consumers/{group}/ids"


def owners_dir(group: str, topic: str) -> str:
    return f"/consumers/{group}/owners/{topic}"


def owner_path(group: str, topic: str, partition: int) -> str:
    return f"/consumers/{group}/owners/{topic}/{partition}"


def offset_path(group: str, topic: str, partition: int) -> str:
    return f"/consumers/{group}/offsets/{topic}/{partition}"


def epoch_path(group: str, topic: str, partition: int) -> str:
    """groupshift's fencing epoch (opt-in); 0.8 tools never look under `owner_epochs`."""
    return f"/consumers/{group}/owner_epochs/{topic}/{partition}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


# -- consumer and thread ids -------------------------------------------------------------------


def consumer_id_string(group: str, consumer_id: str | None = None) -> str:
    """`<group>_<host>-<ms>-<uuid8>` as `ZookeeperConsumerConnector.consumerIdString`."""
    if consumer_id is None:
        msb = uuid.uuid4().int >> 64  # UUID.getMostSignificantBits, Long.toHexString (no padding)
        consumer_id = f"{socket.gethostname()}-{int(time.time() * 1000)}-{format(msb, 'x')[:8]}"
    return f"{group}_{consumer_id}"


class ThreadId(NamedTuple):
    """`ConsumerThreadId`: ordered (as 0.8 does) by its string form, e.g. `c-0 < c-1 < c-10 < c-2`."""

    consumer: str
    thread: int

    def __str__(self) -> str:
        return f"{self.consumer}-{self.thread}"


def parse_thread_id(owner: str) -> ThreadId:
    """Invert `str(ThreadId)` (0.10's describe tool cuts at the last `-`)."""
    consumer, _, n = owner.rpartition("-")
    return ThreadId(consumer, int(n)) if n.isdigit() and consumer else ThreadId(owner, -1)


# -- subscriptions (TopicCount / TopicFilter) ---------------------------------------------------


def normalise_regex(raw: str) -> str:
    """`TopicFilter.regex`: trimmed, `,` → `|`, spaces removed, surrounding quotes stripped."""
    regex = raw.strip().replace(",", "|").replace(" ", "")
    regex = re.sub(r"""^["']+""", "", regex)
    regex = re.sub(r"""["']+$""", "", regex)
    try:
        re.compile(regex)
    except re.error as exc:
        raise GroupshiftError(f"{raw} is an invalid regex ({exc}); fix the topic filter") from None
    return regex


@dataclass(frozen=True)
class Whitelist:
    """Consume every topic whose whole name matches `regex` (Java `String.matches`)."""

    regex: str

    def __post_init__(self):
        object.__setattr__(self, "regex", normalise_regex(self.regex))

    def allows(self, topic: str, exclude_internal: bool = True) -> bool:
        return bool(re.fullmatch(self.regex, topic)) and not (exclude_internal and topic in INTERNAL_TOPICS)


@dataclass(frozen=True)
class Blacklist:
    """Consume every topic whose whole name does *not* match `regex`."""

    regex: str

    def __post_init__(self):
        object.__setattr__(self, "regex", normalise_regex(self.regex))

    def allows(self, topic: str, exclude_internal: bool = True) -> bool:
        return not re.fullmatch(self.regex, topic) and not (exclude_internal and topic in INTERNAL_TOPICS)


PATTERN_STATIC, PATTERN_WHITE, PATTERN_BLACK = "static", "white_list", "black_list"


@dataclass(frozen=True)
class TopicCount:
    """A consumer's `TopicCount`: static `{topic: streams}` or one filter with a stream count."""

    pattern: str
    streams: dict[str, int] = field(default_factory=dict)  # static: topic -> n; wildcard: regex -> n
    filter: Whitelist | Blacklist | None = None

    @classmethod
    def static(cls, topics: dict[str, int]) -> TopicCount:
        for t, n in topics.items():
            validate_topic(t)
            if not isinstance(n, int) or n < 1:
                raise GroupshiftError(f"number of streams for topic {t} must be at least 1, not {n!r}")
        return cls(PATTERN_STATIC, dict(topics))

    @classmethod
    def wildcard(cls, topic_filter: Whitelist | Blacklist, num_streams: int) -> TopicCount:
        if not isinstance(num_streams, int) or num_streams < 1:
            raise GroupshiftError(f"number of streams must be at least 1, not {num_streams!r}")
        pattern = PATTERN_WHITE if isinstance(topic_filter, Whitelist) else PATTERN_BLACK
        return cls(pattern, {topic_filter.regex: num_streams}, topic_filter)

    @property
    def is_wildcard(self) -> bool:
        return self.filter is not None

    def thread_ids(self, consumer: str, topics_in_cluster: list[str] | None = None) -> dict:
        """`getConsumerThreadIdsPerTopic`: topic → thread ids; a wildcard expands over the given topics."""
        if self.filter is None:
            per_topic = self.streams
        else:
            n = next(iter(self.streams.values()))
            per_topic = {t: n for t in (topics_in_cluster or []) if self.filter.allows(t)}
        return {t: [ThreadId(consumer, i) for i in range(n)] for t, n in per_topic.items()}


def json_escape(s: str) -> str:
    """`Utils.JSONEscapeString` (applied to a wildcard's regex before it becomes a JSON key)."""
    out = []
    for c in s:
        code = ord(c)
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif code <= 0x1F or 0x7F <= code <= 0x9F:
            out.append(f"\\u{code:04x}")
        else:
            out.append(c)
    return "".join(out)


_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "/": "\\/",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


def encode_registration(sub: TopicCount, timestamp_ms: int) -> bytes:
    """The ids node payload exactly as 0.8.2's `Json.encode` writes it (no spaces, this key order).

    `Json.encode` quotes strings without escaping them; topic names cannot need escaping, and a
    wildcard's regex is escaped by `JSONEscapeString` first, as 0.8 does.
    """
    keys = sub.streams if sub.filter is None else {json_escape(k): v for k, v in sub.streams.items()}
    subscription = ",".join(f'"{k}":{int(v)}' for k, v in keys.items())
    return (
        f'{{"version":1,"subscription":{{{subscription}}},"pattern":"{sub.pattern}",'
        f'"timestamp":"{int(timestamp_ms)}"}}'
    ).encode()


def decode_registration(data: bytes, path: str = "?") -> TopicCount:
    """Parse an ids node as `TopicCount.constructTopicCount`; raises `InvalidRegistration` naming `path`."""
    try:
        body = json.loads(data.decode("utf-8"))
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
        pattern, sub = body["pattern"], body["subscription"]
        if not isinstance(sub, dict) or not all(isinstance(v, int) for v in sub.values()):
            raise ValueError("subscription is not a map of stream counts")
    except (ValueError, KeyError, UnicodeDecodeError) as exc:
        raise InvalidRegistration(
            f"{path} is not a Kafka 0.8 consumer registration ({exc}): {data[:120]!r}; "
            "another client wrote it (pykafka writes a plain topic name) - remove it or use another group"
        ) from None
    if sub and pattern in (PATTERN_WHITE, PATTERN_BLACK):
        regex, n = next(iter(sub.items()))
        filt = Whitelist(regex) if pattern == PATTERN_WHITE else Blacklist(regex)
        return TopicCount(pattern, {filt.regex: n}, filt)
    return TopicCount(PATTERN_STATIC if pattern == PATTERN_STATIC else pattern, dict(sub))
