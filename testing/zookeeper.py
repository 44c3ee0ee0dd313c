"""One real ZooKeeper server in Docker for tests, benches and experiments, and its faults.

Containers come from the locally built image (`scripts/zk-image.sh`); nothing is pulled and
testcontainers' Ryuk reaper is disabled, so this package cleans up itself: every container and
network is named `gstest-...` and labelled with the owning process id, removed when its owner
stops it, and swept by `testing.leftovers.sweep_leftovers()` once the owner process is gone.

    with ZkServer.start_single() as zk:                 # a standalone server (tls=, sasl= to secure it)
        client = core.zk.connect(zk.connect_string)
        zk.pause(); zk.unpause(); zk.cut_clients(); zk.restore_clients()
        expire_session(zk.connect_string, client)      # the client gets a new session

A 3-node ensemble of these servers: `testing.ensemble.ZkEnsemble`.
"""

from __future__ import annotations

import os

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

import logging
import shlex
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from core.errors import GroupshiftError
from core.extras import require
from core.four_letter import four_letter, mntr
from core.zk_auth import digest_id

log = logging.getLogger(__name__)

IMAGE = os.environ.get("GROUPSHIFT_ZK_IMAGE", "groupshift-zk:bookworm-1")
PREFIX = "gstest-"
OWNER_LABEL = "groupshift.owner-pid"
CLIENT_PORT = 2181
# ZooKeeper's super user for tests (digest): the test harness's cleanup deletes every test's
# namespace with it, whatever ACL the test's znodes carry. A test server's credential, not a secret.
SUPER_USER, SUPER_PASSWORD = "groupshift-test-super", "test-only-super-password"
SUPER_AUTH = [("digest", f"{SUPER_USER}:{SUPER_PASSWORD}")]
# The secure client port (`ssl.clientAuth` and the PEM files: `ServerTls`); Netty serves it, and
# zookeeper.jar's manifest lists only part of the Netty jars it then needs.
SECURE_CLIENT_PORT = 2281
NETTY_JARS = ":".join(
    f"/usr/share/java/netty-{name}.jar"
    for name in ("codec", "resolver", "transport-native-unix-common", "transport-native-epoll")
)


HEAP_MB = 512


def java_command(tls: bool = False, sasl: bool = False) -> str:
    jars = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
    if tls:
        jars += ":" + NETTY_JARS
    superuser = digest_id(SUPER_USER, SUPER_PASSWORD)
    jaas = f"-Djava.security.auth.login.config={ServerSasl.JAAS_PATH} " if sasl else ""
    # The heap: ZooKeeper keeps its last 500 transactions in memory with their requests (the
    # committed log, whatever their size, standalone too), and 300 `multi`s of 1,000 creates
    # (bench.migrate's copies and its ceiling loop) take about 200 MB of it beside the tree.
    return (
        f"exec java -Xmx{HEAP_MB}m -Dzookeeper.DigestAuthenticationProvider.superDigest={superuser} {jaas}"
        f"-cp {jars} org.apache.zookeeper.server.quorum.QuorumPeerMain /data/zoo.cfg"
    )


# `timeout 2`: ZooKeeper 3.8.0 can hold a status connection open during start-up (pitfall 1).
RUOK = [
    "timeout",
    "2",
    "bash",
    "-c",
    "exec 3<>/dev/tcp/127.0.0.1/2181 && printf ruok >&3 && grep -q imok <&3",
]
REPO = Path(__file__).resolve().parent.parent
# What docker says when a host port it was asked to publish is taken; how often to pick another.
PORT_TAKEN = ("port is already allocated", "address already in use")
PORT_ATTEMPTS = 5


class ClusterError(GroupshiftError):
    """Docker, the image or a ZooKeeper container could not be brought up; the message names the step."""


def ensure_image() -> None:
    """Make sure the engine runs and the local image exists, running `scripts/zk-image.sh` if not."""
    ok = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode == 0
    if ok:
        return
    script = REPO / "scripts" / "zk-image.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        raise ClusterError(lines[-1] if lines else f"{script} failed with exit code {proc.returncode}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class ServerTls:
    """TLS on the secure client port: the server's key and certificate chain (PEM, in one
    string), the CA its clients' certificates must chain to, and whether it asks for one
    (`ssl.clientAuth`: `need`, `want` or `none`)."""

    key_and_chain: str
    ca: str
    client_auth: str = "none"

    def cfg(self) -> list[str]:
        return [
            f"secureClientPort={SECURE_CLIENT_PORT}",
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            "ssl.keyStore.location=/data/tls/server.pem",
            "ssl.keyStore.type=PEM",
            "ssl.trustStore.location=/data/tls/ca.pem",
            "ssl.trustStore.type=PEM",
            f"ssl.clientAuth={self.client_auth}",
        ]

    # The PEM files reach the container through its environment (the image has no volume).
    def env(self) -> dict[str, str]:
        return {"ZK_TLS_SERVER_PEM": self.key_and_chain, "ZK_TLS_CA_PEM": self.ca}

    SCRIPT = (
        "mkdir -p /data/tls; printf '%s' \"$ZK_TLS_SERVER_PEM\" > /data/tls/server.pem; "
        "printf '%s' \"$ZK_TLS_CA_PEM\" > /data/tls/ca.pem; "
    )


