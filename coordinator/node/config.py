"""A coordinator node's settings (`groupshift coordinator serve` options; docs/coordinator.md lists them)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from coordinator.group.coordinator import CoordinatorConfig
from coordinator.layout import DEFAULT_SHARDS
from coordinator.wire import codec as P


@dataclass
class NodeConfig:
    """Everything `groupshift coordinator serve` can set; broker settings keep Kafka's names and defaults."""

    zk: str | None = None
    node_id: int = 0
    host: str = "127.0.0.1"
    port: int = 0
    advertised_host: str | None = None
    shards: int = DEFAULT_SHARDS
    max_frame_bytes: int = P.DEFAULT_MAX_FRAME_BYTES
    # Broker settings: the core's defaults (Kafka's), passed through by core_config().
    group_min_session_timeout_ms: int = CoordinatorConfig.group_min_session_timeout_ms
    group_max_session_timeout_ms: int = CoordinatorConfig.group_max_session_timeout_ms
    group_initial_rebalance_delay_ms: int = CoordinatorConfig.group_initial_rebalance_delay_ms
    group_max_size: int = CoordinatorConfig.group_max_size
    offsets_retention_ms: int = CoordinatorConfig.offsets_retention_ms
    offsets_retention_check_interval_ms: int = CoordinatorConfig.offsets_retention_check_interval_ms
    offset_metadata_max_bytes: int = CoordinatorConfig.offset_metadata_max_bytes
    # The incremental form (KIP-848): Kafka clients' session timeout and every member's heartbeat
    # interval are the node's (Kafka's group.consumer.session.timeout.ms, .heartbeat.interval.ms).
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    # Kafka's group.consumer.migration.policy: bidirectional, upgrade, downgrade or disabled
    # (docs/scheme-two.md, "Online upgrade and downgrade").
    group_consumer_migration_policy: str = "bidirectional"
    zk_session_timeout_ms: int = 10_000
    connections_max_idle_ms: int = 600_000  # Kafka's connections.max.idle.ms
    frame_timeout_ms: int = 30_000  # a started frame must complete within this
    write_timeout_ms: int = 30_000  # a client that stops reading its answers is dropped
    max_connections: int = 10_000
    max_queued_requests: int = 1_000  # per connection; reading pauses beyond it
    shard_handoff: bool = True
    claim_grace_ms: int = 1_000
    handoff_delay_ms: int = 3_000
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    # The Kafka-protocol listener (docs/kafka-listener.md): off unless kafka_port is set (0: any free port).
    kafka_host: str = "127.0.0.1"
    kafka_port: int | None = None
    data: str | None = None  # the log root it serves topics from (None: topics.log.default_root())
    # Security (docs/security.md). Each listener's protocol: the native one PLAINTEXT, TLS,
    # SASL_PLAINTEXT or SASL_TLS; the Kafka one Kafka's PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    listen_protocol: str = "PLAINTEXT"
    kafka_protocol: str = "PLAINTEXT"
    tls_cert: str | None = None  # PEM files: the node's certificate (chain) and key,
    tls_key: str | None = None
    tls_ca: str | None = None  # and the CA its clients' certificates are checked against
    tls_client_auth: str = "none"  # Kafka's ssl.client.auth: none, requested or required
    sasl_mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")  # sasl.enabled.mechanisms
    authorizer: str | None = None  # None: everything open; "acl": Kafka's ACLs, kept in ZooKeeper
    super_users: tuple[str, ...] = ()  # principals the authorizer lets do anything (User:admin)

    def core_config(self) -> CoordinatorConfig:
        names = {f.name for f in fields(CoordinatorConfig)} & {f.name for f in fields(self)}
        return CoordinatorConfig(**{name: getattr(self, name) for name in names})
