"""The one kazoo client factory, and where groupshift finds its ZooKeeper.

Every package connects through `connect()`; the connect string is Kafka's
(`host:port[,host:port...][/chroot]`). With neither `--zk` nor `GROUPSHIFT_ZK`, commands use the
embedded single-node ZooKeeper started by `groupshift zk start` (see `core.embedded`).

    zk = connect("127.0.0.1:2181/groupshift-test", session_timeout=6.0)
    zk.ensure_path("/consumers")
    zk.stop(); zk.close()
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import make_digest_acl

from core.errors import GroupshiftError, ZooKeeperUnavailable

ENV_ZK = "GROUPSHIFT_ZK"
# Reconnect quickly: kazoo's default backoff grows to an hour between attempts (ENVIRONMENT.md).
CONNECTION_RETRY = dict(max_tries=-1, delay=0.1, backoff=1.5, max_delay=1.0)
# A connect slower than this prints what it waits for (a reachable server answers in milliseconds).
WAIT_NOTICE_S = 1.0


@dataclass(frozen=True)
class ZkAddress:
    """A parsed connect string: `hosts` is `h:p,h:p`, `chroot` is `/path` or empty."""

    hosts: str
    chroot: str = ""

    @property
    def connect_string(self) -> str:
        return self.hosts + self.chroot

    def with_chroot(self, chroot: str) -> ZkAddress:
        return ZkAddress(self.hosts, _normalise_chroot(self.chroot + "/" + chroot.strip("/")))


def parse_zk(connect: str) -> ZkAddress:
    """Parse `host:port[,host:port...][/chroot]`; raises `GroupshiftError` naming the bad part."""
    connect = connect.strip()
    if not connect:
        raise GroupshiftError("empty ZooKeeper connect string; expected host:port[,host:port...][/chroot]")
    hosts, slash, chroot = connect.partition("/")
    for hp in hosts.split(","):
        host, colon, port = hp.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise GroupshiftError(f"bad ZooKeeper address {hp!r} in {connect!r}; expected host:port")
    return ZkAddress(hosts, _normalise_chroot(slash + chroot) if slash else "")


def _normalise_chroot(chroot: str) -> str:
    parts = [p for p in chroot.split("/") if p]
    return "/" + "/".join(parts) if parts else ""


def resolve_zk(explicit: str | None = None) -> str:
    """The connect string to use: `--zk`, else `$GROUPSHIFT_ZK`, else the embedded ZooKeeper.

    The embedded one is used only when it serves: when nothing accepts connections on its port,
    this raises `ZooKeeperUnavailable` at once rather than letting the caller wait out a connect
    timeout for a server that is known to be down.
    """
    if explicit:
        return explicit
    if os.environ.get(ENV_ZK):
        return os.environ[ENV_ZK]
    from core.embedded import EmbeddedZooKeeper

    embedded = EmbeddedZooKeeper()
    if not embedded.serving():
        raise ZooKeeperUnavailable(
            "the embedded ZooKeeper is not running; start it with `groupshift zk start` or pass --zk"
        )
    return embedded.connect_string()


def connect(
    connect_string: str | None = None,
    *,
    session_timeout: float = 10.0,
    connect_timeout: float = 10.0,
    digest: tuple[str, str] | None = None,
    read_only: bool = False,
    create_chroot: bool = True,
) -> KazooClient:
    """Start and return a kazoo client, or raise `ZooKeeperUnavailable` saying how to fix it.

    `digest=(user, password)` authenticates with ZooKeeper digest auth and makes znodes created
    through this client readable by anyone and writable only by that user. The chroot is created
    when missing (as Kafka's tools do), unless `create_chroot=False`.
    """
    address = parse_zk(resolve_zk(connect_string))
    if address.chroot and create_chroot:
        root = _start(address.hosts, session_timeout, connect_timeout, digest, read_only)
        try:
            root.ensure_path(address.chroot)
        finally:
            root.stop()
            root.close()
    return _start(address.connect_string, session_timeout, connect_timeout, digest, read_only)


def _start(hosts, session_timeout, connect_timeout, digest, read_only) -> KazooClient:
    kwargs = {}
    if digest:
        user, password = digest
        kwargs["auth_data"] = [("digest", f"{user}:{password}")]
        kwargs["default_acl"] = [make_digest_acl(user, password, all=True)] + _world_read()
    client = KazooClient(
        hosts=hosts,
        timeout=session_timeout,
        connection_retry=dict(CONNECTION_RETRY),
        command_retry=dict(max_tries=3, delay=0.1, backoff=2, max_delay=1.0),
        read_only=read_only,
        **kwargs,
    )
    try:
        _start_waiting(client, hosts, connect_timeout)
    except (KazooTimeoutError, OSError):
        client.stop()
        client.close()
        raise ZooKeeperUnavailable(
            f"cannot reach ZooKeeper at {hosts} within {connect_timeout:g}s; "
            "check that it runs and the address is right, or pass another --zk HOST:PORT "
            "(or GROUPSHIFT_ZK; `groupshift zk start` runs the embedded one)"
        ) from None
    return client


def _start_waiting(client: KazooClient, hosts: str, connect_timeout: float) -> None:
    """`client.start(connect_timeout)`, saying on stderr what it waits for once that takes a while.

    A server that answers connects well within WAIT_NOTICE_S and nothing is printed; otherwise
    one line tells the user which address is being waited for and for how long, instead of
    a silent pause until the timeout.
    """
    event = client.start_async()
    if event.wait(min(WAIT_NOTICE_S, connect_timeout)) and client.connected:
        return
    remaining = connect_timeout - WAIT_NOTICE_S
    if remaining <= 0:
        raise KazooTimeoutError("Connection time-out")
    print(
        f"groupshift: waiting up to {connect_timeout:g}s for ZooKeeper at {hosts} ...",
        file=sys.stderr,
        flush=True,
    )
    if not event.wait(remaining) or not client.connected:
        raise KazooTimeoutError("Connection time-out")


def _world_read():
    from kazoo.security import ACL, Id, Permissions

    return [ACL(Permissions.READ, Id("world", "anyone"))]


def four_letter(host: str, port: int, command: str, timeout: float = 2.0) -> str:
    """Send a four-letter word (`ruok`, `srvr`, `mntr`, `wchc`, ...) and return the server's answer."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(command.encode())
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def mntr(host: str, port: int) -> dict[str, str]:
    """ZooKeeper's `mntr` as a dict (`zk_packets_received`, `zk_watch_count`, ...)."""
    out = {}
    for line in four_letter(host, port, "mntr").splitlines():
        key, _, value = line.partition("\t")
        if key:
            out[key] = value
    return out
