"""A consumer group on any broker that speaks Kafka's protocol, through confluent-kafka's AdminClient.

The one module that imports confluent-kafka. `migrate.migration.to_kafka` (the `--to kafka` migration) and
`offsets export|import --bootstrap` read and write a group's committed offsets with it:

    with KafkaTarget("127.0.0.1:9093") as t:      # reachable within TIMEOUT_S, else one line
                                                   # (at once when every address refuses)
        t.partitions(["clicks"])                   # {"clicks": 4}, or None for a missing topic
        t.offsets("billing", [TopicPartition("clicks", 0)])
        t.members("billing")                       # [] / names / None (no DescribeGroups there)
        t.commit("billing", {TopicPartition("clicks", 0): 42})
        t.delete_group("billing")                  # False where DeleteGroups is not served

Brokers differ in what they serve. Kafka answers an OffsetFetch for all of a group's partitions;
librdkafka's mock cluster only for named ones, so `offsets` asks for both and joins them. Where
DescribeGroups is not served (the mock cluster), `members` returns None and `check_idle` falls
back to the broker's own guard: an admin commit (generation -1) into a group with members is
refused (UNKNOWN_MEMBER_ID), probed by committing again an offset the group already has. Every
call is bounded by TIMEOUT_S; librdkafka's own log lines are dropped (errors come back as one
line each).
"""

from __future__ import annotations

import logging
import re
import shlex
import socket
import struct
import time

from core.errors import GroupshiftError, UnknownGroup
from core.extras import require
from core.net import address, refusals
from core.types import TopicPartition
from security.client_config import PLAINTEXT, ClientSecurity

TIMEOUT_S = 10.0
MAX_PARTITIONS = 200_000
_BOOTSTRAP = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
_NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group has no offset for the partition
# What a broker answers an admin commit into a group that has members (Kafka: UNKNOWN_MEMBER_ID;
# also seen: ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS).
_ACTIVE_ERRORS = ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS")

DESCRIBE_GROUPS, DELETE_GROUPS = 15, 42  # Kafka's api keys

