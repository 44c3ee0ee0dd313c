"""security/acls.py: Kafka's ACL semantics as a table, the parsers, and properties against a
reference written from Kafka's `AclAuthorizer` (deny wins, implied Describe, All, wildcards,
prefixes, super users, nothing matching = denied)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from security import acls as A
from security.acls import (
    ALL,
    ALLOW,
    ALTER,
    ALTER_CONFIGS,
    CLUSTER,
    CREATE,
    DELETE,
    DENY,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    LITERAL,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    AccessControlEntry,
    AclError,
    Authorizer,
    ResourcePattern,
)

ALICE, BOB = "User:alice", "User:bob"
HOST, OTHER_HOST = "10.0.0.7", "10.0.0.8"


def ace(principal=ALICE, op=READ, permission=ALLOW, host="*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, permission)


def literal(name: str, rtype=GROUP) -> ResourcePattern:
    return ResourcePattern(rtype, name, LITERAL)


def prefixed(name: str, rtype=GROUP) -> ResourcePattern:
    return ResourcePattern(rtype, name, PREFIXED)


def case(id_, acls, op, name="g", allowed=True, rtype=GROUP, principal=ALICE, host=HOST):
    return pytest.param(acls, (principal, host, op, rtype, name), allowed, id=id_)


G, T = literal("g"), literal("t", TOPIC)
DENIED = False
BUT_BOB = [(G, ace(principal="User:*")), (G, ace(principal="User:bob", permission=DENY))]
# (the ACLs, who asks for what, allowed?) — each row one rule of Kafka's AclAuthorizer
SEMANTICS = [
    case("no-acl-denied", [], READ, allowed=DENIED),
    case("literal-allow", [(G, ace())], READ),
    case("other-principal", [(G, ace())], READ, principal="User:bob", allowed=DENIED),
    case("other-resource", [(G, ace())], READ, name="h", allowed=DENIED),
    case("other-resource-type", [(G, ace())], READ, rtype=TOPIC, allowed=DENIED),
    case("other-operation", [(G, ace())], DELETE, allowed=DENIED),
    case("read-implies-describe", [(G, ace(op=READ))], DESCRIBE),
    case("write-implies-describe", [(T, ace(op=WRITE))], DESCRIBE, "t", rtype=TOPIC),
    case("delete-implies-describe", [(G, ace(op=DELETE))], DESCRIBE),
    case("alter-implies-describe", [(T, ace(op=ALTER))], DESCRIBE, "t", rtype=TOPIC),
    case("create-not-describe", [(T, ace(op=CREATE))], DESCRIBE, "t", DENIED, rtype=TOPIC),
    case("describe-not-read", [(G, ace(op=DESCRIBE))], READ, allowed=DENIED),
    case("alterconfigs-describeconfigs", [(T, ace(op=ALTER_CONFIGS))], DESCRIBE_CONFIGS, "t", rtype=TOPIC),
    case("alterconfigs-not-describe", [(T, ace(op=ALTER_CONFIGS))], DESCRIBE, "t", DENIED, rtype=TOPIC),
    case("all-allows-everything", [(G, ace(op=ALL))], DELETE),
    case("all-allows-describe", [(G, ace(op=ALL))], DESCRIBE),
    case("deny-all-wins", [(G, ace()), (G, ace(op=ALL, permission=DENY))], READ, allowed=DENIED),
    case("deny-wins", [(G, ace()), (G, ace(permission=DENY))], READ, allowed=DENIED),
    case("deny-read-leaves-describe", [(G, ace(op=ALL)), (G, ace(permission=DENY))], DESCRIBE),
    case("wildcard-resource", [(literal("*"), ace())], READ, name="anything"),
    case("wildcard-principal", [(G, ace(principal="User:*"))], READ, principal="User:bob"),
    case("everyone-but-bob", BUT_BOB, READ, principal="User:bob", allowed=DENIED),
    case("everyone-but-bob-alice", BUT_BOB, READ),
    case("host-matches", [(G, ace(host=HOST))], READ),
    case("host-differs", [(G, ace(host=HOST))], READ, host=OTHER_HOST, allowed=DENIED),
    case("deny-other-host", [(G, ace()), (G, ace(permission=DENY, host=OTHER_HOST))], READ),
    case("prefix-matches", [(prefixed("bill"), ace())], READ, "billing"),
    case("prefix-longer-than-name", [(prefixed("bill"), ace())], READ, "bil", DENIED),
    case("prefix-not-at-start", [(prefixed("bill"), ace())], READ, "xbilling", DENIED),
    case("prefix-equal-name", [(prefixed("bill"), ace())], READ, "bill"),
    case("prefixed-deny-beats-literal", [(literal("billing"), ace()), (prefixed("bi"), ace(permission=DENY))],
         READ, "billing", DENIED),
    case("literal-is-not-a-prefix", [(literal("bill"), ace())], READ, "billing", DENIED),
    case("wildcard-deny-wins", [(literal("*"), ace(permission=DENY)), (G, ace())], READ, allowed=DENIED),
    case("cluster-describe", [(literal(A.CLUSTER_NAME, CLUSTER), ace(op=DESCRIBE))], DESCRIBE, A.CLUSTER_NAME,
         rtype=CLUSTER),
]  # fmt: skip


@pytest.mark.parametrize("acls, asked, allowed", SEMANTICS)
def test_kafkas_semantics(acls, asked, allowed):
    auth = Authorizer()
    by_pattern: dict = {}
    for pattern, entry in acls:
        by_pattern.setdefault(pattern, set()).add(entry)
    auth.replace(by_pattern)
    assert auth.authorize(*asked) is allowed
    assert auth.authorize(*asked) is allowed  # the remembered decision


def test_super_users_bypass_every_acl():
    auth = Authorizer(super_users=[BOB])
    auth.set_acls(literal("*"), [ace(principal="User:*", op=ALL, permission=DENY)])
    assert auth.authorize(BOB, HOST, DELETE, GROUP, "g")
    assert not auth.authorize(ALICE, HOST, DESCRIBE, GROUP, "g")


def test_a_change_forgets_the_decisions_made_before_it():
    auth = Authorizer()
    assert not auth.authorize(ALICE, HOST, READ, GROUP, "g")
    auth.set_acls(literal("g"), [ace()])
    assert auth.authorize(ALICE, HOST, READ, GROUP, "g")
    auth.set_acls(prefixed("g"), [ace(permission=DENY)])
    assert not auth.authorize(ALICE, HOST, READ, GROUP, "g")
    auth.set_acls(prefixed("g"), [])
    assert auth.authorize(ALICE, HOST, READ, GROUP, "g")
    assert set(auth.acls()) == {literal("g")}


def test_the_decisions_remembered_are_bounded(monkeypatch):
    monkeypatch.setattr(Authorizer, "MAX_DECISIONS", 10)
    auth = Authorizer()
    auth.set_acls(literal("*"), [ace()])
    for i in range(25):
        assert auth.authorize(ALICE, HOST, READ, GROUP, f"g{i}")
    assert len(auth._decisions) <= 10


# -------------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "name, op",
    [("Read", READ), ("READ", READ), ("read", READ), ("DescribeConfigs", DESCRIBE_CONFIGS),
     ("DESCRIBE_CONFIGS", DESCRIBE_CONFIGS), ("describe-configs", DESCRIBE_CONFIGS), ("All", ALL)],
)  # fmt: skip
def test_operations_by_kafkas_names(name, op):
    assert A.parse_operation(name) is op


@pytest.mark.parametrize("name", ["Raed", "", "Any", "Unknown", "CreateTokens"])
def test_an_unknown_operation_is_refused(name):
    with pytest.raises(AclError, match="unknown operation"):
        A.parse_operation(name)


def test_the_operations_each_resource_type_takes_are_kafkas():
    assert A.SUPPORTED_OPERATIONS[GROUP] == {READ, DESCRIBE, DELETE}
    assert A.check_operation(GROUP, ALL) is ALL
    with pytest.raises(
        AclError, match="Write does not apply to a Group; a Group takes All, Read, Delete, Describe"
    ):
        A.check_operation(GROUP, WRITE)
    with pytest.raises(AclError, match="does not apply to a Cluster"):
        A.check_operation(CLUSTER, READ)
    assert A.check_operation(TOPIC, WRITE) is WRITE


@pytest.mark.parametrize("value", ["alice", "User:", "Group:x", "user:alice", " User:a", "User:a\x00"])
def test_a_principal_must_be_user_name(value):
    with pytest.raises(AclError):
        A.parse_principal(value)


def test_principals_and_super_users():
    assert A.parse_principal("User:*") == "User:*"
    assert A.parse_principal("User:CN=node, O=Example") == "User:CN=node, O=Example"
    assert A.parse_super_users("User:a; User:b") == ("User:a", "User:b")
    with pytest.raises(AclError):
        A.parse_super_users(";;")
    with pytest.raises(AclError):
        A.parse_super_users("User:a;bob")


def test_hosts_are_addresses_or_star():
    assert A.parse_host("*") == "*"
    assert A.parse_host("10.0.0.7") == "10.0.0.7"
    assert A.parse_host("::1") == "::1"
    with pytest.raises(AclError, match="not \\* or an IP address"):
        A.parse_host("example.com")


@pytest.mark.parametrize(
    "rtype, name, ptype",
    [(GROUP, "", LITERAL), (GROUP, "a/b", LITERAL), (TOPIC, "..", LITERAL), (GROUP, "*", PREFIXED),
     (CLUSTER, "other", LITERAL), (CLUSTER, A.CLUSTER_NAME, PREFIXED), (GROUP, "x" * 2000, LITERAL)],
)  # fmt: skip
def test_names_that_cannot_have_an_acl(rtype, name, ptype):
    with pytest.raises(AclError):
        A.check_name(rtype, name, ptype)


def test_kafkas_printed_forms():
    assert str(prefixed("bill")) == "ResourcePattern(resourceType=GROUP, name=bill, patternType=PREFIXED)"
    assert str(ace()) == "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"


# ----------------------------------------------------------------------------------- properties

PRINCIPALS = ["User:alice", "User:bob", "User:*"]
HOSTS = ["*", HOST, OTHER_HOST]
NAMES = ["*", "b", "bi", "bill", "billing", "c"]
entries = st.builds(
    AccessControlEntry,
    st.sampled_from(PRINCIPALS),
    st.sampled_from(HOSTS),
    st.sampled_from([ALL, READ, WRITE, DELETE, DESCRIBE, ALTER, CREATE]),
    st.sampled_from([ALLOW, DENY]),
)
patterns = st.builds(
    ResourcePattern,
    st.sampled_from([GROUP, TOPIC]),
    st.sampled_from(NAMES),
    st.sampled_from([LITERAL, PREFIXED]),
).filter(lambda p: not (p.pattern_type is PREFIXED and p.name == "*"))
tables = st.dictionaries(patterns, st.frozensets(entries, min_size=1, max_size=4), max_size=6)
questions = st.tuples(
    st.sampled_from(["User:alice", "User:bob", "User:carol"]),
    st.sampled_from([HOST, OTHER_HOST]),
    st.sampled_from([READ, WRITE, DELETE, DESCRIBE, ALTER, CREATE]),
    st.sampled_from([GROUP, TOPIC]),
    st.sampled_from(["b", "bill", "billing", "c", "*"]),
)


def reference(table, super_users, principal, host, op, rtype, name) -> bool:
    """Kafka's AclAuthorizer.authorizeAction, written out plainly."""
    if principal in super_users:
        return True
    applies = [
        e
        for p, es in table.items()
        if p.resource_type is rtype
        and (
            (p.pattern_type is LITERAL and p.name in (name, "*"))
            or (p.pattern_type is PREFIXED and name.startswith(p.name))
        )
        for e in es
    ]

    def matching(e, ops, permission):
        return (
            e.permission is permission
            and e.principal in (principal, "User:*")
            and e.host in (host, "*")
            and (e.operation in ops or e.operation is ALL)
        )

    if any(matching(e, {op}, DENY) for e in applies):
        return False
    implied = {DESCRIBE: {DESCRIBE, READ, WRITE, DELETE, ALTER}}.get(op, {op})
    return any(matching(e, implied, ALLOW) for e in applies)


@settings(max_examples=400, deadline=None)
@given(tables, st.lists(questions, min_size=1, max_size=8), st.booleans())
def test_the_authorizer_decides_as_kafka_does(table, asked, alice_is_super):
    supers = {"User:alice"} if alice_is_super else set()
    auth = Authorizer(super_users=supers)
    auth.replace(table)
    for q in asked * 2:  # the second time from the remembered decisions
        assert auth.authorize(*q) is reference(table, supers, *q), q


@settings(max_examples=300, deadline=None)
@given(tables, questions, entries)
def test_a_matching_deny_always_wins_and_an_allow_never_takes_away(table, q, entry):
    principal, host, op, rtype, name = q
    auth = Authorizer()
    auth.replace(table)
    before = auth.authorize(*q)
    pattern = ResourcePattern(rtype, name, LITERAL)
    deny = AccessControlEntry(principal, host, op, DENY)
    auth.set_acls(pattern, set(table.get(pattern, ())) | {deny})
    assert not auth.authorize(*q)
    auth.replace(table)
    allow = AccessControlEntry(entry.principal, entry.host, entry.operation, ALLOW)
    auth.set_acls(pattern, set(table.get(pattern, ())) | {allow})
    assert auth.authorize(*q) or not before