def expire_session(hosts: str, client) -> None:
    """Expire the kazoo `client`'s session for real: a second client joins that session (its id
    and password) and closes it, as kazoo's own test harness does."""
    from kazoo.client import KazooClient

    twin = KazooClient(hosts=hosts, client_id=client.client_id)
    twin.start(timeout=10)
    twin.stop()
    twin.close()


@dataclass(frozen=True)
class ServerSasl:
    """SASL DIGEST-MD5 for clients: the users (NAME, PASSWORD) of the JAAS `Server` section, and
    ZooKeeper's SASL provider, without which a `sasl:NAME` ACL is InvalidACL. With
    `provider=False` the server logs users in but refuses their ACLs (a misconfigured server)."""

    users: tuple[tuple[str, str], ...]
    provider: bool = True

    JAAS_PATH = "/data/jaas.conf"
    PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"

    def __post_init__(self) -> None:
        for name, password in self.users:  # JAAS quotes the password: no quote or backslash in it
            assert name.replace("_", "").replace("-", "").replace(".", "").isalnum(), name
            assert '"' not in password and "\\" not in password, name

    def cfg(self) -> list[str]:
        return [f"authProvider.sasl={self.PROVIDER}"] if self.provider else []

    def jaas(self) -> str:
        users = "".join(f'\n  user_{name}="{password}"' for name, password in self.users)
        return f"Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required{users};\n}};\n"

    # The JAAS file reaches the container through its environment, as ServerTls's PEM files do.
    def env(self) -> dict[str, str]:
        return {"ZK_SASL_JAAS": self.jaas()}

    SCRIPT = f"printf '%s' \"$ZK_SASL_JAAS\" > {JAAS_PATH}; "


def zoo_cfg(tick_ms: int, servers: tuple[int, ...] = ()) -> list[str]:
    cfg = [
        f"tickTime={tick_ms}",
        "initLimit=10",
        "syncLimit=5",
        "dataDir=/data/zk",
        f"clientPort={CLIENT_PORT}",
        "maxClientCnxns=0",
        "4lw.commands.whitelist=*",
        "admin.enableServer=false",
        # Tests want short sessions (1 s) and experiments long ones; don't clamp to [2, 20] x tick.
        "minSessionTimeout=1000",
        "maxSessionTimeout=120000",
    ]
    return cfg + [f"server.{i}=zk{i}:2888:3888;{CLIENT_PORT}" for i in servers]


