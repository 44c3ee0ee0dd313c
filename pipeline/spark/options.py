"""The `groupshift` source's options: parsed and checked before anything connects (pure).

Spelled as Spark's Kafka source spells them where they apply (`subscribe`, `startingOffsets`,
`maxOffsetsPerTrigger`, `failOnDataLoss`), case-insensitively as Spark reads options; the rest
name the group and how to reach it. A bad option is refused with one line, `SourceOptionError`.

>>> o = parse({"zk": "zk:2181", "group": "billing", "subscribe": "clicks, views"})
>>> o.topics, o.rebalancer.value, o.max_offsets_per_trigger
(('clicks', 'views'), 'zk', None)
>>> parse({"zk": "zk:2181", "group": "g", "subscribe": "t", "rebalancer": "kafka"})
Traceback (most recent call last):
...
pipeline.spark.options.SourceOptionError: rebalancer must be one of zk, server, coordinator, not 'kafka'
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from core.errors import GroupshiftError
from core.scheme import Rebalancer
from core.types import TopicPartition
from pipeline.limits import MAX_RECORDS_PER_BATCH

EARLIEST, LATEST = -2, -1  # Spark's Kafka source spells them so in a startingOffsets JSON
MAX_TOPICS = 1_000
MAX_TIMEOUT_MS = 3_600_000


class SourceOptionError(GroupshiftError, ValueError):
    """An option of the `groupshift` source that cannot be used (one line: which and why)."""


@dataclass(frozen=True)
class SourceOptions:
    zk: str
    group: str
    topics: tuple[str, ...]
    rebalancer: Rebalancer = Rebalancer.ZK
    incremental: bool = False
    bootstrap: str | None = None
    log_root: str | None = None
    starting: str = "earliest"  # earliest | latest | json
    starting_offsets: Mapping[TopicPartition, int] = field(default_factory=dict)  # with "json"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    rebalance_backoff_ms: int | None = None  # scheme one's rebalance.backoff.ms
    watch_group: bool = True  # schemes two and three: WatchGroup, hear of a rebalance at once
    command_config: str | None = None  # a Kafka client properties file: TLS and SASL to the nodes

    def consumer_options(self) -> dict:
        """Keyword arguments of `pipeline.Consumer` for this source's member."""
        membership: dict = {}
        if self.rebalancer is Rebalancer.ZK:
            # Scheme one's opt-in fix: a member that lost a partition cannot commit it any more,
            # so a batch planned before the loss is never published over its successor's.
            membership["fence_commits"] = True
            if self.rebalance_backoff_ms is not None:
                membership["rebalance_backoff_ms"] = self.rebalance_backoff_ms
                membership["rebalance_max_retries"] = 50
        else:
            membership["watch_group"] = self.watch_group
        return {
            "rebalancer": self.rebalancer,
            "incremental": self.incremental,
            "zk": self.zk,
            "bootstrap": self.bootstrap,
            "log_root": self.log_root,
            "session_timeout_ms": self.session_timeout_ms,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest" if self.starting != "latest" else "latest",
            "membership_options": membership,
            "security": self.command_config,
        }


KNOWN = {
    "zk",
    "group",
    "subscribe",
    "rebalancer",
    "incremental",
    "bootstrap",
    "logroot",
    "startingoffsets",
    "maxoffsetspertrigger",
    "failondataloss",
    "sessiontimeoutms",
    "heartbeatintervalms",
    "rebalancebackoffms",
    "watchgroup",
    "commandconfig",
}
SPELLING = {
    "logroot": "logRoot",
    "startingoffsets": "startingOffsets",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "failondataloss": "failOnDataLoss",
    "sessiontimeoutms": "sessionTimeoutMs",
    "heartbeatintervalms": "heartbeatIntervalMs",
    "rebalancebackoffms": "rebalanceBackoffMs",
    "watchgroup": "watchGroup",
    "commandconfig": "commandConfig",
}


