"""`groupshift coordinator serve`: run one coordinator node (PROTOCOL.md "Starting a node")."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time

import click

from cli.main import main, zk_option
from core.errors import GroupshiftError


@main.group("coordinator")
def coordinator_group() -> None:
    """Scheme three: the group coordinator service."""


def _listen(value: str) -> tuple[str, int]:
    host, colon, port = value.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise click.BadParameter(f"{value!r}; expected HOST:PORT (PORT 0 picks a free port)")
    return host.strip("[]"), int(port)


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


@coordinator_group.command("serve")
@zk_option
@click.option(
    "--listen", "listen", default="127.0.0.1:9092", show_default=True, help="HOST:PORT to accept clients on."
)
@click.option("--node-id", type=int, required=True, help="This node's id (also its /brokers/ids/<id>).")
@click.option(
    "--advertised-host", default=None, help="Host clients are told to connect to (default: the listen host)."
)
@click.option("--group-min-session-timeout-ms", type=int, default=6000, show_default=True)
@click.option("--group-max-session-timeout-ms", type=int, default=1_800_000, show_default=True)
@click.option("--group-initial-rebalance-delay-ms", type=int, default=3000, show_default=True)
@click.option("--group-max-size", type=int, default=2**31 - 1, show_default=True)
@click.option("--offsets-retention-ms", type=int, default=10080 * 60 * 1000, show_default=True)
@click.option("--offsets-retention-check-interval-ms", type=int, default=600_000, show_default=True)
@click.option("--offset-metadata-max-bytes", type=int, default=4096, show_default=True)
@click.option("--shards", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--max-frame-bytes", type=click.IntRange(64), default=1 << 20, show_default=True)
@click.option(
    "--zk-session-timeout-ms",
    type=click.IntRange(1000),
    default=10_000,
    show_default=True,
    help="Session of this node's shard leadership: how fast other nodes take over after it dies.",
)
@click.option("--connections-max-idle-ms", type=int, default=600_000, show_default=True)
@click.option(
    "--frame-timeout-ms", type=int, default=30_000, show_default=True, help="Time allowed to finish a frame."
)
@click.option("--max-connections", type=int, default=10_000, show_default=True)
@click.option(
    "--shard-handoff/--no-shard-handoff",
    default=True,
    show_default=True,
    help="Hand shards to their preferred node as nodes join.",
)
@click.option("--handoff-delay-ms", type=int, default=3000, show_default=True)
@click.option("--claim-grace-ms", type=int, default=1000, show_default=True)
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    help="Serve Prometheus /metrics on this port (0: any free port).",
)
@click.option("--metrics-host", default="127.0.0.1", show_default=True)
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True
)
def serve(zk, listen, node_id, advertised_host, log_level, **settings) -> None:
    """Run a coordinator node until SIGTERM/SIGINT (then its shards are released, exit code 0).

    Prints `listening on HOST:PORT` once it accepts connections; logs are JSON lines on stderr.
    """
    from coordinator.server import CoordinatorNode, NodeConfig

    host, port = _listen(listen)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter())
    logging.basicConfig(level=log_level.upper(), handlers=[handler], force=True)
    logging.getLogger("kazoo").setLevel(max(logging.WARNING, logging.getLevelName(log_level.upper())))
    config = NodeConfig(
        zk=zk, node_id=node_id, host=host, port=port, advertised_host=advertised_host, **settings
    )
    try:
        asyncio.run(_run(CoordinatorNode(config), settings.get("metrics_port")))
    except GroupshiftError:
        raise
    except KeyboardInterrupt:
        pass


async def _run(node, metrics_port) -> None:
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    host, port = await node.start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, node.request_stop)
    click.echo(f"listening on {host}:{port}")
    sys.stdout.flush()
    log = logging.getLogger(__name__)
    if metrics_port is not None:
        log.info("metrics on http://%s:%d/metrics", node.config.metrics_host, node.metrics_port)
    log.info("started in %.2fs", time.monotonic() - started, extra={"metrics_port": node.metrics_port})
    await node.wait_stopped()
