"""`groupshift acls add|list|remove` against real ZooKeeper, and its bad input (one line, nothing changed).

Each command runs as a real process (`python -m cli`). The ACLs land where Kafka's `AclAuthorizer`
keeps them (docs/security.md): the round trip is checked through the command's own `list --json`
and through the znodes themselves.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests import cli_fork
from tests.snapshots import changes, zk_tree

REPO = Path(__file__).resolve().parents[3]


def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    """`python -m cli ARGS` as a process of its own (forked: tests/cli_fork.py), output as text."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return cli_fork.shared().run(list(args), env, stdin, timeout=60, cwd=REPO, text=True)


def acls(zk: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    done = cli("acls", *args, "--zk", zk, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done


def listed(zk: str, *args: str) -> set[tuple]:
    rows = json.loads(acls(zk, "list", "--json", *args).stdout)
    keys = ("resourceType", "name", "patternType", "principal", "operation", "permissionType", "host")
    return {tuple(r[k] for k in keys) for r in rows}


def test_add_list_and_remove_round_trip(zk_connect, zk):
    zk_ = zk_connect
    alice = ("--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe")
    out = acls(zk_, "add", *alice, "--group", "billing", "--topic", "clicks").stdout
    assert (
        "Adding ACLs for resource `ResourcePattern(resourceType=GROUP, name=billing, patternType=LITERAL)`"
        in out
    )
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in out
    acls(zk_, "add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.9", "--operation", "Read",
         "--group", "bill", "--resource-pattern-type", "prefixed")  # fmt: skip
    acls(zk_, "add", "--allow-principal", "User:*", "--operation", "Describe", "--cluster")
    everything = {
        ("Group", "billing", "LITERAL", "User:alice", "Read", "Allow", "*"),
        ("Group", "billing", "LITERAL", "User:alice", "Describe", "Allow", "*"),
        ("Topic", "clicks", "LITERAL", "User:alice", "Read", "Allow", "*"),
        ("Topic", "clicks", "LITERAL", "User:alice", "Describe", "Allow", "*"),
        ("Group", "bill", "PREFIXED", "User:bob", "Read", "Deny", "10.0.0.9"),
        ("Cluster", "kafka-cluster", "LITERAL", "User:*", "Describe", "Allow", "*"),
    }
    assert listed(zk_) == everything
    # Kafka's layout, as kafka-acls.sh would have written it
    doc = json.loads(zk.get("/kafka-acl-extended/prefixed/Group/bill")[0])
    assert doc == {
        "version": 1,
        "acls": [
            {"principal": "User:bob", "permissionType": "Deny", "operation": "Read", "host": "10.0.0.9"}
        ],
    }
    assert {zk.get(f"/kafka-acl-changes/{c}")[0] for c in zk.get_children("/kafka-acl-changes")} >= {
        b"Group:billing",
        b"Topic:clicks",
        b"Cluster:kafka-cluster",
    }
    assert listed(zk_, "--group", "billing") == {r for r in everything if r[1] == "billing"}
    assert listed(zk_, "--group", "billing", "--resource-pattern-type", "match") == {
        r for r in everything if r[1] in ("billing", "bill")
    }
    assert listed(zk_, "--principal", "User:bob") == {r for r in everything if r[3] == "User:bob"}
    text = acls(zk_, "list", "--topic", "clicks").stdout
    assert text.startswith("Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=clicks")

    acls(
        zk_,
        "remove",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--group",
        "billing",
        stdin="y\n",
    )
    assert ("Group", "billing", "LITERAL", "User:alice", "Read", "Allow", "*") not in listed(zk_)
    no = cli("acls", "remove", "--topic", "clicks", "--zk", zk_, stdin="n\n")
    assert no.returncode == 0 and len([r for r in listed(zk_) if r[1] == "clicks"]) == 2  # answered no
    acls(zk_, "remove", "--force", "--topic", "clicks", "--group", "billing")
    acls(zk_, "remove", "--force", "--group", "bill", "--resource-pattern-type", "any")
    assert listed(zk_) == {("Cluster", "kafka-cluster", "LITERAL", "User:*", "Describe", "Allow", "*")}
    assert not zk.exists("/kafka-acl/Group/billing")  # a resource without ACLs has no znode, as in Kafka


@pytest.fixture(scope="module")
def namespace(module_zk_connect):
    acls(
        module_zk_connect, "add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "keep"
    )
    return module_zk_connect


def bad(id_: str, *args: str):
    return pytest.param(list(args), id=id_)


ADD = ("acls", "add", "--allow-principal", "User:a")
SERVE = ("coordinator", "serve", "--node-id", "9")
BAD = [
    bad("unknown-operation", *ADD, "--operation", "Raed", "--group", "g"),
    bad("operation-not-for-groups", *ADD, "--operation", "Write", "--group", "g"),
    bad("operation-not-for-the-cluster", *ADD, "--operation", "Read", "--cluster"),
    bad("principal-without-user", "acls", "add", "--allow-principal", "alice", "--group", "g"),
    bad("no-resource", *ADD, "--operation", "Read"),
    bad("no-principal", "acls", "add", "--operation", "Read", "--group", "g"),
    bad("host-not-an-address", *ADD, "--allow-host", "example.com", "--group", "g"),
    bad("host-without-its-principal", *ADD, "--deny-host", "10.0.0.1", "--group", "g"),
    bad("name-with-slash", *ADD, "--group", "a/b"),
    bad("empty-name", *ADD, "--group", ""),
    bad("prefixed-star", *ADD, "--group", "*", "--resource-pattern-type", "prefixed"),
    bad("prefixed-cluster", *ADD, "--cluster", "--resource-pattern-type", "prefixed"),
    bad("add-match", *ADD, "--group", "g", "--resource-pattern-type", "match"),
    bad("remove-operation-without-principal", "acls", "remove", "--group", "keep", "--operation", "Read"),
    bad("remove-not-confirmed", "acls", "remove", "--group", "keep"),  # stdin closed: no answer
    bad("remove-no-resource", "acls", "remove", "--force", "--allow-principal", "User:alice"),
    bad("list-principal-without-user", "acls", "list", "--principal", "alice"),
    bad("serve-unknown-authorizer", *SERVE, "--authorizer", "ranger"),
    bad("serve-super-user-without-user", *SERVE, "--authorizer", "acl", "--super-users", "admin"),
    bad("serve-super-users-without-authorizer", *SERVE, "--super-users", "User:admin"),
]


@pytest.mark.parametrize("args", BAD)
def test_bad_input_is_one_line_and_changes_nothing(namespace, args):
    before = zk_tree(namespace)
    done = cli(*args, "--zk", namespace)
    lines = done.stderr.splitlines()
    assert done.returncode != 0, done.stdout
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert done.stdout == ""  # a refusal says nothing on stdout (not even remove's question)
    after = zk_tree(namespace)
    assert after == before, changes(before, after)