def parse(options: Mapping[str, str]) -> SourceOptions:
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    unknown = sorted(set(opts) - KNOWN)
    if unknown:
        raise SourceOptionError(
            f"unknown option {unknown[0]!r} for the groupshift source; it takes "
            + ", ".join(SPELLING.get(k, k) for k in sorted(KNOWN))
        )
    zk = opts.get("zk") or os.environ.get("GROUPSHIFT_ZK", "")
    if not zk.strip():
        raise SourceOptionError("option 'zk' is required (HOST:PORT[/chroot]; or set $GROUPSHIFT_ZK)")
    group = opts.get("group", "").strip()
    if not group:
        raise SourceOptionError("option 'group' is required: the consumer group this stream is a member of")
    topics = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
    if not topics:
        raise SourceOptionError("option 'subscribe' is required: a comma-separated list of topics")
    if len(topics) > MAX_TOPICS or len(set(topics)) != len(topics):
        raise SourceOptionError(f"'subscribe' must name at most {MAX_TOPICS} distinct topics")
    try:
        rebalancer = Rebalancer(opts.get("rebalancer", "zk").strip())
    except ValueError:
        raise SourceOptionError(
            f"rebalancer must be one of {', '.join(Rebalancer.names())}, not {opts['rebalancer']!r}"
        ) from None
    incremental = _flag(opts, "incremental", False)
    if incremental and rebalancer is not Rebalancer.SERVER:
        raise SourceOptionError(
            "incremental=true is scheme two's incremental form: use it with rebalancer=server"
        )
    starting, starting_offsets = _starting(opts.get("startingoffsets", "earliest"), topics)
    limit = opts.get("maxoffsetspertrigger")
    return SourceOptions(
        zk=zk.strip(),
        group=group,
        topics=topics,
        rebalancer=rebalancer,
        incremental=incremental,
        bootstrap=opts.get("bootstrap") or None,
        command_config=_command_config(opts.get("commandconfig")),
        log_root=opts.get("logroot") or None,
        starting=starting,
        starting_offsets=starting_offsets,
        max_offsets_per_trigger=None
        if limit is None
        else _int(limit, "maxOffsetsPerTrigger", 1, MAX_RECORDS_PER_BATCH),
        fail_on_data_loss=_flag(opts, "failondataloss", True),
        session_timeout_ms=_int(
            opts.get("sessiontimeoutms", "10000"), "sessionTimeoutMs", 100, MAX_TIMEOUT_MS
        ),
        heartbeat_interval_ms=_int(
            opts.get("heartbeatintervalms", "3000"), "heartbeatIntervalMs", 10, MAX_TIMEOUT_MS
        ),
        rebalance_backoff_ms=None
        if "rebalancebackoffms" not in opts
        else _int(opts["rebalancebackoffms"], "rebalanceBackoffMs", 1, MAX_TIMEOUT_MS),
        watch_group=_flag(opts, "watchgroup", True),
    )


def _flag(opts: Mapping[str, str], key: str, default: bool) -> bool:
    value = opts.get(key)
    if value is None:
        return default
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise SourceOptionError(f"{SPELLING.get(key, key)} must be true or false, not {value!r}")


def _int(text: str, name: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise SourceOptionError(f"{name} must be a whole number between {low} and {high}, not {text!r}")
    return value


def _starting(text: str, topics: tuple[str, ...]) -> tuple[str, dict[TopicPartition, int]]:
    """earliest | latest | {"topic": {"0": 23, "1": -2}} (-2 earliest, -1 latest), for partitions
    the group has never committed."""
    text = text.strip()
    if text in ("earliest", "latest"):
        return text, {}
    try:
        data = json.loads(text)
        offsets = {
            TopicPartition(t, int(p)): int(off) for t, parts in data.items() for p, off in parts.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise SourceOptionError(
            'startingOffsets must be earliest, latest or JSON like {"clicks": {"0": 23, "1": -2}}, '
            f"not {text[:60]!r}"
        ) from None
    stray = sorted({tp.topic for tp in offsets} - set(topics))
    if stray:
        raise SourceOptionError(f"startingOffsets names topic {stray[0]!r}, which 'subscribe' does not")
    if any(off < EARLIEST or tp.partition < 0 for tp, off in offsets.items()):
        raise SourceOptionError("startingOffsets: offsets are >= 0, or -2 (earliest) / -1 (latest)")
    return "json", offsets


def _command_config(path: str | None) -> str | None:
    """The client properties file, checked now (a bad one is refused before Spark starts)."""
    if not path:
        return None
    from security.client_config import load

    try:
        load(path)
    except GroupshiftError as exc:
        raise SourceOptionError(f"option 'commandConfig': {exc}") from None
    return path
