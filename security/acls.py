"""Kafka's ACLs as data, and the decision Kafka's `AclAuthorizer` makes over them (pure: no I/O).

An ACL binds a resource pattern — a topic, a group or the cluster, named literally, by the
wildcard `*`, or by a prefix — to an entry: a principal (`User:alice`, or `User:*` for every
principal), a host (`*` or a client address), an operation, and Allow or Deny. The decision is
that of Kafka's `AclAuthorizer` with `allow.everyone.if.no.acl.found=false`:

* a super user (`super.users`, here `--super-users`) may do anything;
* the ACLs that apply to a resource are those of its literal name, of the wildcard `*` of its
  type, and of every prefixed pattern its name starts with;
* a Deny entry naming the principal (or `User:*`), the host (or `*`) and the operation (or
  `All`) denies — deny wins over allow;
* otherwise an Allow entry of the same kind allows; an Allow of Read, Write, Delete or Alter
  also allows Describe, and AlterConfigs allows DescribeConfigs;
* no entry that allows: denied.

    >>> auth = Authorizer(super_users=["User:admin"])
    >>> auth.set_acls(ResourcePattern(GROUP, "billing"), [AccessControlEntry("User:alice", "*", READ, ALLOW)])
    >>> auth.authorize("User:alice", "10.0.0.7", DESCRIBE, GROUP, "billing")  # Read implies Describe
    True
    >>> auth.authorize("User:alice", "10.0.0.7", DELETE, GROUP, "billing")
    False
    >>> auth.authorize("User:admin", "10.0.0.7", DELETE, GROUP, "billing")  # a super user
    True
    >>> everyone = AccessControlEntry("User:*", "*", READ, DENY)
    >>> auth.set_acls(ResourcePattern(GROUP, "bill", PREFIXED), [everyone])
    >>> auth.authorize("User:alice", "10.0.0.7", READ, GROUP, "billing")  # deny wins
    False

Decisions are remembered (`Authorizer.authorize` is a dict lookup once a principal, host,
operation and resource were decided; a heartbeat pays nothing more), and forgotten whenever an
ACL changes. Names and spellings are Kafka's (`SecurityUtils`): resource types and operations in
Pascal case in ZooKeeper and on the command line (`Group`, `DescribeConfigs`), upper case in the
`ResourcePattern(...)` and `(principal=..., ...)` forms `kafka-acls.sh` prints.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from core.errors import GroupshiftError


class AclError(GroupshiftError):
    """An ACL, principal, host or operation that is not Kafka's; the message says which and why."""


class ResourceType(Enum):
    """Kafka's resource types (their names in ZooKeeper paths: `/kafka-acl/Group/...`)."""

    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"
    TRANSACTIONAL_ID = "TransactionalId"
    DELEGATION_TOKEN = "DelegationToken"


class Operation(Enum):
    """Kafka's ACL operations (`AclOperation`), by the names ACLs store them under."""

    ALL = "All"
    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    ALTER_CONFIGS = "AlterConfigs"
    IDEMPOTENT_WRITE = "IdempotentWrite"


class Permission(Enum):
    """Kafka's `AclPermissionType`."""

    ALLOW = "Allow"
    DENY = "Deny"


class PatternType(Enum):
    """Kafka's specific `PatternType`s: a literal name (or `*`), or a prefix of names."""

    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ALL, READ, WRITE, CREATE = Operation.ALL, Operation.READ, Operation.WRITE, Operation.CREATE
DELETE, ALTER, DESCRIBE = Operation.DELETE, Operation.ALTER, Operation.DESCRIBE
DESCRIBE_CONFIGS, ALTER_CONFIGS = Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS
CLUSTER_ACTION, IDEMPOTENT_WRITE = Operation.CLUSTER_ACTION, Operation.IDEMPOTENT_WRITE
ALLOW, DENY = Permission.ALLOW, Permission.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED

WILDCARD_RESOURCE = "*"  # a literal pattern named `*` covers every resource of its type
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource's name
USER = "User:"
MAX_NAME_LENGTH = 1024  # a resource or principal name (each ACL'd resource is one znode)

