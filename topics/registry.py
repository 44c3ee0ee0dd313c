"""Topic registration in ZooKeeper, in Kafka 0.8's layout and byte-exact JSON.

`/brokers/topics/<t>` holds the partition → replica-list map exactly as Kafka 0.8.2's
`AdminUtils` writes it (plain UTF-8, no spaces), and `/config/topics/<t>` the (empty) topic
config. Scheme one's consumers put a data watch on the former; adding partitions rewrites it.

    create_topic(zk, "clicks", partitions=3)          # {"version":1,"partitions":{"0":[0],"1":[0],"2":[0]}}
    add_partitions(zk, "clicks", 5)
    describe(zk, "clicks").partitions                 # {0: (0,), 1: (0,), ..., 4: (0,)}
    list_topics(zk)                                    # ["clicks"]
    delete_topic(zk, "clicks")

The data itself (Parquet segments) is `topics.log`; `topics.store.TopicStore` does both.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError

from core.errors import UnknownTopic
from topics.errors import InvalidPartitions, InvalidReplicationFactor, InvalidTopic, TopicAlreadyExists
from topics.limits import MAX_PARTITIONS, MAX_REPLICATION_FACTOR

if TYPE_CHECKING:  # a type only: topic-name checks (the CLI's parsing) need no ZooKeeper client
    from kazoo.client import KazooClient

TOPICS_PATH = "/brokers/topics"
BROKER_IDS_PATH = "/brokers/ids"
TOPIC_CONFIG_PATH = "/config/topics"
# groupshift's own record of a topic: the id also written in the topic's data directory, so a
# command given one namespace never deletes data created for a topic registered in another.
# Defined here (`topics` may not import `coordinator`); coordinator/layout.py, which lists every
# /groupshift path, names it `TOPIC_IDS`.
TOPIC_IDS_PATH = "/groupshift/topics"
# Kafka 0.10+ (and the issue) allow 249 so that `<topic>-<partition>` log dirs stay under 255 bytes.
MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


@dataclass(frozen=True)
class TopicDescription:
    """A topic as registered: partition id → replica broker ids, and the znode's data version."""

    name: str
    partitions: dict[int, tuple[int, ...]]
    version: int = 0
    topic_id: str | None = None  # Kafka 2.8+'s `topic_id` in the znode, when it has one

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)

    @property
    def replication_factor(self) -> int:
        return len(next(iter(self.partitions.values()))) if self.partitions else 0


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def validate_topic_name(name: str) -> str:
    """Return `name` if Kafka accepts it as a topic name, else raise `InvalidTopic` saying why."""
    if not isinstance(name, str) or not name:
        raise InvalidTopic("topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopic('topic name cannot be "." or ".."')
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopic(f"topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL.fullmatch(name):
        raise InvalidTopic(
            f"topic name {name!r} is illegal, it contains a character other than ASCII alphanumerics, "
            "'.', '_' and '-'"
        )
    return name


def check_partitions(partitions: int, what: str = "number of partitions") -> int:
    """Return `partitions` if it is in 1..MAX_PARTITIONS, else raise `InvalidPartitions`."""
    if (
        isinstance(partitions, bool)
        or not isinstance(partitions, int)
        or not 0 < partitions <= MAX_PARTITIONS
    ):
        raise InvalidPartitions(f"{what} must be between 1 and {MAX_PARTITIONS}, not {partitions!r}")
    return partitions


def encode_assignment(partitions: dict[int, Sequence[int]], topic_id: str | None = None) -> bytes:
    """The `/brokers/topics/<t>` payload `{"version":1,"partitions":{"0":[1,2],...}}` (Json.encode).

    Kafka's encoder writes no whitespace; partitions are written in numeric order (0.8 wrote them
    in Scala hash-map order, which no reader depends on — every reader parses the JSON).
    `topic_id` (Kafka 2.8+'s field, in Kafka's string form) is kept once a topic has one
    (`topics.topic_ids`); every reader of the 0.8 layout ignores it.
    """
    body: dict = {"version": 1}
    if topic_id:
        body["topic_id"] = topic_id
    body["partitions"] = {str(p): [int(b) for b in partitions[p]] for p in sorted(partitions)}
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def decode_assignment(data: bytes, topic: str = "?") -> dict[int, tuple[int, ...]]:
    """Parse a `/brokers/topics/<t>` payload written by Kafka 0.8+ or by groupshift."""
    try:
        body = json.loads(data.decode("utf-8"))
        return {int(p): tuple(int(b) for b in replicas) for p, replicas in body["partitions"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidTopic(
            f"/brokers/topics/{topic} does not hold a Kafka partition map: {data[:200]!r}"
        ) from exc


def kafka_topic_id(data: bytes | None) -> str | None:
    """The `topic_id` field of a `/brokers/topics/<t>` payload (Kafka 2.8+), or None."""
    if not data or b'"topic_id"' not in data:
        return None
    try:
        found = json.loads(data.decode("utf-8")).get("topic_id")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, str) and found else None


def assign_replicas(
    brokers: Sequence[int],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, tuple[int, ...]]:
    """Kafka 0.8's `AdminUtils.assignReplicasToBrokers`: round-robin leaders, shifted followers.

    The first replica of partition p is broker `(p + start) % n`; the followers follow it at a
    shift that grows by one every n partitions, so replicas spread evenly. `start_index=None`
    picks the start at random, as Kafka does.
    """
    check_partitions(partitions)
    if not 0 < replication_factor <= MAX_REPLICATION_FACTOR:
        raise InvalidReplicationFactor(
            f"replication factor must be between 1 and {MAX_REPLICATION_FACTOR}, not {replication_factor}"
        )
    n = len(brokers)
    if replication_factor > n:
        raise InvalidReplicationFactor(
            f"replication factor {replication_factor} larger than available brokers {n}; "
            "register more brokers or lower the replication factor"
        )
    rng = rng or random.Random()
    start = start_index if start_index is not None else rng.randrange(n)
    shift = start_index if start_index is not None else rng.randrange(n)
    out: dict[int, tuple[int, ...]] = {}
    for p in range(start_partition, start_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = tuple(replicas)
    return out


def broker_ids(zk: KazooClient) -> list[int]:
    """Registered broker ids, sorted (Kafka's `getSortedBrokerList`); `[0]` when none are registered.

    groupshift's data plane has no brokers; replica lists then name broker 0, which keeps the
    JSON well-formed for 0.8 tools.
    """
    try:
        ids = sorted(int(c) for c in zk.get_children(BROKER_IDS_PATH) if c.lstrip("-").isdigit())
    except NoNodeError:
        ids = []
    return ids or [0]


def create_topic(
    zk: KazooClient,
    name: str,
    partitions: int,
    replication_factor: int = 1,
    *,
    brokers: Sequence[int] | None = None,
    assignment: dict[int, Sequence[int]] | None = None,
    start_index: int | None = None,
    topic_id: str | None = None,
) -> TopicDescription:
    """Register a topic as `kafka-topics.sh --create` (0.8.2) does; raises `TopicAlreadyExists`.

    `assignment` gives the replica lists explicitly (like `--replica-assignment`); otherwise they
    come from `assign_replicas` over `brokers` (default: the registered broker ids). Everything
    is written in one ZooKeeper transaction; `topic_id` (the id in the topic's data directory)
    is recorded at `/groupshift/topics/<t>`.
    """
    validate_topic_name(name)
    if assignment is None:
        assignment = assign_replicas(
            brokers if brokers is not None else broker_ids(zk),
            partitions,
            replication_factor,
            start_index=start_index,
        )
    elif sorted(assignment) != list(range(len(assignment))) or not assignment:
        raise InvalidPartitions(
            f"an explicit assignment must number partitions 0..n-1, got {sorted(assignment)}"
        )
    if len(assignment) > MAX_PARTITIONS:
        raise InvalidPartitions(f"a topic has at most {MAX_PARTITIONS} partitions, not {len(assignment)}")
    payload = encode_assignment(assignment)
    for _ in range(5):  # a concurrent creator of a parent znode makes the transaction retry
        if zk.exists(topic_path(name)):
            raise TopicAlreadyExists(f"topic {name!r} already exists; use add_partitions to grow it")
        # One transaction: the missing parents, the config, the assignment (and groupshift's id),
        # so a failure leaves nothing behind. (AdminUtils wrote the config first, separately.)
        txn = zk.transaction()
        for parent in _missing_parents(
            zk, [TOPICS_PATH, TOPIC_CONFIG_PATH] + ([TOPIC_IDS_PATH] if topic_id else [])
        ):
            txn.create(parent, b"")
        _put(zk, txn, f"{TOPIC_CONFIG_PATH}/{name}", b'{"version":1,"config":{}}')
        if topic_id:
            _put(zk, txn, f"{TOPIC_IDS_PATH}/{name}", _encode_id(topic_id))
        txn.create(topic_path(name), payload)
        results = txn.commit()
        failed = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if not failed:
            return describe(zk, name)
        if not isinstance(failed[0], NodeExistsError):
            raise failed[0]
    raise TopicAlreadyExists(f"topic {name!r} is being created concurrently; describe it, then retry")


def _missing_parents(zk: KazooClient, paths: list[str]) -> list[str]:
    """The ancestors (and the paths themselves) that do not exist, parents first, no duplicates."""
    out: list[str] = []
    for path in paths:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            p = "/" + "/".join(parts[:i])
            if p not in out and not zk.exists(p):
                out.append(p)
    return out


def _put(zk: KazooClient, txn, path: str, data: bytes) -> None:
    if zk.exists(path):  # left by a tool that crashed half-way (AdminUtils wrote config first)
        txn.set_data(path, data)
    else:
        txn.create(path, data)


def _encode_id(topic_id: str) -> bytes:
    return json.dumps({"version": 1, "topic_id": topic_id}, separators=(",", ":")).encode()


def topic_id(zk: KazooClient, name: str) -> str | None:
    """The groupshift id registered for a topic (None: not registered by groupshift, or no such topic)."""
    try:
        data, _ = zk.get(f"{TOPIC_IDS_PATH}/{name}")
        return str(json.loads(data)["topic_id"])
    except NoNodeError:
        return None
    except (ValueError, KeyError, TypeError):
        raise InvalidTopic(
            f"{TOPIC_IDS_PATH}/{name} does not hold a groupshift topic id: {data[:200]!r}; "
            "repair or delete that znode"
        ) from None


def add_partitions(
    zk: KazooClient,
    name: str,
    partitions: int,
    *,
    brokers: Sequence[int] | None = None,
) -> TopicDescription:
    """Grow a topic to `partitions` partitions as Kafka 0.8.2's `AdminUtils.addPartitions` does.

    The new replica lists keep the replication factor and start from the first replica of the
    existing partition 0. The znode is rewritten with a version check, so a concurrent change is
    not lost. Fires the data watch of every scheme-one consumer of the topic.
    """
    check_partitions(partitions)
    current = describe(zk, name)
    to_add = partitions - current.num_partitions
    if to_add <= 0:
        raise InvalidPartitions(
            f"topic {name!r} has {current.num_partitions} partitions; the number can only be increased"
        )
    existing = current.partitions[min(current.partitions)]
    added = assign_replicas(
        brokers if brokers is not None else broker_ids(zk),
        to_add,
        len(existing),
        start_index=existing[0],
        start_partition=current.num_partitions,
    )
    payload = encode_assignment({**current.partitions, **added}, current.topic_id)
    zk.set(topic_path(name), payload, version=current.version)
    return describe(zk, name)


def describe(zk: KazooClient, name: str) -> TopicDescription:
    """The registered partition map of a topic; raises `UnknownTopic`."""
    try:
        data, stat = zk.get(topic_path(name))
    except NoNodeError:
        raise UnknownTopic(f"topic {name!r} is not registered in ZooKeeper; create it first") from None
    return TopicDescription(name, decode_assignment(data, name), stat.version, kafka_topic_id(data))


def list_topics(zk: KazooClient) -> list[str]:
    """Registered topic names, sorted."""
    try:
        return sorted(zk.get_children(TOPICS_PATH))
    except NoNodeError:
        return []


def delete_topic(zk: KazooClient, name: str) -> None:
    """Remove a topic's registration, config and groupshift id (as Kafka's controller after `--delete`)."""
    if not zk.exists(topic_path(name)):
        raise UnknownTopic(f"topic {name!r} is not registered in ZooKeeper")
    zk.delete(topic_path(name), recursive=True)
    for path in (f"{TOPIC_CONFIG_PATH}/{name}", f"{TOPIC_IDS_PATH}/{name}"):
        try:
            zk.delete(path)
        except NoNodeError:
            pass