_quiet = logging.getLogger("groupshift.librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


# librdkafka's local error codes for a refused SASL authentication and a failed TLS setup
_AUTHENTICATION, _SSL = -169, -181
GROUP_DENIED, TOPIC_DENIED = "GROUP_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED"
# Topics asked for by name when a listing lacks them: the listing leaves out the topics this
# principal may not describe, so only a named ask tells "hidden" (TOPIC_AUTHORIZATION_FAILED)
# from "missing".
MAX_NAMED_ASKS = 100


class KafkaUnreachable(GroupshiftError):
    """No broker of the bootstrap list answered in time."""


class NotAuthorized(GroupshiftError):
    """The broker's ACLs refuse this client's principal a group or a topic (Kafka's
    GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED)."""


def check_bootstrap(bootstrap: str) -> str:
    """`HOST:PORT[,HOST:PORT...]`, else a one-line error."""
    parts = [p.strip() for p in (bootstrap or "").split(",")]
    for p in parts:
        m = _BOOTSTRAP.match(p)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise GroupshiftError(f"--bootstrap {bootstrap!r}: expected HOST:PORT[,HOST:PORT...]")
    return ",".join(parts)


def _err_name(err) -> str:
    try:
        return err.name()
    except AttributeError:
        return str(err)


def _reason(exc: Exception) -> str:
    arg = exc.args[0] if exc.args else exc
    try:
        return f"{arg.name()}: {arg.str()}"
    except AttributeError:
        return str(exc)


class KafkaTarget:
    """An AdminClient on `bootstrap`, checked to be reachable when opened."""

    def __init__(self, bootstrap: str, timeout: float = TIMEOUT_S, security: ClientSecurity | None = None):
        self.bootstrap = check_bootstrap(bootstrap)
        self.timeout = timeout
        self.security = security or PLAINTEXT  # TLS and SASL to the brokers (--command-config)
        self._admin = None
        self._apis: set[int] | None = None
        self._refusal: str | None = None  # the broker refused the TLS handshake or the credentials

    def __enter__(self) -> KafkaTarget:
        return self.open()

    def __exit__(self, *exc) -> None:
        self._admin = None

    def open(self) -> KafkaTarget:
        AdminClient = require("confluent_kafka.admin", "kafka").AdminClient

        refused = refusals(self.bootstrap, min(self.timeout, 3.0))
        if refused:  # said at once, not after librdkafka's timeout
            why = refused[0][1] if len(refused) == 1 else "; ".join(f"{a}: {r}" for a, r in refused)
            raise KafkaUnreachable(
                f"cannot reach a Kafka-protocol broker at {self.bootstrap}: nothing accepts connections "
                f"there ({why}); check --bootstrap"
            )
        ms = int(self.timeout * 1000)
        self._admin = AdminClient(
            {
                "bootstrap.servers": self.bootstrap,
                "logger": _quiet,
                "socket.connection.setup.timeout.ms": ms,
                "socket.timeout.ms": ms,
                "error_cb": self._on_error,
                # Metadata asked for a topic by name must not create it (the admin client is a
                # producer to librdkafka, whose default is to let the broker create it).
                "allow.auto.create.topics": False,
                **self.security.confluent(),
            }
        )
        self._metadata()
        return self

    # -- reads -------------------------------------------------------------------------------------

    def serves(self, api_key: int) -> bool:
        """Whether the first bootstrap broker advertises `api_key` (ApiVersions v0, asked once).

        Asked before DeleteGroups: librdkafka 2.16 aborts the process (a queue refcount assertion)
        some time after a DeleteGroups that the broker does not serve, so it is never sent there.
        """
        if self._apis is None:
            self._apis = _api_keys(self.bootstrap.split(",")[0], self.timeout, self.security)
        return self._apis is None or api_key in self._apis

    def _metadata(self, topic: str | None = None):
        KafkaException = require("confluent_kafka", "kafka").KafkaException

        deadline = time.monotonic() + self.timeout
        while True:
            # In slices, serving librdkafka's error callback between them: a broker that refuses
            # this client's TLS handshake or SASL credentials is said at once, not as a timeout.
            try:
                return self._admin.list_topics(topic=topic, timeout=min(0.5, self.timeout))
            except KafkaException as exc:
                self._admin.poll(0)
                if self._refusal is not None:
                    raise GroupshiftError(
                        f"the broker at {self.bootstrap} refused this client ({self._refusal}); "
                        "check the --command-config file's sasl.* and ssl.* settings"
                    ) from None
                if time.monotonic() >= deadline:
                    raise KafkaUnreachable(
                        f"cannot reach a Kafka-protocol broker at {self.bootstrap} within "
                        f"{self.timeout:g} s ({_reason(exc)}); check --bootstrap"
                    ) from None

    def _on_error(self, err) -> None:
        """librdkafka's error callback: remember an authentication or TLS refusal."""
        text = err.str()
        if err.code() in (_AUTHENTICATION, _SSL) or "SSL handshake failed" in text:
            self._refusal = f"{err.name()}: {text}"

    def partitions(
        self, topics: list[str] | None = None, operation: str = "Describe"
    ) -> dict[str, int | None]:
        """Partition count of each topic (None where the broker does not have it); all topics if None.

        A topic the listing lacks is asked for by name (the first MAX_NAMED_ASKS of them): one this
        client may not describe raises `NotAuthorized` (naming `operation`, what the caller needs)
        instead of passing for missing."""
        md = self._metadata()
        have = {
            name: len(t.partitions)
            for name, t in md.topics.items()
            if t.error is None and not name.startswith("__")
        }
        if topics is None:
            return have
        for name in [t for t in topics if t not in have][:MAX_NAMED_ASKS]:
            asked = self._metadata(name).topics.get(name)
            if asked is not None and asked.error is not None and _err_name(asked.error) == TOPIC_DENIED:
                raise self._denied(f"reading topic {name!r}", TOPIC_DENIED, "topic", name, operation)
        return {t: have.get(t) for t in topics}

    def _denied(self, what: str, code: str, resource: str, name: str, operation: str) -> NotAuthorized:
        """The one line for an ACL refusal: who was refused what, and the ACL that grants it."""
        who = self.security.principal
        return NotAuthorized(
            f"{what} on {self.bootstrap} was refused: {code} (the broker's ACLs do not let {who} "
            f"{operation.lower()} the {resource}); an operator grants it with `groupshift acls add "
            f"--allow-principal {shlex.quote(who)} --operation {operation} --{resource} "
            f"{shlex.quote(name)}` (kafka-acls.sh's options on a Kafka cluster)"
        )

    def _denied_partition(self, doing: str, group: str, k, operation: str) -> NotAuthorized:
        """`_denied` for a partition's error in an OffsetFetch or OffsetCommit answer."""
        code = _err_name(k.error)
        what = f"{doing} the offset of {k.topic}:{k.partition} of group {group!r}"
        if code == GROUP_DENIED:
            return self._denied(what, code, "group", group, operation)
        return self._denied(what, code, "topic", k.topic, operation)

    def check_partitions(self, tps: list[TopicPartition]) -> None:
        counts = self.partitions(sorted({tp.topic for tp in tps}), operation="Read")  # to commit
        for tp in sorted(tps):
            n = counts[tp.topic]
            if n is None:
                raise GroupshiftError(
                    f"topic {tp.topic!r} does not exist on {self.bootstrap}; create it there first "
                    f"(with at least {max(t.partition for t in tps if t.topic == tp.topic) + 1} partitions)"
                )
            if tp.partition >= n:
                raise GroupshiftError(
                    f"topic {tp.topic} has {n} partitions on {self.bootstrap}; partition {tp.partition} "
                    "does not exist there"
                )

    def _result(self, futures: dict, group: str, what: str, operation: str):
        KafkaException = require("confluent_kafka", "kafka").KafkaException

        try:
            return futures[group].result(timeout=self.timeout + 5)
        except KafkaException as exc:
            if _err_name(exc.args[0]) == GROUP_DENIED:
                raise self._denied(
                    f"{what} of group {group!r}", GROUP_DENIED, "group", group, operation
                ) from None
            raise GroupshiftError(
                f"{what} of group {group!r} on {self.bootstrap} failed ({_reason(exc)})"
            ) from None
        except TimeoutError:
            raise KafkaUnreachable(
                f"{what} of group {group!r} on {self.bootstrap} got no answer within {self.timeout:g} s"
            ) from None

    def offsets(self, group: str, tps: list[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """The group's committed offsets: all the broker lists, and those of `tps` (asked by name)."""
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka import TopicPartition as KTP

        asks = [None] + ([[KTP(tp.topic, tp.partition) for tp in sorted(tps)]] if tps else [])
        out: dict[TopicPartition, int] = {}
        for ask in asks:
            futures = self._admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, ask)], request_timeout=self.timeout
            )
            got = self._result(futures, group, "reading the offsets", "Describe")
            for k in got.topic_partitions:
                if k.error is not None and _err_name(k.error) == "UNKNOWN_TOPIC_OR_PART":
                    continue
                if k.error is not None and _err_name(k.error) in (GROUP_DENIED, TOPIC_DENIED):
                    raise self._denied_partition("reading", group, k, "Describe")
                if k.error is not None:
                    raise GroupshiftError(
                        f"reading the offset of {k.topic}:{k.partition} of group {group!r} on "
                        f"{self.bootstrap} failed ({_err_name(k.error)})"
                    )
                if k.offset >= 0:
                    out[TopicPartition(k.topic, k.partition)] = k.offset
        return out

    def members(self, group: str) -> list[str] | None:
        """Who is in the group (`client_id (member_id)`); None when the broker serves no DescribeGroups."""
        KafkaException = require("confluent_kafka", "kafka").KafkaException

        if not self.serves(DESCRIBE_GROUPS):
            return None
        futures = self._admin.describe_consumer_groups([group], request_timeout=self.timeout)
        try:
            d = futures[group].result(timeout=self.timeout + 5)
        except KafkaException as exc:
            if _err_name(exc.args[0]) == "_UNSUPPORTED_FEATURE":
                return None
            if _err_name(exc.args[0]) == "GROUP_ID_NOT_FOUND":
                return []
            if _err_name(exc.args[0]) == GROUP_DENIED:
                raise self._denied(
                    f"describing group {group!r}", GROUP_DENIED, "group", group, "Describe"
                ) from None
            raise GroupshiftError(
                f"describing group {group!r} on {self.bootstrap} failed ({_reason(exc)})"
            ) from None
        except TimeoutError:
            raise KafkaUnreachable(
                f"describing group {group!r} on {self.bootstrap} got no answer within {self.timeout:g} s"
            ) from None
        return sorted(f"{m.client_id} ({m.member_id})" for m in d.members)

    def check_idle(self, group: str, known: dict[TopicPartition, int] | None = None) -> str:
        """Raise `GroupActive` if the group has members; returns how that was checked."""
        from migrate.schemes.writes import GroupActive

        names = self.members(group)
        if names:
            shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
            raise GroupActive(
                f"group {group!r} has {len(names)} live member(s) on {self.bootstrap}: {shown}; "
                "stop them first"
            )
        if names is not None:
            return "DescribeGroups"
        known = self.offsets(group) if known is None else known
        if not known:
            return "not checkable (no DescribeGroups, no offset to probe): the broker refuses the write"
        tp = sorted(known)[0]
        self.commit(group, {tp: known[tp]})  # the same offset again: refused if the group has members
        return f"probe commit of {tp.topic}:{tp.partition} (no DescribeGroups)"

    # -- writes ------------------------------------------------------------------------------------

    def commit(self, group: str, offsets: dict[TopicPartition, int], batch: int = 1000, progress=None) -> int:
        """Write the offsets (admin commits, `batch` per request); returns the requests made."""
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka import TopicPartition as KTP

        from migrate.schemes.writes import GroupActive

        tps = sorted(offsets)
        requests = 0
        for i in range(0, len(tps), batch):
            chunk = [KTP(tp.topic, tp.partition, offsets[tp]) for tp in tps[i : i + batch]]
            futures = self._admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, chunk)], request_timeout=self.timeout
            )
            got = self._result(futures, group, "committing the offsets", "Read")
            requests += 1
            for k in got.topic_partitions:
                if k.error is None:
                    continue
                name = _err_name(k.error)
                if name in (GROUP_DENIED, TOPIC_DENIED):
                    raise self._denied_partition("committing", group, k, "Read")
                if name in _ACTIVE_ERRORS:
                    raise GroupActive(
                        f"{self.bootstrap} refused the commit into group {group!r} ({name}): the group "
                        "has live members there; stop them first"
                    )
                raise GroupshiftError(
                    f"{self.bootstrap} refused the offset of {k.topic}:{k.partition} for group {group!r} "
                    f"({name})"
                )
            if progress is not None:
                progress(min(i + batch, len(tps)), len(tps))
        return requests

    def delete_group(self, group: str) -> bool:
        """Delete the group and its offsets (DeleteGroups); False when the broker does not serve it."""
        KafkaException = require("confluent_kafka", "kafka").KafkaException

        if not self.serves(DELETE_GROUPS):
            return False
        futures = self._admin.delete_consumer_groups([group], request_timeout=self.timeout)
        try:
            futures[group].result(timeout=self.timeout + 5)
        except KafkaException as exc:
            name = _err_name(exc.args[0])
            if name == "_UNSUPPORTED_FEATURE":
                return False
            if name == "GROUP_ID_NOT_FOUND":
                return True
            if name == GROUP_DENIED:
                raise self._denied(f"deleting group {group!r}", name, "group", group, "Delete") from None
            if name == "NON_EMPTY_GROUP":
                from migrate.schemes.writes import GroupActive

                raise GroupActive(
                    f"{self.bootstrap} refused to delete group {group!r}: it has live members"
                ) from None
            raise GroupshiftError(
                f"deleting group {group!r} on {self.bootstrap} failed ({_reason(exc)})"
            ) from None
        except TimeoutError:
            raise KafkaUnreachable(
                f"deleting group {group!r} on {self.bootstrap} got no answer within {self.timeout:g} s"
            ) from None
        return True

    def watermarks(self, tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start, log end) of each partition (ListOffsets)."""
        KafkaException = require("confluent_kafka", "kafka").KafkaException
        from confluent_kafka import TopicPartition as KTP
        from confluent_kafka.admin import OffsetSpec

        out: dict[TopicPartition, tuple[int, int]] = {}
        for spec, i in ((OffsetSpec.earliest(), 0), (OffsetSpec.latest(), 1)):
            futures = self._admin.list_offsets(
                {KTP(tp.topic, tp.partition): spec for tp in tps}, request_timeout=self.timeout
            )
            for ktp, f in futures.items():
                tp = TopicPartition(ktp.topic, ktp.partition)
                try:
                    r = f.result(timeout=self.timeout + 5)
                except KafkaException as exc:
                    if _err_name(exc.args[0]) == TOPIC_DENIED:
                        raise self._denied(
                            f"reading the log range of {tp.topic}:{tp.partition}",
                            TOPIC_DENIED,
                            "topic",
                            tp.topic,
                            "Describe",
                        ) from None
                    raise GroupshiftError(
                        f"reading the log range of {tp.topic}:{tp.partition} on {self.bootstrap} failed "
                        f"({_reason(exc)})"
                    ) from None
                lo, hi = out.get(tp, (0, 0))
                out[tp] = (r.offset, hi) if i == 0 else (lo, r.offset)
        return out


def _api_keys(hostport: str, timeout: float, security: ClientSecurity) -> set[int] | None:
    """The api keys a broker advertises (ApiVersions v0, which a SASL listener answers before
    authentication); None if it could not be asked."""
    try:
        with _socket(hostport, timeout, security) as s:
            header = struct.pack(">hhih", 18, 0, 1, len(b"groupshift")) + b"groupshift"
            s.sendall(struct.pack(">i", len(header)) + header)
            size = struct.unpack(">i", recv_exactly(s, 4))[0]
            body = recv_exactly(s, size)
        _, error, n = struct.unpack_from(">ihi", body)
        if error:
            return None
        return {struct.unpack_from(">h", body, 10 + 6 * i)[0] for i in range(n)}
    except (OSError, struct.error, ValueError):
        return None


def _socket(hostport: str, timeout: float, security: ClientSecurity) -> socket.socket:
    sock = socket.create_connection(address(hostport), timeout=timeout)
    if not security.tls:
        return sock
    try:
        return security.ssl_context().wrap_socket(sock, server_hostname=address(hostport)[0])
    except BaseException:
        sock.close()
        raise


def recv_exactly(s: socket.socket, n: int) -> bytes:
    """`n` bytes from `s`, or ConnectionError when the peer closes first."""
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def no_group(group: str, bootstrap: str) -> UnknownGroup:
    return UnknownGroup(f"group {group!r} has no committed offsets on {bootstrap}; check the name")
