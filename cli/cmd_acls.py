"""`groupshift acls add|list|remove`: Kafka's ACLs in ZooKeeper, in the shape of `kafka-acls.sh`.

    groupshift acls add --allow-principal User:alice --operation Read --group billing --topic clicks
    groupshift acls add --deny-principal User:bob --operation Read --group bill \
        --resource-pattern-type prefixed
    groupshift acls list [--group billing] [--principal User:alice] [--json]
    groupshift acls remove --group billing [--allow-principal User:alice --operation Read] [--force]

Each ACL is written where Kafka's `AclAuthorizer` keeps it (`security/acl_store.py`), with a change
notification that nodes started with `--authorizer acl` apply at once (docs/security.md,
"Authorization"). Everything given is checked before ZooKeeper is touched: bad input is one line,
and nothing changes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import click

from cli.main import main, zk_option

ADD_PATTERN_TYPES = ("literal", "prefixed")
FILTER_PATTERN_TYPES = ("literal", "prefixed", "any", "match")


@main.group("acls")
def acls_group() -> None:
    """Kafka's ACLs in ZooKeeper (kafka-acls.sh's shape); enforced by nodes run with --authorizer acl."""


def _resources(f):
    for decorator in reversed(
        (
            click.option("--topic", "topics", multiple=True, help="A topic ('*': every topic). Repeatable."),
            click.option("--group", "groups", multiple=True, help="A group ('*': every group). Repeatable."),
            click.option(
                "--cluster", is_flag=True, help="The cluster resource (ListGroups sees every group)."
            ),
        )
    ):
        f = decorator(f)
    return f


def _entries(f):
    for decorator in reversed(
        (
            click.option(
                "--allow-principal", "allow_principals", multiple=True, metavar="User:NAME",
                help="Principal allowed (User:* is everyone). Repeatable.",
            ),
            click.option(
                "--deny-principal", "deny_principals", multiple=True, metavar="User:NAME",
                help="Principal denied (deny wins over allow). Repeatable.",
            ),
            click.option(
                "--allow-host", "allow_hosts", multiple=True, metavar="ADDRESS",
                help="Client address the allowed principals may come from (default: * every host).",
            ),
            click.option(
                "--deny-host", "deny_hosts", multiple=True, metavar="ADDRESS",
                help="Client address the denied principals are denied from (default: * every host).",
            ),
            click.option(
                "--operation", "operations", multiple=True, metavar="OPERATION",
                help="Read, Write, Describe, Delete, ... or All (the default). Repeatable.",
            ),
        )
    ):  # fmt: skip
        f = decorator(f)
    return f


@dataclass(frozen=True)
class _Request:
    """A command line's resources and entries, checked."""

    patterns: tuple  # ResourcePattern, for add and remove with a specific pattern type
    filters: tuple  # (ResourceType, name), for list/remove with any or match
    entries: frozenset  # AccessControlEntry