class ZkServer:
    """One ZooKeeper container; its host address is read once (it cannot be read while paused)."""

    def __init__(
        self,
        name: str,
        tick_ms: int = 500,
        myid: int | None = None,
        servers: tuple[int, ...] = (),
        network=None,
        labels: dict[str, str] | None = None,
        tls: ServerTls | None = None,
        sasl: ServerSasl | None = None,
    ):
        DockerContainer = require("testcontainers.core.container", "experiments").DockerContainer

        self.name, self.myid, self.network, self.tls = name, myid, network, tls
        wait_dns = "".join(f"until getent hosts zk{i} >/dev/null; do sleep 0.1; done; " for i in servers)
        script = (
            "mkdir -p /data/zk; printf '%s\\n' "
            + " ".join(
                map(
                    shlex.quote,
                    zoo_cfg(tick_ms, servers) + (tls.cfg() if tls else []) + (sasl.cfg() if sasl else []),
                )
            )
            + " > /data/zoo.cfg; "
            + (tls.SCRIPT if tls else "")
            + (sasl.SCRIPT if sasl else "")
            + (f"echo {myid} > /data/zk/myid; " if myid else "")
            + wait_dns
            + java_command(tls is not None, sasl is not None)
        )
        self.port = free_port()  # pinned: the address survives stop/start (pitfall 4)
        self.secure_port = free_port() if tls else None
        self.container = (
            DockerContainer(IMAGE)
            .with_name(name)
            .with_command(["bash", "-c", script])
            .with_bind_ports(CLIENT_PORT, self.port)
            .with_kwargs(labels={OWNER_LABEL: str(os.getpid()), "groupshift.test": "1", **(labels or {})})
        )
        if tls:
            self.container.with_bind_ports(SECURE_CLIENT_PORT, self.secure_port)
            for key, value in tls.env().items():
                self.container.with_env(key, value)
        for key, value in (sasl.env() if sasl else {}).items():
            self.container.with_env(key, value)
        if network is not None:
            self.container.with_network(network).with_network_aliases(f"zk{myid}")
        self.host = ""

    # -- lifecycle -------------------------------------------------------------------------
    @classmethod
    def start_single(
        cls,
        tick_ms: int = 500,
        labels: dict[str, str] | None = None,
        tls: ServerTls | None = None,
        sasl: ServerSasl | None = None,
    ) -> ZkServer:
        """Start a standalone server (with `tls`, also a secure client port: `secure_connect_string`;
        with `sasl`, SASL logins for its users); on any failure or interruption its container is removed."""
        ensure_image()
        name = f"{PREFIX}zk-{uuid.uuid4().hex[:8]}"
        server = cls(name, tick_ms=tick_ms, labels=labels, tls=tls, sasl=sasl)
        try:
            server._run()
            server.wait_until(lambda: server.ruok(), 60, "standalone ZooKeeper answering ruok")
            if server.secure_port:
                server.wait_until(server.tls_answers, 60, "the secure client port answering TLS")
        except BaseException:
            server.remove()
            raise
        return server

    def _run(self) -> None:
        # The pinned port was free when chosen, but another process (a parallel test, another
        # container) may bind it before docker does: then start again on a new one.
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self.container.start()
                break
            except Exception as exc:  # docker errors come in many classes; name the step
                if attempt < PORT_ATTEMPTS and any(m in str(exc) for m in PORT_TAKEN):
                    log.info("port %d was taken before %s bound it; trying another", self.port, self.name)
                    self._discard_created()
                    self.port = free_port()
                    self.container.with_bind_ports(CLIENT_PORT, self.port)
                    if self.secure_port:
                        self.secure_port = free_port()
                        self.container.with_bind_ports(SECURE_CLIENT_PORT, self.secure_port)
                    continue
                raise ClusterError(f"start ZooKeeper container {self.name} from {IMAGE}: {exc}") from exc
        self.host = self.container.get_container_host_ip()

    def _discard_created(self) -> None:
        """Remove the container a failed start created, so the next start can create it again."""
        created, self.container._container = self.container._container, None
        if created is not None:
            try:
                created.remove(force=True)
            except Exception:
                pass

    def wait_until(self, check, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.1)
        raise ClusterError(
            f"timed out after {timeout:g}s waiting for {what} ({self.name}); logs: {self.logs()[-2000:]}"
        )

    def logs(self) -> str:
        try:
            out, err = self.container.get_logs()
            return (out + err).decode(errors="replace")
        except Exception:
            return "<no logs>"

    def remove(self) -> None:
        try:
            self.wrapped.remove(force=True)
        except Exception:
            pass

    def __enter__(self) -> ZkServer:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    # -- addresses and probes --------------------------------------------------------------
    @property
    def wrapped(self):
        return self.container.get_wrapped_container()

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def secure_connect_string(self) -> str:
        """The secure client port's address (a server started with `tls`)."""
        assert self.secure_port, f"{self.name} was started without TLS"
        return f"{self.host}:{self.secure_port}"

    def ruok(self) -> bool:
        try:
            res = self.wrapped.exec_run(RUOK)
            return res.exit_code == 0
        except Exception:
            return False

    def tls_answers(self) -> bool:
        """Whether the secure client port runs a TLS handshake (whatever its outcome): docker's
        proxy accepts on the published port before ZooKeeper listens, then closes the connection."""
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        try:
            with socket.create_connection((self.host, self.secure_port), timeout=2) as raw:
                with ctx.wrap_socket(raw):
                    return True
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionError, TimeoutError):
            return False
        except ssl.SSLError:  # an alert: ZooKeeper's TLS answered (e.g. a client certificate it needs)
            return True
        except OSError:
            return False

    def four(self, command: str) -> str:
        return four_letter(self.host, self.port, command)

    def mode(self) -> str:
        """`leader`, `follower`, `standalone`, `not-serving` or `down`."""
        try:
            srvr = self.four("srvr")
        except OSError:
            return "down"
        return next((ln[6:].strip() for ln in srvr.splitlines() if ln.startswith("Mode:")), "not-serving")

    def mntr(self) -> dict[str, str]:
        return mntr(self.host, self.port)

    def pid(self) -> int:
        w = self.wrapped
        w.reload()
        return int(w.attrs["State"]["Pid"])

    def ip(self) -> str:
        w = self.wrapped
        w.reload()
        return w.attrs["NetworkSettings"]["Networks"][self.network.name]["IPAddress"]

    def netns(self, *cmd: str) -> None:
        """Run a host command (iptables, ip, ss) inside the container's network namespace (root)."""
        subprocess.run(["nsenter", "-t", str(self.pid()), "-n", *cmd], check=True, capture_output=True)

    # -- faults ----------------------------------------------------------------------------
    def pause(self) -> None:
        self.wrapped.pause()

    def unpause(self) -> None:
        self.wrapped.unpause()

    def stop(self) -> None:
        self.wrapped.stop(timeout=1)

    def kill(self) -> None:
        self.wrapped.kill()

    def start(self) -> None:
        self.wrapped.start()

    def cut_clients(self) -> None:
        """Drop client traffic to this server from outside (loopback probes keep working)."""
        self.netns(
            "iptables", "-A", "INPUT", "!", "-i", "lo", "-p", "tcp", "--dport", str(CLIENT_PORT), "-j", "DROP"
        )

    def restore_clients(self) -> None:
        self.netns(
            "iptables", "-D", "INPUT", "!", "-i", "lo", "-p", "tcp", "--dport", str(CLIENT_PORT), "-j", "DROP"
        )
