"""`groupshift coordinator serve`: run one coordinator node (docs/coordinator.md)."""

from __future__ import annotations

import errno
import json
import logging
import signal
import socket
import sys
import time

import click

from cli.main import main, zk_option
from core.errors import GroupshiftError
from security.listeners import Kind, Listener, parse_listener
from security.tls import CLIENT_AUTH


@main.group("coordinator")
def coordinator_group() -> None:
    """Scheme three: the group coordinator service."""


def _listen(value: str, kind: Kind, option: str) -> Listener:
    """`[PROTOCOL://]HOST:PORT` (security/listeners.py: Kafka's names, the native listener's TLS)."""
    try:
        return parse_listener(value, kind)
    except GroupshiftError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{option}'") from None


def _mechanisms(ctx, param, value: str) -> tuple[str, ...]:
    from security.sasl import MECHANISMS

    names = tuple(m.strip().upper() for m in value.split(","))
    unknown = [m for m in names if m not in MECHANISMS]
    if unknown or not value.strip():
        raise click.BadParameter(
            f"unknown SASL mechanism {(unknown or [''])[0]!r}; expected some of {','.join(MECHANISMS)}"
        )
    return tuple(dict.fromkeys(names))


def _host(value: str, param) -> str:
    if (
        not value
        or len(value) > 253
        or any(ch.isspace() or not ch.isprintable() or ch in "/," for ch in value)
    ):
        name = param if isinstance(param, str) else f"--{param.name.replace('_', '-')}"
        raise click.BadParameter(f"{value!r} is not a host name or address", param_hint=f"'{name}'")
    return value


def _check_free(host: str, port: int, option: str) -> None:
    """Refuse a port something already listens on, before this node touches ZooKeeper."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise click.BadParameter(
            f"cannot resolve {host!r}: {exc.strerror}", param_hint=f"'{option}'"
        ) from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's server does
        try:
            s.bind(addr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise GroupshiftError(
                    f"port {host}:{port} is already in use; pick another with {option}"
                ) from None
            raise GroupshiftError(
                f"cannot listen on {host}:{port} ({exc.strerror}); pick another with {option}"
            ) from None


class _JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, plus the record's `extra` fields."""

    _skip = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in self._skip:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


_INT32 = 2**31 - 1
OPEN_NOTICE = "no --authorizer: every client may join, commit, describe and delete every group"