def _parse(topics, groups, cluster, pattern_type: str, entries_given: dict | None, adding: bool) -> _Request:
    """Everything the command line says, checked (raises `AclError`, a one-line error)."""
    from security import acls as A

    if not (topics or groups or cluster):
        if adding or entries_given is not None:
            raise A.AclError("give a resource: --topic TOPIC, --group GROUP or --cluster")
    named = [(A.TOPIC, t) for t in dict.fromkeys(topics)] + [(A.GROUP, g) for g in dict.fromkeys(groups)]
    if cluster:
        if pattern_type != "literal" and (adding or pattern_type == "prefixed"):
            raise A.AclError("--cluster is a literal resource; drop --resource-pattern-type")
        named.append((A.CLUSTER, A.CLUSTER_NAME))
    specific = pattern_type in ADD_PATTERN_TYPES
    ptype = A.parse_pattern_type(pattern_type) if specific else A.LITERAL
    for rtype, name in named:
        A.check_name(rtype, name, ptype if rtype is not A.CLUSTER else A.LITERAL)
    entries: set = set()
    if entries_given is not None:
        operations = [A.parse_operation(o) for o in entries_given["operations"] or ("All",)]
        for rtype, _ in named:
            for op in operations:
                A.check_operation(rtype, op)
        for permission, principals, hosts, hosts_flag in (
            (A.ALLOW, entries_given["allow_principals"], entries_given["allow_hosts"], "--allow-host"),
            (A.DENY, entries_given["deny_principals"], entries_given["deny_hosts"], "--deny-host"),
        ):
            if hosts and not principals:
                principal_flag = "--allow-principal" if permission is A.ALLOW else "--deny-principal"
                raise A.AclError(f"{hosts_flag} needs {principal_flag}")
            for principal in principals:
                p = A.parse_principal(principal)
                for host in hosts or (A.WILDCARD_HOST,):
                    h = A.parse_host(host)
                    entries.update(A.AccessControlEntry(p, h, op, permission) for op in operations)
        if adding and not entries:
            raise A.AclError("give --allow-principal or --deny-principal: whom the ACLs are for")
    patterns = tuple(
        A.ResourcePattern(rtype, name, A.LITERAL if rtype is A.CLUSTER else ptype) for rtype, name in named
    )
    return _Request(patterns if specific else (), () if specific else tuple(named), frozenset(entries))


def _check(fn, *args, **kwargs):
    from security.acls import AclError

    try:
        return fn(*args, **kwargs)
    except AclError as exc:
        raise click.UsageError(str(exc)) from None


def _connect(zk: str | None, writes: bool):
    from core.zk import connect
    from security.acl_store import AclStore

    client = connect(zk, create_chroot=writes, require_chroot=False)
    return client, AclStore(client)


def _close(client) -> None:
    client.stop()
    client.close()


def _selected(acls: dict, request: _Request, pattern_type: str) -> dict:
    """The patterns of `acls` the request names: exactly (literal, prefixed), by name (any), or
    every pattern that applies to a named resource (match); every pattern when none is named."""
    from security import acls as A

    if not request.patterns and not request.filters:
        return acls
    if request.patterns:
        return {p: e for p, e in acls.items() if p in request.patterns}
    out = {}
    for pattern, entries in acls.items():
        for rtype, name in request.filters:
            if pattern.resource_type is not rtype:
                continue
            if pattern.name == name or (
                pattern_type == "match"
                and (
                    (pattern.pattern_type is A.LITERAL and pattern.name == A.WILDCARD_RESOURCE)
                    or (pattern.pattern_type is A.PREFIXED and name.startswith(pattern.name))
                )
            ):
                out[pattern] = entries
    return out


def _print(acls: dict, as_json: bool = False) -> None:
    from security.acls import AccessControlEntry

    if as_json:
        rows = [
            {
                "resourceType": p.resource_type.value,
                "name": p.name,
                "patternType": p.pattern_type.value,
                "principal": e.principal,
                "host": e.host,
                "operation": e.operation.value,
                "permissionType": e.permission.value,
            }
            for p in sorted(acls)
            for e in sorted(acls[p], key=AccessControlEntry.sort_key)
        ]
        click.echo(json.dumps(rows))
        return
    for pattern in sorted(acls):
        click.echo(f"Current ACLs for resource `{pattern}`:")
        for e in sorted(acls[pattern], key=AccessControlEntry.sort_key):
            click.echo(f" \t{e}")
        click.echo("")


def _pattern_type_option(choices: tuple[str, ...], help_: str):
    return click.option(
        "--resource-pattern-type",
        "pattern_type",
        type=click.Choice(choices, case_sensitive=False),
        default="literal",
        show_default=True,
        help=help_,
    )