#: The operations each resource type takes besides All (Kafka's `AclEntry.supportedOperations`).
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[Operation]] = {
    TOPIC: frozenset({READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS}),
    GROUP: frozenset({READ, DESCRIBE, DELETE}),
    CLUSTER: frozenset(
        {CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE}
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({DESCRIBE, WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({DESCRIBE}),
}

#: An Allow of any of these operations allows the key (Kafka's `AclAuthorizer.allowAclExists`);
#: every other operation is allowed by itself only. `All` covers every operation, in both senses.
ALLOWED_BY: dict[Operation, frozenset[Operation]] = {
    DESCRIBE: frozenset({DESCRIBE, READ, WRITE, DELETE, ALTER, ALL}),
    DESCRIBE_CONFIGS: frozenset({DESCRIBE_CONFIGS, ALTER_CONFIGS, ALL}),
}

_OPERATIONS = {op.value.upper(): op for op in Operation} | {op.name: op for op in Operation}
_RESOURCE_TYPES = {rt.value.upper(): rt for rt in ResourceType} | {rt.name: rt for rt in ResourceType}
_PERMISSIONS = {p.value.upper(): p for p in Permission}
_PATTERN_TYPES = {p.value: p for p in PatternType}


@dataclass(frozen=True)
class ResourcePattern:
    """A resource pattern: `ResourcePattern(GROUP, "billing")`, `(TOPIC, "*")`, `(GROUP, "b", PREFIXED)`."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = LITERAL

    def __str__(self) -> str:  # as kafka-acls.sh prints it
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
            f"patternType={self.pattern_type.value})"
        )

    def __lt__(self, other: ResourcePattern) -> bool:  # by type name, pattern type, name
        return self._key() < other._key()

    def _key(self) -> tuple[str, str, str]:
        return (self.resource_type.value, self.pattern_type.value, self.name)


@dataclass(frozen=True)
class AccessControlEntry:
    """Who (principal, host) may or may not (permission) do what (operation)."""

    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __str__(self) -> str:  # as kafka-acls.sh prints it
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission.name})"
        )

    def sort_key(self) -> tuple[str, str, str, str]:
        return (self.principal, self.permission.value, self.operation.value, self.host)


# ------------------------------------------------------------------------------------ parsing


def parse_operation(name: str) -> Operation:
    """`Read`, `READ`, `describe_configs`... (Kafka's names, any case) -> `Operation`."""
    op = _OPERATIONS.get(name.strip().upper().replace("-", "_")) or _OPERATIONS.get(
        name.strip().upper().replace("_", "").replace("-", "")
    )
    if op is None:
        known = ", ".join(o.value for o in Operation)
        raise AclError(f"unknown operation {name!r}; Kafka's operations are {known}")
    return op


def parse_resource_type(name: str) -> ResourceType:
    rt = _RESOURCE_TYPES.get(name.strip().upper())
    if rt is None:
        raise AclError(
            f"unknown resource type {name!r}; expected one of {', '.join(r.value for r in ResourceType)}"
        )
    return rt


def parse_permission(name: str) -> Permission:
    p = _PERMISSIONS.get(name.strip().upper())
    if p is None:
        raise AclError(f"unknown permission type {name!r}; expected Allow or Deny")
    return p


def parse_pattern_type(name: str) -> PatternType:
    p = _PATTERN_TYPES.get(name.strip().upper())
    if p is None:
        raise AclError(f"unknown resource pattern type {name!r}; expected literal or prefixed")
    return p


def parse_principal(value: str) -> str:
    """`User:NAME` (Kafka's principal form; `User:*` is every principal), checked."""
    if not value.startswith(USER) or len(value) == len(USER):
        raise AclError(
            f"principal {value!r} is not of the form User:NAME (e.g. User:alice, or User:* for everyone)"
        )
    if len(value) > MAX_NAME_LENGTH or not value.isprintable() or value != value.strip():
        raise AclError(
            f"principal {value[:60]!r} has unprintable characters, surrounding spaces or is longer "
            f"than {MAX_NAME_LENGTH} characters"
        )
    return value


def parse_super_users(value: str) -> tuple[str, ...]:
    """Kafka's `super.users` list: `User:admin;User:bob` (Kafka's `;`), or comma-separated when
    every part is a principal (a certificate's `User:CN=a,O=b` keeps its commas).

    >>> parse_super_users("User:admin;User:bob")
    ('User:admin', 'User:bob')
    >>> parse_super_users("User:admin,User:bob")
    ('User:admin', 'User:bob')
    >>> parse_super_users("User:CN=node,O=example")
    ('User:CN=node,O=example',)
    """
    parts = value.split(";")
    if len(parts) == 1:
        commas = [p.strip() for p in value.split(",")]
        if all(p.startswith(USER) for p in commas):
            parts = commas
    out = tuple(parse_principal(p.strip()) for p in parts if p.strip())
    if not out:
        raise AclError("no principal in --super-users; expected User:NAME[;User:NAME...]")
    return out


def parse_host(value: str) -> str:
    """`*` or a client's IP address: Kafka matches an ACL's host against the client's address."""
    value = value.strip()
    if value == WILDCARD_HOST:
        return value
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise AclError(
            f"host {value!r} is not * or an IP address; Kafka's ACLs match the client's address"
        ) from None


def check_name(resource_type: ResourceType, name: str, pattern_type: PatternType = LITERAL) -> str:
    """A resource name an ACL can be stored for (one znode per resource)."""
    if resource_type is CLUSTER:
        if name != CLUSTER_NAME or pattern_type is not LITERAL:
            raise AclError(f"the cluster resource is the literal {CLUSTER_NAME!r}")
        return name
    what = f"{resource_type.value.lower()} name {name[:60]!r}"
    if not name or name in (".", ".."):
        raise AclError(f"{what} is empty or . or ..; name a {resource_type.value.lower()}")
    if len(name) > MAX_NAME_LENGTH or "/" in name or not name.isprintable():
        raise AclError(
            f"{what} cannot have an ACL: it has '/' or unprintable characters, or is longer than "
            f"{MAX_NAME_LENGTH} characters (a prefixed ACL on the part before the '/' covers it)"
        )
    if pattern_type is PREFIXED and name == WILDCARD_RESOURCE:
        raise AclError("a prefixed pattern cannot be '*'; use the literal '*' for every resource")
    return name


def check_operation(resource_type: ResourceType, operation: Operation) -> Operation:
    """Refuse an operation Kafka's table does not give `resource_type` (All applies to every type)."""
    if operation is not ALL and operation not in SUPPORTED_OPERATIONS[resource_type]:
        takes = ", ".join(o.value for o in Operation if o is ALL or o in SUPPORTED_OPERATIONS[resource_type])
        raise AclError(
            f"operation {operation.value} does not apply to a {resource_type.value}; "
            f"a {resource_type.value} takes {takes}"
        )
    return operation


# ----------------------------------------------------------------------------------- deciding


def _matches(entry: AccessControlEntry, principal: str, host: str) -> bool:
    return (entry.principal == principal or entry.principal == WILDCARD_PRINCIPAL) and (
        entry.host == host or entry.host == WILDCARD_HOST
    )


def decide(entries: Iterable[AccessControlEntry], principal: str, host: str, operation: Operation) -> bool:
    """Kafka's decision over the entries that apply to one resource (super users aside):
    no matching Deny, and a matching Allow of the operation or of one that implies it."""
    allowing = ALLOWED_BY.get(operation) or (operation, ALL)
    allowed = False
    for e in entries:
        if not _matches(e, principal, host):
            continue
        if e.permission is DENY:
            if e.operation is operation or e.operation is ALL:
                return False
        elif e.operation in allowing:
            allowed = True
    return allowed


class Authorizer:
    """The ACLs of every resource pattern, and the decisions over them (see the module docstring).

    The owner keeps it current (`set_acls`, `replace`) from ZooKeeper (`security/acl_store.py`);
    it is used from one thread (the node's event loop)."""

    MAX_DECISIONS = 65_536  # remembered decisions; past it they are forgotten and made again

    def __init__(self, super_users: Iterable[str] = ()):
        self.super_users = frozenset(super_users)
        self._literal: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}
        self._decisions: dict[tuple, bool] = {}
        # Counts the changes of the ACLs: a decision remembered elsewhere (a connection's, in
        # coordinator/node/authorization.py) holds while it stays the same.
        self.version = 0

    def set_acls(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """`pattern`'s entries are now `entries` (none: the pattern has no ACL any more)."""
        acls = frozenset(entries)
        if pattern.pattern_type is LITERAL:
            table = self._literal
            key: object = (pattern.resource_type, pattern.name)
        else:
            table = self._prefixed.setdefault(pattern.resource_type, {})
            key = pattern.name
        if acls:
            table[key] = acls
        else:
            table.pop(key, None)
        self._decisions.clear()
        self.version += 1

    def replace(self, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        """Every pattern's entries at once (a full load)."""
        self._literal.clear()
        self._prefixed.clear()
        for pattern, entries in acls.items():
            self.set_acls(pattern, entries)
        self._decisions.clear()
        self.version += 1

    def acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        out = {ResourcePattern(rt, name): e for (rt, name), e in self._literal.items()}
        for rt, by_prefix in self._prefixed.items():
            out.update({ResourcePattern(rt, name, PREFIXED): e for name, e in by_prefix.items()})
        return out

    def matching(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """The entries that apply to the resource `name` of `resource_type`: its literal name's,
        the wildcard's, and those of every prefix of the name."""
        out: list[AccessControlEntry] = []
        for key in ((resource_type, name), (resource_type, WILDCARD_RESOURCE)):
            out.extend(self._literal.get(key, ()))
        for prefix, entries in self._prefixed.get(resource_type, {}).items():
            if name.startswith(prefix):
                out.extend(entries)
        return out

    def authorize(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        """May `principal`, connected from `host`, do `operation` on the resource `name`?"""
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = principal in self.super_users or decide(
                self.matching(resource_type, name), principal, host, operation
            )
            if len(self._decisions) >= self.MAX_DECISIONS:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision
