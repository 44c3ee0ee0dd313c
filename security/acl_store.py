"""Kafka's ACLs in ZooKeeper, in the layout Kafka's `AclAuthorizer` keeps them (Kafka's `ZkData`).

    /kafka-acl/<ResourceType>/<name>                    literal patterns (and `*`, every resource)
    /kafka-acl-extended/prefixed/<ResourceType>/<name>  prefixed patterns
        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>                `Group:billing`: a literal pattern changed
    /kafka-acl-extended-changes/acl_changes_<seq>       {"version":1,"resourceType":"Group",
                                                         "name":"bill","patternType":"PREFIXED"}

So a tree written by Kafka's `kafka-acls.sh --authorizer-properties zookeeper.connect=...` is read
as it is, and the other way round. A change is a read of the resource's znode and a conditional
write at the version read (retried when another writer came in between), then a sequential change
notification that tells every node to read that resource again (`AclStore.update`). Nodes keep
their copy current from the notifications (`coordinator/node/acl_cache.py`); notifications older
than 15 minutes are purged, as Kafka's brokers do.

The first half of this module is the layout (paths, payloads: pure); `AclStore` is the I/O, on a
kazoo client.

    store = AclStore(zk)
    store.add(ResourcePattern(GROUP, "billing"), [AccessControlEntry("User:alice", "*", READ, ALLOW)])
    store.load_all()          # {ResourcePattern: frozenset[AccessControlEntry]}
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from security.acls import (
    LITERAL,
    PREFIXED,
    AccessControlEntry,
    AclError,
    ResourcePattern,
    parse_operation,
    parse_pattern_type,
    parse_permission,
    parse_resource_type,
)

log = logging.getLogger(__name__)

LITERAL_ROOT = "/kafka-acl"
EXTENDED_ROOT = "/kafka-acl-extended"
PREFIXED_ROOT = f"{EXTENDED_ROOT}/{PREFIXED.value.lower()}"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
ROOTS = {LITERAL: LITERAL_ROOT, PREFIXED: PREFIXED_ROOT}
CHANGE_ROOTS = {LITERAL: LITERAL_CHANGES, PREFIXED: EXTENDED_CHANGES}
LAYOUT = (LITERAL_ROOT, PREFIXED_ROOT, LITERAL_CHANGES, EXTENDED_CHANGES)
VERSION = 1
CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's: notifications older than this are purged
MAX_RESOURCES = 100_000  # ACL'd resources a load reads; past it, the load refuses
MAX_ENTRIES = 10_000  # entries of one resource (its znode stays well under ZooKeeper's 1 MiB)
MAX_UPDATE_TRIES = 20
MAX_PURGE = 1_000  # notifications one purge deletes


# ----------------------------------------------------------------------------------- layout


def resource_path(pattern: ResourcePattern) -> str:
    return f"{ROOTS[pattern.pattern_type]}/{pattern.resource_type.value}/{pattern.name}"


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """The znode payload of a resource's entries (Kafka's `AclEntry.toJsonCompatibleMap`)."""
    acls = [
        {
            "principal": e.principal,
            "permissionType": e.permission.value,
            "operation": e.operation.value,
            "host": e.host,
        }
        for e in sorted(entries, key=AccessControlEntry.sort_key)
    ]
    return json.dumps({"version": VERSION, "acls": acls}, separators=(",", ":")).encode()


def decode_acls(data: bytes | None) -> frozenset[AccessControlEntry]:
    """A resource znode's entries (Kafka's `AclEntry.fromBytes`); raises `AclError` if unreadable."""
    if not data:
        return frozenset()
    try:
        doc = json.loads(data)
        if doc.get("version") != VERSION:
            raise AclError(f"ACL version {doc.get('version')!r}; this reads version {VERSION}")
        return frozenset(
            AccessControlEntry(
                principal=str(a["principal"]),
                host=str(a["host"]),
                operation=parse_operation(str(a["operation"])),
                permission=parse_permission(str(a["permissionType"])),
            )
            for a in doc["acls"]
        )
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise AclError(f"unreadable ACLs ({exc!r}): {data[:100]!r}") from None


def encode_change(pattern: ResourcePattern) -> bytes:
    """A change notification's payload (Kafka's `LiteralAclChangeStore`/`ExtendedAclChangeStore`)."""
    if pattern.pattern_type is LITERAL:
        return f"{pattern.resource_type.value}:{pattern.name}".encode()
    return json.dumps(
        {
            "version": VERSION,
            "resourceType": pattern.resource_type.value,
            "name": pattern.name,
            "patternType": pattern.pattern_type.value,
        },
        separators=(",", ":"),
    ).encode()


def decode_change(root: str, data: bytes) -> ResourcePattern:
    """The pattern a notification under `root` names; raises `AclError` if unreadable."""
    try:
        if root == LITERAL_CHANGES:
            rtype, sep, name = data.decode().partition(":")
            if not sep:
                raise ValueError("expected ResourceType:name")
            return ResourcePattern(parse_resource_type(rtype), name, LITERAL)
        doc = json.loads(data)
        if doc.get("version", VERSION) > VERSION:
            raise ValueError(f"change event version {doc['version']}")
        return ResourcePattern(
            parse_resource_type(doc["resourceType"]), str(doc["name"]), parse_pattern_type(doc["patternType"])
        )
    except (ValueError, TypeError, KeyError, AttributeError, AclError) as exc:
        raise AclError(f"unreadable ACL change notification ({exc}): {data[:100]!r}") from None


def change_seq(child: str) -> int | None:
    """The sequence number of a notification znode's name (None: not a notification)."""
    digits = child[len(CHANGE_PREFIX) :]
    return int(digits) if child.startswith(CHANGE_PREFIX) and digits.isdigit() else None


# ------------------------------------------------------------------------------------- I/O


class AclStore:
    """Kafka's ACL znodes through one kazoo client (see the module docstring)."""

    def __init__(self, zk: KazooClient):
        self.zk = zk

    def ensure_layout(self) -> None:
        """The four roots Kafka's brokers create (a watch needs its znode to exist)."""
        for path in LAYOUT:
            self.zk.ensure_path(path)

    def read(self, pattern: ResourcePattern) -> tuple[frozenset[AccessControlEntry], int | None]:
        """A pattern's entries and its znode's version (None: no znode)."""
        try:
            data, stat = self.zk.get(resource_path(pattern))
        except NoNodeError:
            return frozenset(), None
        return decode_acls(data), stat.version

    def patterns(self) -> list[ResourcePattern]:
        """Every pattern that has a znode (unknown resource types are skipped, as Kafka does)."""
        out: list[ResourcePattern] = []
        for pattern_type, root in ROOTS.items():
            try:
                types = self.zk.get_children(root)
            except NoNodeError:
                continue
            listed = [(t, self.zk.get_children_async(f"{root}/{t}")) for t in sorted(types)]
            for type_name, pending in listed:
                try:
                    rtype = parse_resource_type(type_name)
                    names = pending.get()
                except AclError:
                    log.warning("ignoring unknown ACL resource type %s under %s", type_name, root)
                    continue
                except NoNodeError:
                    continue
                out += [ResourcePattern(rtype, n, pattern_type) for n in sorted(names)]
                if len(out) > MAX_RESOURCES:
                    raise AclError(
                        f"more than {MAX_RESOURCES} resources have ACLs; use prefixed or wildcard ACLs"
                    )
        return out

    def load_all(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        """Every pattern's entries, read pipelined; an unreadable znode is skipped with a warning."""
        pending = [(p, self.zk.get_async(resource_path(p))) for p in self.patterns()]
        out = {}
        for pattern, result in pending:
            try:
                entries = decode_acls(result.get()[0])
            except NoNodeError:
                continue
            except AclError as exc:
                log.warning("ignoring the ACLs of %s: %s", pattern, exc)
                continue
            if entries:
                out[pattern] = entries
        return out

    def update(
        self,
        pattern: ResourcePattern,
        change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]],
    ) -> tuple[frozenset[AccessControlEntry], frozenset[AccessControlEntry]]:
        """Apply `change` to `pattern`'s entries with a conditional write (Kafka's
        `updateResourceAcls`): read with the version, write at that version, read again and retry
        when another writer came in between. A change notification follows a real change.
        Returns (before, after)."""
        for attempt in range(MAX_UPDATE_TRIES):
            current, version = self.read(pattern)
            new = frozenset(change(current))
            if new == current:
                return current, new
            if len(new) > MAX_ENTRIES:
                raise AclError(f"{pattern} would have more than {MAX_ENTRIES} ACLs")
            path = resource_path(pattern)
            try:
                if not new:
                    self.zk.delete(path, version=version)
                elif version is None:
                    self.zk.create(path, encode_acls(new), makepath=True)
                else:
                    self.zk.set(path, encode_acls(new), version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                time.sleep(min(0.5, 0.02 * 2**attempt) * random.random())
                continue
            self.notify(pattern)
            return current, new
        raise AclError(f"the ACLs of {pattern} kept changing under {MAX_UPDATE_TRIES} tries; try again")

    def add(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> frozenset:
        added = frozenset(entries)
        return self.update(pattern, lambda current: current | added)[1]

    def remove(
        self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry] | None = None
    ) -> frozenset:
        """Remove `entries` from `pattern` (None: all of them); returns the entries removed."""
        gone = None if entries is None else frozenset(entries)
        before, after = self.update(pattern, lambda current: frozenset() if gone is None else current - gone)
        return before - after

    def notify(self, pattern: ResourcePattern) -> None:
        root = CHANGE_ROOTS[pattern.pattern_type]
        self.zk.create(f"{root}/{CHANGE_PREFIX}", encode_change(pattern), sequence=True, makepath=True)

    def read_change(self, root: str, child: str) -> tuple[ResourcePattern, int] | None:
        """The pattern a notification names and its creation time (ms); None when it is gone."""
        try:
            data, stat = self.zk.get(f"{root}/{child}")
        except NoNodeError:
            return None
        return decode_change(root, data), stat.ctime

    def purge_changes(self, root: str, children: Iterable[str], now_ms: int) -> int:
        """Delete the notifications among `children` older than Kafka's 15 minutes; how many."""
        names = sorted((c for c in children if change_seq(c) is not None), key=change_seq)[:MAX_PURGE]
        stats = [(c, self.zk.exists_async(f"{root}/{c}")) for c in names]
        old = []
        for child, pending in stats:
            stat = pending.get()
            if stat is not None and now_ms - stat.ctime > CHANGE_EXPIRATION_MS:
                old.append(self.zk.delete_async(f"{root}/{child}"))
        for pending in old:
            try:
                pending.get()
            except NoNodeError:
                pass
        return len(old)
