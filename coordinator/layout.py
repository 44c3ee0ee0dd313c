"""Every /groupshift znode path and payload, pure — as zk_rebalance/layout.py is for Kafka 0.8's layout.

The names, paths and payload codecs of the coordinator's metadata, and the migration engine's
paths. No asyncio, no ZooKeeper client, no I/O: the node's store (`coordinator/node/store.py` and
the modules it is built of) does the node's reads and writes; the tools (`groupshift groups`,
`offsets`, `migrate`) import this module, not the store. Layout (documented in
`docs/coordinator.md`; every payload is UTF-8 JSON):

    /groupshift/coordinators/ids/<node>            ephemeral  {"version":1,"host","port","started"}
    /groupshift/shards/<s>/epoch                   persistent its *version* is the shard epoch
    /groupshift/shards/<s>/leader                  ephemeral  {"version":1,"node","epoch","host","port"}
    /groupshift/groups/<g>                         persistent group metadata (GroupRecord), or empty
    /groupshift/groups/<g>/offsets/<t>/<p>         persistent {"offset","metadata","generation","commit_ts"}
    /brokers/ids/<node>                            ephemeral  Kafka 0.8 broker JSON (v4 with a Kafka listener)

(paths: `coordinator_path`, `epoch_path`, `leader_path`, `group_path`, `offsets_dir`, `offset_path`,
`broker_path`; parents: `COORDINATORS`, `SHARDS`, `GROUPS`, `BROKERS`), the migration engine's
(`migrate/`, docs/migrate.md):

    /groupshift/migrations/<g>                     persistent the migration record (migration/record.py)
    /groupshift/migration-locks/<g>                ephemeral  held by the process running the migration
    /groupshift/bridge/<g>/<consumer id>           ephemeral  a bridged coordinator member (live mode)

(`migration_path`, `migration_lock_path`, `bridge_marker_dir`), and the data plane's, defined in
`topics/registry.py` (a lower package, which may not import this one) and named here `TOPIC_IDS`:

    /groupshift/topics/<t>                         persistent a topic's id (also in its log directory)

Both coordinator records also carry `kafka_host`/`kafka_port`, present only on nodes with
a Kafka-protocol listener (docs/kafka-listener.md); `host`/`port` are always the native listener's.
A registration names a listener's security protocol (`protocol`, `kafka_protocol`: docs/security.md)
only when it is not PLAINTEXT.

Group and topic names are znode names after escaping (`znode_name`): characters outside
`[A-Za-z0-9._-]` are %-encoded as UTF-8, `.`/`..` are encoded, and the empty group id is `%`.

    offset_path("billing", "clicks", 3)     # '/groupshift/groups/billing/offsets/clicks/3'
    shard_of("billing", 50)                 # Kafka's partitionFor(groupId)
    decode_group(data)                      # GroupRecord, or None for an offsets-only group
"""

from __future__ import annotations

import functools
from urllib.parse import quote, unquote

import msgspec
from msgspec import UNSET, UnsetType

from coordinator.group.records import GroupRecord, OffsetRecord
from core.javahash import java_abs, java_string_hash
from topics.registry import TOPIC_IDS_PATH

ROOT = "/groupshift"
COORDINATORS = f"{ROOT}/coordinators/ids"
SHARDS = f"{ROOT}/shards"
GROUPS = f"{ROOT}/groups"
BROKERS = "/brokers/ids"
MIGRATIONS = f"{ROOT}/migrations"
MIGRATION_LOCKS = f"{ROOT}/migration-locks"
BRIDGE_MARKERS = f"{ROOT}/bridge"
TOPIC_IDS = TOPIC_IDS_PATH  # the data plane's (topics/registry.py): `/groupshift/topics`
DEFAULT_SHARDS = 50
MAX_NODES = 10_000  # coordinator registrations read at most

_SAFE = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

# ---------------------------------------------------------------------------------------------
# Names and paths


@functools.lru_cache(maxsize=65_536)
def znode_name(name: str) -> str:
    """A group or topic name as a znode name (reversible, see the module docstring; cached: it is
    called once per partition when offsets are read or written)."""
    if name == "":
        return "%"
    if name in (".", ".."):
        return name.replace(".", "%2E")
    return quote(name, safe=_SAFE)


@functools.lru_cache(maxsize=65_536)
def name_from_znode(znode: str) -> str:
    """`znode_name` reversed (cached, as it is: once per partition read)."""
    return "" if znode == "%" else unquote(znode)


def shard_of(group_id: str, shards: int) -> int:
    """Kafka's rule: `abs(java_string_hash(group_id)) % shards`."""
    return java_abs(java_string_hash(group_id)) % shards


def group_path(group_id: str) -> str:
    return f"{GROUPS}/{znode_name(group_id)}"


def offsets_dir(gpath: str) -> str:
    """`<group znode>/offsets`, the parent of the group's topics' offsets (`gpath` as `group_path`
    returns it, or `GROUPS/<znode name>` as listed in ZooKeeper)."""
    return f"{gpath}/offsets"


def offset_path(group_id: str, topic: str, partition: int) -> str:
    return f"{GROUPS}/{znode_name(group_id)}/offsets/{znode_name(topic)}/{partition}"


def shard_path(shard: int) -> str:
    return f"{SHARDS}/{shard}"


def epoch_path(shard: int) -> str:
    """The shard's epoch znode: its data version is the epoch (bumped by every claim)."""
    return f"{SHARDS}/{shard}/epoch"


def leader_path(shard: int) -> str:
    """The shard's leader znode (ephemeral, a `LeaderRecord`)."""
    return f"{SHARDS}/{shard}/leader"


def coordinator_path(node: int | str) -> str:
    """A coordinator node's registration (ephemeral, a `CoordinatorRecord`)."""
    return f"{COORDINATORS}/{node}"


def broker_path(node: int | str) -> str:
    """A coordinator node's Kafka 0.8 broker registration (ephemeral, `broker_json`)."""
    return f"{BROKERS}/{node}"


def migration_path(group: str) -> str:
    """The group's migration record."""
    return f"{MIGRATIONS}/{znode_name(group)}"


def migration_lock_path(group: str) -> str:
    return f"{MIGRATION_LOCKS}/{znode_name(group)}"


def bridge_marker_dir(group: str) -> str:
    """The parent of the group's bridged coordinator members' markers."""
    return f"{BRIDGE_MARKERS}/{znode_name(group)}"


# ---------------------------------------------------------------------------------------------
# Payloads


class OffsetZnode(msgspec.Struct, frozen=True, gc=False):
    """`/groupshift/groups/<g>/offsets/<t>/<p>`: the next offset to read, as Kafka commits it."""

    offset: int
    metadata: str | None = ""
    generation: int = -1
    commit_ts: int = 0
    expire_ts: int | None = None


class _GroupZnode(GroupRecord, frozen=False):
    """`/groupshift/groups/<g>`: the core's GroupRecord plus a format version."""

    version: int = 1


class LeaderRecord(msgspec.Struct, frozen=True):
    """`/groupshift/shards/<s>/leader`."""

    node: int
    epoch: int
    host: str = ""
    port: int = -1
    version: int = 1
    kafka_host: str | UnsetType = UNSET  # the leader's Kafka listener, if it has one
    kafka_port: int | UnsetType = UNSET


class CoordinatorRecord(msgspec.Struct, frozen=True):
    """`/groupshift/coordinators/ids/<node>`."""

    host: str
    port: int
    started: int
    version: int = 1
    kafka_host: str | UnsetType = UNSET
    kafka_port: int | UnsetType = UNSET
    # Each listener's security protocol (docs/security.md), present only when it is not PLAINTEXT:
    # the native one's TLS, SASL_PLAINTEXT or SASL_TLS, the Kafka one's SSL, SASL_PLAINTEXT or SASL_SSL.
    protocol: str | UnsetType = UNSET
    kafka_protocol: str | UnsetType = UNSET


KafkaEndpoint = tuple[str, int]

_json = msgspec.json.Encoder()
_group_decoder = msgspec.json.Decoder(GroupRecord)
_offset_decoder = msgspec.json.Decoder(OffsetZnode)
_leader_decoder = msgspec.json.Decoder(LeaderRecord)
_coordinator_decoder = msgspec.json.Decoder(CoordinatorRecord)


def encode_group(record: GroupRecord) -> bytes:
    """Group metadata JSON: the record's fields (bytes as base64) and `"version": 1`."""
    return _json.encode(_GroupZnode(**msgspec.structs.asdict(record)))


def decode_group(data: bytes) -> GroupRecord | None:
    """The group record of a group znode, or None for a group that so far only has offsets."""
    return _group_decoder.decode(data) if data else None


def encode_offset(record: OffsetRecord, generation: int) -> bytes:
    return _json.encode(
        OffsetZnode(
            record.offset, record.metadata, generation, record.commit_timestamp, record.expire_timestamp
        )
    )


def decode_offset(topic: str, partition: int, data: bytes) -> OffsetRecord:
    z = decode_offset_znode(data)
    return OffsetRecord(topic, partition, z.offset, z.metadata or "", z.commit_ts, z.expire_ts)


def decode_offset_znode(data: bytes) -> OffsetZnode:
    """The offset znode as stored (raises `msgspec.DecodeError` or `msgspec.ValidationError`)."""
    return _offset_decoder.decode(data)


def encode_offset_znode(znode: OffsetZnode) -> bytes:
    return _json.encode(znode)


def encode_leader(record: LeaderRecord) -> bytes:
    return _json.encode(record)


def decode_leader(data: bytes) -> LeaderRecord:
    """Raises `msgspec.DecodeError` or `msgspec.ValidationError` for data that is not a leader record."""
    return _leader_decoder.decode(data)


def encode_coordinator(record: CoordinatorRecord) -> bytes:
    return _json.encode(record)


def decode_coordinator(data: bytes) -> CoordinatorRecord:
    """Raises `msgspec.DecodeError` or `msgspec.ValidationError` for data that is not a registration."""
    return _coordinator_decoder.decode(data)


def broker_json(
    host: str,
    port: int,
    timestamp_ms: int,
    kafka: KafkaEndpoint | None = None,
    kafka_protocol: str = "PLAINTEXT",
) -> bytes:
    """Kafka 0.8's `/brokers/ids/<id>` registration (version 1), in Kafka's key order.

    A node with a Kafka listener registers that endpoint instead, as Kafka 0.10 does (version 4:
    `endpoints` and the listener map, the listener named after its security protocol;
    `host`/`port` kept for 0.8 readers, which only speak PLAINTEXT: null and -1 when the listener
    is secured, as Kafka writes them)."""
    if kafka is not None:
        khost, kport = kafka
        name = kafka_protocol.encode()
        plain = kafka_protocol == "PLAINTEXT"
        return (
            b'{"listener_security_protocol_map":{"%s":"%s"},"endpoints":["%s://%s:%d"],'
            b'"jmx_port":-1,"host":%s,"timestamp":"%d","port":%d,"version":4}'
            % (
                name,
                name,
                name,
                khost.encode(),
                kport,
                _json.encode(khost if plain else None),
                timestamp_ms,
                kport if plain else -1,
            )
        )
    return b'{"version":1,"host":%s,"port":%d,"jmx_port":-1,"timestamp":"%d"}' % (
        _json.encode(host),
        port,
        timestamp_ms,
    )