@acls_group.command("add")
@_entries
@_resources
@_pattern_type_option(
    ADD_PATTERN_TYPES, "literal: the name exactly ('*': every one); prefixed: every name starting with it."
)
@zk_option
def add(topics, groups, cluster, pattern_type, zk, **entries) -> None:
    """Add ACLs: the principals, hosts and operations given, on every resource given."""
    request = _check(_parse, topics, groups, cluster, pattern_type.lower(), entries, adding=True)
    client, store = _connect(zk, writes=True)
    try:
        for pattern in request.patterns:
            click.echo(f"Adding ACLs for resource `{pattern}`:")
            for e in sorted(request.entries, key=lambda e: e.sort_key()):
                click.echo(f" \t{e}")
            click.echo("")
            store.add(pattern, request.entries)
        _print({p: store.read(p)[0] for p in request.patterns})
    finally:
        _close(client)


@acls_group.command("list")
@_resources
@click.option(
    "--principal",
    "principals",
    multiple=True,
    metavar="User:NAME",
    help="Only this principal's ACLs. Repeatable.",
)
@_pattern_type_option(
    FILTER_PATTERN_TYPES,
    "literal or prefixed: that pattern of the names given; any: both; "
    "match: every pattern that applies to them.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: one object per ACL.")
@zk_option
def list_(topics, groups, cluster, principals, pattern_type, as_json, zk) -> None:
    """List ACLs (every one, or those of the resources given)."""
    from security.acls import parse_principal

    request = _check(_parse, topics, groups, cluster, pattern_type.lower(), None, adding=False)
    wanted = {_check(parse_principal, p) for p in principals}
    client, store = _connect(zk, writes=False)
    try:
        acls = _selected(store.load_all(), request, pattern_type.lower())
    finally:
        _close(client)
    if wanted:
        acls = {p: es for p, e in acls.items() if (es := frozenset(x for x in e if x.principal in wanted))}
    _print(acls, as_json)


@acls_group.command("remove")
@_entries
@_resources
@_pattern_type_option(
    FILTER_PATTERN_TYPES[:3], "literal or prefixed: that pattern of the names given; any: both."
)
@click.option("--force", is_flag=True, help="Do not ask for confirmation.")
@zk_option
def remove(topics, groups, cluster, pattern_type, force, zk, **entries) -> None:
    """Remove ACLs: those given, or every ACL of the resources given when no principal is given."""
    everything = not (entries["allow_principals"] or entries["deny_principals"])
    if everything and (entries["operations"] or entries["allow_hosts"] or entries["deny_hosts"]):
        raise click.UsageError("--operation and --*-host select ACLs of the principals given; add them")
    request = _check(_parse, topics, groups, cluster, pattern_type.lower(), entries, adding=False)
    client, store = _connect(zk, writes=False)
    try:
        targets = request.patterns or tuple(_selected(store.load_all(), request, pattern_type.lower()))
        confirmed = [p for p in targets if force or _confirm(_question(p, None if everything else request))]
        for pattern in confirmed:  # every answer first: a refusal midway removes nothing
            store.remove(pattern, None if everything else request.entries)
        _print({p: e for p in targets if (e := store.read(p)[0])})
    finally:
        _close(client)


def _question(pattern, request: _Request | None) -> str:
    """kafka-acls.sh's question before removing the ACLs of `pattern` (all of them: no request)."""
    if request is None:
        return f"Are you sure you want to delete all ACLs for resource `{pattern}`?"
    listed = "".join(f"\n \t{e}" for e in sorted(request.entries, key=lambda e: e.sort_key()))
    return f"Are you sure you want to remove ACLs:{listed}\n from resource `{pattern}`?"


def _confirm(question: str) -> bool:
    """Ask on a terminal (the question on stderr: stdout is the command's result); read the answer
    without asking when stdin is a pipe or a file. No answer at all (stdin closed) is one line that
    says how to go on, instead of a question on stdout followed by `aborted`."""
    stdin = click.get_text_stream("stdin")
    if stdin.isatty():
        return click.confirm(question, default=False, err=True)
    answer = stdin.readline(64)
    if not answer:
        raise click.ClickException(
            "acls remove asks before removing and standard input is closed: pass --force to remove "
            "without asking, or answer y on standard input"
        )
    return answer.strip().lower() in ("y", "yes")
