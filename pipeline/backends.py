"""How a `pipeline.Consumer` becomes a member of its group: one factory per rebalancer (`BACKENDS`).

    member = BACKENDS[Rebalancer.SERVER](consumer, ["clicks"], listener, offsets_only=False)

* `Rebalancer.ZK` — scheme one: a `zk_rebalance.ZkGroupMember` (Kafka 0.8's ZooKeeper watches),
  on a ZooKeeper session of its own; for manual assignment only the group's offsets (`ZkOffsets`).
* `Rebalancer.SERVER` — scheme two: a `ServerAssignedMember` (the draft form: the coordinator
  assigns with the first of `assignors`), or, `incremental=True`, an
  `IncrementalMember` (KIP-848's incremental form); while `migrate run --to server --mode live`
  bridges the group from scheme one, wrapped in a `migrate.migration.bridge_server.ServerBridgedMember`.
* `Rebalancer.COORDINATOR` — scheme three: a `coordinator.member.consumer_member.CoordinatorMember` (the
  group's leader assigns); while `migrate run --mode live` bridges the group from scheme one, a
  `migrate.migration.bridge.BridgedMember` that joins through the bridge, beside the legacy consumers.

Each factory reads the consumer's options (`Consumer._options`, `_membership_options`) and its
ZooKeeper client; with `offsets_only` the member is not started and serves only `commit` and
`committed` (manual assignment).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from core.errors import GroupshiftError
from core.scheme import Rebalancer
from core.types import OffsetAndMetadata, TopicPartition

log = logging.getLogger("pipeline.consumer")  # what the consumer logs, under its name as before

#: What a consumer imports to build its member under any scheme, much of it lazily (below): named
#: for the processes that import it ahead of forking members (`experiments.launcher`,
#: `pipeline.spark.warm_runner`).
MEMBER_MODULES = (
    "pipeline.consumer",
    "pipeline.backends",
    "zk_rebalance.member",
    "coordinator.member.consumer_member",
    "coordinator.member.incremental_member",
    "migrate.migration.bridge",
)


def rebalancer_of(rebalancer: str | Rebalancer) -> Rebalancer:
    """`rebalancer` (a spelling or the enum) as a `Rebalancer`, or the consumer's GroupshiftError."""
    try:
        return Rebalancer(rebalancer)
    except ValueError:
        raise GroupshiftError(
            f"rebalancer must be one of {', '.join(Rebalancer.names())}, not {rebalancer!r}"
        ) from None


def zk_member(consumer: Any, topics: list[str], listener: object | None, offsets_only: bool) -> Any:
    """Scheme one: Kafka 0.8's ZooKeeper-watch member (manual assignment: its offsets only)."""
    if offsets_only:
        return ZkOffsets(consumer.zk, consumer.group_id)
    from zk_rebalance.member import ZkGroupMember

    o = consumer._options
    options = {
        "session_timeout_ms": o["session_timeout_ms"],
        "assignor": o["assignors"][0],
        "auto_commit": False,  # the consumer commits its own positions (auto-commit included)
        **consumer._membership_options,
    }
    # `topic_streams` {topic: n}: 0.8's topicCountMap, n consumer streams registered per topic
    # (they weigh the range assignment); topics it leaves out have one.
    streams = options.pop("topic_streams", None)
    subscription = {t: streams.get(t, 1) for t in topics} if streams else topics
    return ZkGroupMember(consumer._zk_connect, consumer.group_id, subscription, listener=listener, **options)


def server_member(consumer: Any, topics: list[str], listener: object | None, offsets_only: bool) -> Any:
    """Scheme two: the coordinator assigns (classic, or the incremental form)."""
    from coordinator.member.consumer_member import ServerAssignedMember
    from coordinator.member.incremental_member import IncrementalMember

    o = consumer._options
    # Scheme two: the coordinator assigns with the first strategy named, and the member
    # reads no ZooKeeper (only to find the coordinator when no bootstrap is given). The
    # incremental form's strategies are the coordinator's `uniform` (default) and `range`.
    given = o["assignors"][:1] if o["assignors_given"] else []
    make = ServerAssignedMember if not consumer.incremental else IncrementalMember
    kind = {"server_assignor": (given or [None])[0]} if consumer.incremental else {}
    options = dict(consumer._membership_options)
    bridge_log = options.pop("bridge_event_log", None)

    def member(listener: object | None) -> Any:
        return make(
            consumer.group_id,
            topics,
            zk=None if o["bootstrap"] else consumer.zk,
            bootstrap=o["bootstrap"],
            assignors=given or ["range"],
            listener=listener,
            session_timeout_ms=o["session_timeout_ms"],
            heartbeat_interval_ms=o["heartbeat_interval_ms"],
            max_poll_interval_ms=o["max_poll_interval_ms"],
            client_id=consumer.client_id,
            coordinator_timeout_ms=o["coordinator_timeout_ms"],
            security=o["security"],
            **kind,
            **options,
            poll_driven=not offsets_only,
        )

    # A consumer given only a bootstrap address and no ZooKeeper reads none (no bridge for it).
    if not offsets_only and (not o["bootstrap"] or consumer._zk_explicit):
        from migrate.migration import bridge

        had_session = consumer._zk_given is not None or consumer._zk_owned is not None
        rec = bridge.read_record(consumer.zk, consumer.group_id)
        if not bridge.bridging(rec, Rebalancer.SERVER.value) and not had_session:
            # Scheme two's members keep no ZooKeeper session: the one opened to look is closed.
            consumer._release_zk()
        if bridge.bridging(rec, Rebalancer.SERVER.value):
            # A live migration from scheme one into scheme two is under way: join through the bridge.
            from migrate.migration.bridge_server import ServerBridgedMember

            log.info(
                "group %s is being migrated live to scheme two: joining through the bridge", consumer.group_id
            )
            return ServerBridgedMember(
                consumer.zk,
                consumer.group_id,
                topics,
                rec,
                listener,
                lambda _assignors, listener: member(listener),  # the coordinator assigns
                event_log=bridge_log,
            )
    return member(listener)


def coordinator_member(consumer: Any, topics: list[str], listener: object | None, offsets_only: bool) -> Any:
    """Scheme three: the group's leader assigns; through the bridge while a live migration runs."""
    from coordinator.member.consumer_member import CoordinatorMember

    o = consumer._options
    options = dict(consumer._membership_options)
    bridge_log = options.pop("bridge_event_log", None)

    def member(assignors: list, listener: object | None) -> CoordinatorMember:
        return CoordinatorMember(
            consumer.group_id,
            topics,
            zk=consumer.zk,
            bootstrap=o["bootstrap"],
            assignors=assignors,
            listener=listener,
            session_timeout_ms=o["session_timeout_ms"],
            heartbeat_interval_ms=o["heartbeat_interval_ms"],
            max_poll_interval_ms=o["max_poll_interval_ms"],
            group_instance_id=o["group_instance_id"],
            client_id=consumer.client_id,
            coordinator_timeout_ms=o["coordinator_timeout_ms"],
            security=o["security"],
            **options,
            poll_driven=not offsets_only,  # rebalances run inside poll(), on the caller's thread
        )

    if not offsets_only:
        from migrate.migration import bridge

        rec = bridge.read_record(consumer.zk, consumer.group_id)
        if bridge.bridging(rec, Rebalancer.COORDINATOR.value):
            # A live migration from scheme one is under way: join through the bridge.
            log.info("group %s is being migrated live: joining through the bridge", consumer.group_id)
            return bridge.BridgedMember(
                consumer.zk,
                consumer.group_id,
                topics,
                rec,
                listener,
                member,
                assignors=o["assignors"],
                event_log=bridge_log,
            )
    return member(o["assignors"], listener)


# (consumer, topics, listener, offsets_only) -> the membership (`pipeline.consumer.Consumer` is the consumer)
Factory = Callable[[Any, list[str], object | None, bool], Any]

#: rebalancer -> the factory of a consumer's membership under it.
BACKENDS: dict[Rebalancer, Factory] = {
    Rebalancer.ZK: zk_member,
    Rebalancer.SERVER: server_member,
    Rebalancer.COORDINATOR: coordinator_member,
}


class ZkOffsets:
    """Scheme one's offsets without membership (manual assignment): `/consumers/<g>/offsets/<t>/<p>`.
    A request ZooKeeper refuses raises `core.zk.ZooKeeperNoAuth` (also on `commit_async`'s thread)."""

    def __init__(self, zk: Any, group_id: str):
        self.zk, self.group_id = zk, group_id
        self.generation = -1

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], generation: int) -> None:
        from zk_rebalance.layout import offset_path

        for tp, om in offsets.items():
            off = om.offset if isinstance(om, OffsetAndMetadata) else int(om)
            path = offset_path(self.group_id, tp.topic, tp.partition)
            with _refusals(path):
                self.zk.ensure_path(path)
                self.zk.set(path, str(off).encode())

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        from kazoo.exceptions import NoNodeError

        from zk_rebalance.layout import offset_path

        out: dict[TopicPartition, int | None] = {}
        for tp in partitions:
            path = offset_path(self.group_id, tp.topic, tp.partition)
            try:
                with _refusals(path):
                    data, _ = self.zk.get(path)
                text = data.decode().strip()
                out[tp] = int(text) if text.lstrip("-").isdigit() and int(text) >= 0 else None
            except NoNodeError:
                out[tp] = None
        return out

    def close(self) -> None:
        pass


@contextmanager
def _refusals(path: str) -> Iterator[None]:
    """kazoo's NoAuth (or AuthFailed) on `path` as groupshift's one-line `ZooKeeperNoAuth`."""
    from core.zk import KAZOO_REFUSALS, refused_by_acl

    try:
        yield
    except KAZOO_REFUSALS as exc:
        raise refused_by_acl(exc, path) from None


def connect_string(client: Any) -> str:
    """A kazoo client's connect string (`host:port,...[/chroot]`)."""
    hosts = ",".join(f"{h}:{p}" for h, p in client.hosts)
    return hosts + (client.chroot or "")
