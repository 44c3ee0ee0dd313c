"""`KafkaUtils.createStream`'s arguments, checked: the 0.8 receiver's `kafkaParams` that apply, the
topics and their numThreads, the decoders, the storage level. Bad input is one `GroupshiftError`
line, before anything joins the group."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.errors import GroupshiftError
from core.scheme import Rebalancer
from pipeline.backends import rebalancer_of
from pipeline.limits import MAX_RECORDS_PER_BATCH

log = logging.getLogger(__name__)

#: kafkaParams keys this stream applies (others are accepted and ignored, with a warning, as 0.8's
#: ConsumerConfig ignored properties it did not know).
APPLIED_PARAMS = (
    "zookeeper.connect",
    "group.id",
    "auto.offset.reset",
    "zookeeper.session.timeout.ms",
    "rebalance.backoff.ms",
    "rebalance.max.retries",
    "partition.assignment.strategy",
)
#: Set by pyspark's own createStream, or 0.8 settings with no meaning here: accepted silently.
SILENT_PARAMS = ("zookeeper.connection.timeout.ms", "auto.commit.enable", "auto.commit.interval.ms")
#: Consumer options the stream sets itself (`consumer_options` may not).
OWN_OPTIONS = (
    "group_id",
    "topics",
    "rebalancer",
    "zk",
    "log",
    "log_root",
    "bootstrap",
    "listener",
    "enable_auto_commit",
    "auto_offset_reset",
    "session_timeout_ms",
    "assignors",
)
#: How long `ssc.stop(stopGraceFully=True)` waits for the batch in flight to commit.
GRACEFUL_STOP_SECONDS = 60.0
#: A planned batch that Spark has not reported as submitted after this long (its jobs were not
#: generated: another stream's or an output's driver-side code failed) is given up: read again.
UNSUBMITTED_SECONDS = 30.0


def utf8_decoder(s: bytes | None) -> str | None:
    """Decode bytes as UTF-8 (None stays None): the default key and value decoder, as in 0.8."""
    if s is None:
        return None
    return s.decode("utf-8")


@dataclass(frozen=True)
class Settings:
    """createStream's arguments, checked."""

    zk: str
    group: str
    threads: dict[str, int]
    reset: str  # "smallest" | "largest"
    rebalancer: Rebalancer
    max_records: int
    key_decoder: Callable[[bytes | None], Any]
    value_decoder: Callable[[bytes | None], Any]
    consumer_options: dict[str, Any] = field(default_factory=dict)


