"""The rebalance schemes, named once: every other module spells a scheme through these enums.

Two vocabularies, because users meet the schemes in two places:

* `Rebalancer` — where a group's membership lives, as the CLI and `pipeline.Consumer` spell it
  (`--rebalancer`, `migrate --from/--to`, `groups --scheme`): `zk` (scheme one, Kafka 0.8's
  layout), `server` (scheme two: the coordinator assigns) and `coordinator` (scheme three: the
  group's leader assigns). Scheme two's and three's groups share the coordinator's store, so the
  inspection tools, which read stores, know only `zk` and `coordinator` (`STORES`); a migration
  moves a group between schemes (`MIGRATABLE`: all three), reading and writing each scheme's
  store (`store_of`) and checking that the group is one of that scheme's.
* `Scheme` — one rebalance design as the experiments compare it, a rebalancer plus its options:
  `one`, `two`, `two-incremental`, `three-eager` (range) and `three-cooperative`
  (cooperative-sticky) — groupshift's own members — and two whose members are librdkafka
  consumers (confluent-kafka) joined through a node's Kafka listener: `kafka-classic` (Kafka's
  classic protocol, cooperative-sticky) and `kafka-consumer` (KIP-848's consumer protocol, the
  coordinator's `uniform` assignor). Those two are compared only when asked for (`defaults()`).

>>> Scheme("two-incremental").rebalancer, Scheme.TWO_INCREMENTAL.incremental
(<Rebalancer.SERVER: 'server'>, True)
>>> Scheme.THREE_EAGER.consumer_options()
{'rebalancer': 'coordinator', 'assignors': ['range']}
>>> Rebalancer.parse("zk")
<Rebalancer.ZK: 'zk'>
>>> store_of("server"), [r.value for r in MIGRATABLE]
(<Rebalancer.COORDINATOR: 'coordinator'>, ['zk', 'server', 'coordinator'])
>>> [s.value for s in Scheme.coordinated()]
['two', 'two-incremental', 'three-eager', 'three-cooperative', 'kafka-classic', 'kafka-consumer']
>>> Scheme.KAFKA_CONSUMER.kafka_config()
{'group.protocol': 'consumer', 'group.remote.assignor': 'uniform'}
>>> Scheme.KAFKA_CLASSIC in Scheme.defaults(), Scheme.THREE_EAGER in Scheme.defaults()
(False, True)
"""

from __future__ import annotations

from enum import Enum

from core.errors import GroupshiftError


class Rebalancer(Enum):
    """Who computes a group's assignment; the value is the CLI's spelling."""

    ZK = "zk"  # scheme one: every consumer, from ZooKeeper (Kafka 0.8)
    SERVER = "server"  # scheme two: the coordinator
    COORDINATOR = "coordinator"  # scheme three: the group's leader, through the coordinator

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The CLI's spellings, in order (for `click.Choice` and error messages)."""
        return tuple(r.value for r in cls)

    @classmethod
    def parse(cls, name: str | Rebalancer, allowed: tuple[Rebalancer, ...] | None = None) -> Rebalancer:
        """`name` as a Rebalancer, or a GroupshiftError naming the spellings `allowed` (default: all)."""
        allowed = tuple(cls) if allowed is None else allowed
        try:
            found = name if isinstance(name, cls) else cls(name)
        except ValueError:
            found = None
        if found not in allowed:
            names = ", ".join(r.value for r in allowed)
            raise GroupshiftError(f"unknown scheme {name!r}; use one of {names}")
        return found


# The stores the inspection and migration tools read and write: Kafka 0.8's layout and the coordinator's.
STORES = (Rebalancer.ZK, Rebalancer.COORDINATOR)
# The schemes `groupshift migrate` moves a group between (`--from/--to`): scheme two's groups are
# in the coordinator's store, told from scheme three's by their protocol type.
MIGRATABLE = (Rebalancer.ZK, Rebalancer.SERVER, Rebalancer.COORDINATOR)


def store_of(scheme: str | Rebalancer) -> Rebalancer:
    """The store (one of `STORES`) a scheme's groups live in: scheme two's are the coordinator's."""
    found = Rebalancer.parse(scheme, MIGRATABLE)
    return Rebalancer.COORDINATOR if found is Rebalancer.SERVER else found


class Scheme(Enum):
    """One rebalance design as the experiments compare it; the value is the experiments' spelling."""

    ONE = "one"
    TWO = "two"
    TWO_INCREMENTAL = "two-incremental"
    THREE_EAGER = "three-eager"
    THREE_COOPERATIVE = "three-cooperative"
    KAFKA_CLASSIC = "kafka-classic"
    KAFKA_CONSUMER = "kafka-consumer"

    @property
    def rebalancer(self) -> Rebalancer:
        return _REBALANCER[self]

    @property
    def incremental(self) -> bool:
        """Scheme two's incremental form (KIP-848: members converge one by one)."""
        return self is Scheme.TWO_INCREMENTAL

    @property
    def assignors(self) -> list[str] | None:
        """The assignor a scheme-three member proposes; None for the others."""
        return _ASSIGNORS.get(self)

    @property
    def label(self) -> str:
        """How reports and plots name it."""
        return _LABELS[self]

    @property
    def kafka(self) -> bool:
        """Its members are librdkafka consumers joined through a node's Kafka listener."""
        return self in _KAFKA_CONFIG

    def kafka_config(self) -> dict:
        """The librdkafka settings that make a `confluent_kafka.Consumer` a member of this scheme."""
        if not self.kafka:
            raise GroupshiftError(f"scheme {self.value!r} has groupshift's own members, not librdkafka ones")
        return dict(_KAFKA_CONFIG[self])

    def consumer_options(self) -> dict:
        """`pipeline.Consumer` keywords that make a consumer a member of this scheme."""
        if self.kafka:
            raise GroupshiftError(f"scheme {self.value!r} has librdkafka members: see kafka_config()")
        options: dict = {"rebalancer": self.rebalancer.value}
        if self.incremental:
            options["incremental"] = True
        if self.assignors is not None:
            options["assignors"] = list(self.assignors)
        return options

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(s.value for s in cls)

    @classmethod
    def defaults(cls) -> tuple[Scheme, ...]:
        """The schemes a run compares unless told otherwise: groupshift's own (the librdkafka ones
        are asked for by name)."""
        return tuple(s for s in cls if not s.kafka)

    @classmethod
    def coordinated(cls) -> tuple[Scheme, ...]:
        """The schemes served by coordinator nodes (every one but scheme one)."""
        return tuple(s for s in cls if s.rebalancer is not Rebalancer.ZK)


_REBALANCER = {
    Scheme.ONE: Rebalancer.ZK,
    Scheme.TWO: Rebalancer.SERVER,
    Scheme.TWO_INCREMENTAL: Rebalancer.SERVER,
    Scheme.THREE_EAGER: Rebalancer.COORDINATOR,
    Scheme.THREE_COOPERATIVE: Rebalancer.COORDINATOR,
    Scheme.KAFKA_CLASSIC: Rebalancer.COORDINATOR,  # the group's leader assigns (client-side assignor)
    Scheme.KAFKA_CONSUMER: Rebalancer.SERVER,  # the coordinator assigns (KIP-848's remote assignor)
}
_KAFKA_CONFIG = {
    Scheme.KAFKA_CLASSIC: {
        "group.protocol": "classic",
        "partition.assignment.strategy": "cooperative-sticky",
    },
    Scheme.KAFKA_CONSUMER: {"group.protocol": "consumer", "group.remote.assignor": "uniform"},
}
_ASSIGNORS = {Scheme.THREE_EAGER: ["range"], Scheme.THREE_COOPERATIVE: ["cooperative-sticky"]}
_LABELS = {
    Scheme.ONE: "one (ZooKeeper, Kafka 0.8)",
    Scheme.TWO: "two (coordinator assigns)",
    Scheme.TWO_INCREMENTAL: "two, incremental",
    Scheme.THREE_EAGER: "three, eager",
    Scheme.THREE_COOPERATIVE: "three, cooperative",
    Scheme.KAFKA_CLASSIC: "librdkafka, classic (cooperative-sticky)",
    Scheme.KAFKA_CONSUMER: "librdkafka, consumer (KIP-848)",
}
