"""Shared by the tests of ZooKeeper credentials and ACLs (test_zk_auth, test_zk_sasl): secret
files, the CLI as a process with a given environment, and a namespace's znodes and clients.

    auth = secret(tmp / "gs.auth", "sasl:gs:pw\\n")           # mode 0600
    ok(env, "topics", "create", "clicks", "-p", "2")          # the CLI, exit code 0 asserted
    for path in znodes(hosts, "/t-x/sec"): ...                # read as the test servers' super user
    with every_writer(zk, data, env, log_path) as node: ...  # a node, consumers, CLI, as `env` says
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from coordinator.node.process import NodeProcess
from core.zk_auth import ZK_SECURITY_ENV
from testing.zookeeper import SUPER_AUTH
from tests import cli_fork
from tests.inspect_helpers import REPO, consume, coordinator_consumer, legacy_consumer
from topics.log import Log


def secret(path: Path, text: str) -> Path:
    """`path` holding `text`, readable by its owner only (as an auth or password file must be)."""
    path.write_text(text)
    path.chmod(0o600)
    return path


def cli(env: dict, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`groupshift ARGS` as a process with exactly the environment `env` (forked: tests/cli_fork.py)."""
    return cli_fork.shared().run(list(args), env, timeout=timeout, cwd=REPO, text=True)


def ok(env: dict, *args: str) -> str:
    done = cli(env, *args)
    assert done.returncode == 0, f"{args}: {done.stderr}"
    return done.stdout


def client(hosts: str, auth_data=None, sasl_options=None) -> KazooClient:
    """A started plain kazoo client (no chroot), with the credentials given and nothing else."""
    c = KazooClient(hosts=hosts, timeout=10.0, auth_data=auth_data, sasl_options=sasl_options)
    c.start(timeout=10)
    return c


def refused_everything(c: KazooClient, paths: list[str]) -> None:
    """Assert that `c` gets NoAuth reading, listing, changing, creating under and deleting each
    of `paths` (every request in flight at once); `c` is closed afterwards."""
    try:
        pending = [
            call(*args)
            for path in paths
            for call, args in (
                (c.get_async, (path,)),
                (c.get_children_async, (path,)),
                (c.set_async, (path, b"x")),
                (c.create_async, (path + "/intruder", b"")),
                (c.delete_async, (path,)),
            )
        ]
        for answer in pending:
            with pytest.raises(NoAuthError):
                answer.get(timeout=10)
    finally:
        c.stop()
        c.close()


def reads_and_changes_nothing(c: KazooClient, paths: list[str]) -> None:
    """Assert that the reader `c` reads every one of `paths` and may change or create under none."""
    try:
        for path in paths:
            c.get(path)
            c.get_children(path)
            with pytest.raises(NoAuthError):
                c.set(path, b"x")
            with pytest.raises(NoAuthError):
                c.create(path + "/intruder", b"")
    finally:
        c.stop()
        c.close()


def znodes(hosts: str, chroot: str) -> list[str]:
    """Every znode of the namespace `chroot`, the chroot first, read as the test servers' super user."""
    c = client(hosts, SUPER_AUTH)
    try:
        out, level = [], [chroot]
        while level:
            out += level
            level = [f"{p}/{k}" for p in level for k in c.get_children(p)]
        return out
    finally:
        c.stop()
        c.close()


@contextmanager
def every_writer(zk: str, data: Path, env: dict, records: int, log_path: Path) -> Iterator[NodeProcess]:
    """groupshift's writers into the namespace `zk`, all with the ZooKeeper settings of `env`
    (this process's environment holds them until the block ends): a coordinator node process, a
    scheme-three consumer of group g3 and a scheme-one consumer of g1 reading the `records`
    records of the topic `clicks` (already created and produced), `offsets export g3` and an
    offline `migrate run g1`. Yields the node, which serves until the block ends."""
    with pytest.MonkeyPatch.context() as mp:
        for var in ZK_SECURITY_ENV:
            mp.delenv(var, raising=False)
        for var in set(ZK_SECURITY_ENV) & set(env):
            mp.setenv(var, env[var])
        node = NodeProcess.start(
            zk, 1, "--data", str(data), "--group-initial-rebalance-delay-ms", "0",
            "--group-min-session-timeout-ms", "100", log_path=log_path,
        )  # fmt: skip
        try:
            log = Log(data)
            for make in (
                lambda: coordinator_consumer("g3", ["clicks"], zk, log, node.address),
                lambda: legacy_consumer("g1", ["clicks"], zk, log),
            ):
                consumer = make()
                try:
                    consume(consumer, records)
                finally:
                    consumer.close()
            assert "clicks,0," in ok(env, "offsets", "export", "g3")
            ok(env, "migrate", "run", "g1", "--from", "zk", "--to", "coordinator")
            yield node
        finally:
            node.stop()