def settings_from(
    zk_quorum: Any,
    group_id: Any,
    topics: Any,
    kafka_params: Any,
    key_decoder: Any,
    value_decoder: Any,
    rebalancer: Any,
    max_records: Any,
    consumer_options: Any,
) -> Settings:
    """Check createStream's arguments; a GroupshiftError of one line for the first bad one."""
    from zk_rebalance.assignors import ASSIGNORS
    from zk_rebalance.layout import validate_group_id, validate_topic

    kind = rebalancer_of(rebalancer)
    if not isinstance(zk_quorum, str) or not zk_quorum.strip() or any(c.isspace() for c in zk_quorum):
        raise GroupshiftError(
            f"zkQuorum must be a ZooKeeper connect string 'host:port,...', not {zk_quorum!r}"
        )
    validate_group_id(group_id)
    if not isinstance(topics, Mapping) or not topics:
        raise GroupshiftError(f"topics must be a non-empty dict {{topic: numThreads}}, not {topics!r}")
    threads: dict[str, int] = {}
    for topic, n in topics.items():
        validate_topic(topic)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise GroupshiftError(f"numThreads of topic {topic} must be an integer of at least 1, not {n!r}")
        threads[topic] = n
    if kafka_params is None:
        kafka_params = {}
    if not isinstance(kafka_params, Mapping):
        raise GroupshiftError(f"kafkaParams must be a dict of Kafka 0.8 settings, not {kafka_params!r}")
    params = {str(k): v for k, v in kafka_params.items()}
    for key, given in (("zookeeper.connect", zk_quorum), ("group.id", group_id)):
        if key in params and str(params[key]) != given:
            raise GroupshiftError(
                f"kafkaParams {key}={params[key]!r} disagrees with the argument {given!r}: pass one value"
            )
    reset = str(params.get("auto.offset.reset", "largest"))
    if reset not in ("smallest", "largest"):
        raise GroupshiftError(
            f"auto.offset.reset must be 'smallest' or 'largest' (Kafka 0.8's spellings), not {reset!r}"
        )
    options = dict(consumer_options or {}) if isinstance(consumer_options, Mapping | None) else None
    if options is None:
        raise GroupshiftError(
            f"consumer_options must be a dict of pipeline.Consumer options, not {consumer_options!r}"
        )
    own = sorted(set(options) & set(OWN_OPTIONS))
    if own:
        raise GroupshiftError(
            f"consumer_options may not set {', '.join(own)}: createStream sets it from its arguments"
        )
    membership = dict(options.pop("membership_options", None) or {})
    if "zookeeper.session.timeout.ms" in params:
        options["session_timeout_ms"] = _positive(params, "zookeeper.session.timeout.ms")
    if "partition.assignment.strategy" in params:
        strategy = str(params["partition.assignment.strategy"])
        if strategy not in ASSIGNORS:
            raise GroupshiftError(
                f"partition.assignment.strategy must be one of {', '.join(ASSIGNORS)}, not {strategy!r}"
            )
        options["assignors"] = [strategy]
    if kind is Rebalancer.ZK:
        # Scheme one's opt-in fix: a member that lost a partition cannot commit it any more.
        membership.setdefault("fence_commits", True)
        if any(n > 1 for n in threads.values()):
            membership.setdefault("topic_streams", dict(threads))
        for key, option in (
            ("rebalance.backoff.ms", "rebalance_backoff_ms"),
            ("rebalance.max.retries", "rebalance_max_retries"),
        ):
            if key in params:
                membership[option] = _positive(params, key)
    options["membership_options"] = membership
    ignored = sorted(set(params) - set(APPLIED_PARAMS) - set(SILENT_PARAMS))
    if ignored:
        log.warning(
            "group %s: kafkaParams %s have no effect here and are ignored", group_id, ", ".join(ignored)
        )
    for name, fn in (("keyDecoder", key_decoder), ("valueDecoder", value_decoder)):
        if not callable(fn):
            raise GroupshiftError(f"{name} must be a function of bytes (or None), not {fn!r}")
    if (
        isinstance(max_records, bool)
        or not isinstance(max_records, int)
        or not 0 < max_records <= MAX_RECORDS_PER_BATCH
    ):
        raise GroupshiftError(
            f"max_records_per_batch must be between 1 and {MAX_RECORDS_PER_BATCH}, not {max_records!r}"
        )
    return Settings(
        zk=zk_quorum,
        group=group_id,
        threads=threads,
        reset=reset,
        rebalancer=kind,
        max_records=max_records,
        key_decoder=key_decoder,
        value_decoder=value_decoder,
        consumer_options=options,
    )


def _positive(params: Mapping[str, Any], key: str) -> int:
    value = params[key]
    try:
        n = int(str(value))
    except ValueError:
        n = 0
    if isinstance(value, bool) or n < 1:
        raise GroupshiftError(f"kafkaParams {key} must be a positive integer, not {value!r}")
    return n


def storage_level(level: Any) -> Any:
    from pyspark.storagelevel import StorageLevel

    if level is None:
        return StorageLevel.MEMORY_AND_DISK
    if not isinstance(level, StorageLevel):
        raise GroupshiftError(f"storageLevel must be a pyspark StorageLevel, not {level!r}")
    return level