def _super_users(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    from security.acls import AclError, parse_super_users

    try:
        return parse_super_users(value)
    except AclError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _ms(lo: int = 0, hi: int = _INT32) -> click.IntRange:
    return click.IntRange(lo, hi)


@coordinator_group.command("serve")
@zk_option
@click.option(
    "--listen",
    "listen",
    default="127.0.0.1:9092",
    show_default=True,
    help="[PROTOCOL://]HOST:PORT to accept clients on: PLAINTEXT (a bare HOST:PORT), TLS, "
    "SASL_PLAINTEXT or SASL_TLS (docs/security.md).",
)
@click.option(
    "--node-id",
    type=click.IntRange(0, _INT32),
    required=True,
    help="This node's id (also its /brokers/ids/<id>).",
)
@click.option(
    "--advertised-host",
    default=None,
    callback=lambda ctx, param, v: _host(v, param) if v is not None else None,
    help="Host clients are told to connect to (default: the listen host).",
)
@click.option("--group-min-session-timeout-ms", type=_ms(1), default=6000, show_default=True)
@click.option("--group-max-session-timeout-ms", type=_ms(1), default=1_800_000, show_default=True)
@click.option("--group-initial-rebalance-delay-ms", type=_ms(), default=3000, show_default=True)
@click.option("--group-max-size", type=click.IntRange(1, _INT32), default=_INT32, show_default=True)
@click.option(
    "--offsets-retention-ms", type=click.IntRange(1, 2**62), default=10080 * 60 * 1000, show_default=True
)
@click.option("--offsets-retention-check-interval-ms", type=_ms(1), default=600_000, show_default=True)
@click.option("--offset-metadata-max-bytes", type=click.IntRange(0, 100_000), default=4096, show_default=True)
# The incremental form (KIP-848): Kafka clients' session timeout, every member's heartbeat interval.
@click.option("--group-consumer-session-timeout-ms", type=_ms(1), default=45_000, show_default=True)
@click.option("--group-consumer-heartbeat-interval-ms", type=_ms(1), default=5_000, show_default=True)
@click.option(
    "--group-consumer-migration-policy",
    type=click.Choice(["bidirectional", "upgrade", "downgrade", "disabled"]),
    default="bidirectional",
    show_default=True,
    help="Which online conversions between classic and consumer-protocol groups the node makes "
    "(Kafka's group.consumer.migration.policy; docs/scheme-two.md).",
)
@click.option("--shards", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--max-frame-bytes", type=click.IntRange(64, 100 << 20), default=1 << 20, show_default=True)
@click.option(
    "--zk-session-timeout-ms",
    type=click.IntRange(1000, 600_000),
    default=10_000,
    show_default=True,
    help="Session of this node's shard leadership: how fast other nodes take over after it dies.",
)
@click.option("--connections-max-idle-ms", type=_ms(1), default=600_000, show_default=True)
@click.option(
    "--frame-timeout-ms",
    type=_ms(1),
    default=30_000,
    show_default=True,
    help="Time allowed to finish a frame.",
)
@click.option("--max-connections", type=click.IntRange(1, 1_000_000), default=10_000, show_default=True)
@click.option(
    "--shard-handoff/--no-shard-handoff",
    default=True,
    show_default=True,
    help="Hand shards to their preferred node as nodes join.",
)
@click.option("--handoff-delay-ms", type=_ms(), default=3000, show_default=True)
@click.option("--claim-grace-ms", type=_ms(), default=1000, show_default=True)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus /metrics on this port (0: any free port).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    callback=lambda ctx, param, v: _host(v, param),
)
@click.option(
    "--kafka-listen",
    "kafka_listen",
    default=None,
    help="[PROTOCOL://]HOST:PORT of a Kafka-protocol listener for Kafka clients: PLAINTEXT (a bare "
    "HOST:PORT), SSL, SASL_PLAINTEXT or SASL_SSL (docs/kafka-listener.md); off by default.",
)
@click.option(
    "--sasl-enabled-mechanisms",
    "sasl_mechanisms",
    default="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    show_default=True,
    callback=_mechanisms,
    help="The SASL mechanisms a SASL_* listener offers (Kafka's sasl.enabled.mechanisms; docs/security.md).",
)
@click.option(
    "--tls-cert", default=None, help="PEM: the node's certificate (chain), for TLS and SSL listeners."
)
@click.option(
    "--tls-key", default=None, help="PEM: the certificate's private key (unencrypted, not world-readable)."
)
@click.option("--tls-ca", default=None, help="PEM: the CA that signs the clients' certificates.")
@click.option(
    "--tls-client-auth",
    type=click.Choice(CLIENT_AUTH),
    default="none",
    show_default=True,
    help="Whether TLS clients must present a certificate signed by --tls-ca (Kafka's ssl.client.auth); "
    "its subject is the client's principal, User:CN=...",
)
@click.option(
    "--data",
    "data",
    type=click.Path(file_okay=False),
    default=None,
    help="Log root the Kafka listener serves topics from "
    "(default: $GROUPSHIFT_DATA, else $GROUPSHIFT_HOME/data).",
)
@click.option(
    "--authorizer",
    type=click.Choice(["acl"]),
    default=None,
    help="acl: enforce Kafka's ACLs, kept in ZooKeeper (`groupshift acls`; docs/security.md). "
    "Without it every client may do everything.",
)
@click.option(
    "--super-users",
    "super_users",
    default=None,
    callback=_super_users,
    metavar="User:NAME[;User:NAME...]",
    help="Principals the authorizer lets do anything (Kafka's super.users; ';' or ',' between them).",
)
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True
)
def serve(zk, listen, node_id, advertised_host, log_level, kafka_listen, **settings) -> None:
    """Run a coordinator node until SIGTERM/SIGINT (then its shards are released, exit code 0).

    Settings are checked (and the ports probed) before the node connects to ZooKeeper: bad input
    exits with one line and changes nothing.

    Prints `listening on HOST:PORT` once it accepts connections (then `kafka listening on
    HOST:PORT` with --kafka-listen), whatever the listeners' security protocols; logs are JSON
    lines on stderr.
    """
    import asyncio

    from coordinator.node.config import NodeConfig
    from coordinator.node.server import CoordinatorNode
    from core.lifeline import watch_parent

    watch_parent()  # started by a test or experiment: stop with it
    native = _listen(listen, "native", "--listen")
    host, port = native.host, native.port
    settings["listen_protocol"] = native.protocol
    if settings["group_min_session_timeout_ms"] > settings["group_max_session_timeout_ms"]:
        raise click.UsageError(
            f"--group-min-session-timeout-ms {settings['group_min_session_timeout_ms']} is above "
            f"--group-max-session-timeout-ms {settings['group_max_session_timeout_ms']}"
        )
    if settings["super_users"] and settings["authorizer"] is None:
        raise click.UsageError("--super-users takes effect with --authorizer acl only; add it")
    metrics_port = settings.get("metrics_port")
    _check_free(host, port, "--listen")
    if kafka_listen is not None:
        kafka = _listen(kafka_listen, "kafka", "--kafka-listen")
        settings["kafka_host"], settings["kafka_port"] = kafka.host, kafka.port
        settings["kafka_protocol"] = kafka.protocol
        if settings["kafka_port"] and (settings["kafka_host"], settings["kafka_port"]) == (host, port):
            raise click.UsageError(f"--kafka-listen {kafka_listen} is the --listen address; pick another")
        _check_free(settings["kafka_host"], settings["kafka_port"], "--kafka-listen")
        if settings["data"] is None:  # the log root from the environment, checked as --data is
            from topics.log import default_root

            settings["data"] = str(default_root())
    if metrics_port:
        if (settings["metrics_host"], metrics_port) == (host, port):
            raise click.UsageError(f"--metrics-port {metrics_port} is the --listen port; pick another")
        _check_free(settings["metrics_host"], metrics_port, "--metrics-port")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter())
    logging.basicConfig(level=log_level.upper(), handlers=[handler], force=True)
    logging.getLogger("kazoo").setLevel(max(logging.WARNING, logging.getLevelName(log_level.upper())))
    config = NodeConfig(
        zk=zk, node_id=node_id, host=host, port=port, advertised_host=advertised_host, **settings
    )
    node = CoordinatorNode(config)  # checks the TLS settings, before ZooKeeper is touched
    try:
        asyncio.run(_run(node, settings.get("metrics_port")))
    except GroupshiftError:
        raise
    except KeyboardInterrupt:
        pass


async def _run(node, metrics_port) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    started = time.monotonic()
    host, port = await node.start()
    if node.config.authorizer is None:  # once it runs (bad input stays one line)
        click.echo(OPEN_NOTICE, err=True)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, node.request_stop)
    click.echo(f"listening on {host}:{port}")
    if node.kafka_endpoint is not None:
        click.echo(f"kafka listening on {node.kafka_endpoint[0]}:{node.kafka_endpoint[1]}")
    sys.stdout.flush()
    log = logging.getLogger(__name__)
    if metrics_port is not None:
        log.info("metrics on http://%s:%d/metrics", node.config.metrics_host, node.metrics_port)
    log.info("started in %.2fs", time.monotonic() - started, extra={"metrics_port": node.metrics_port})
    await node.wait_stopped()
    if node.failure is not None:  # ZooKeeper refused one of its tasks: one line, exit code 1
        raise node.failure
