"""`groupshift zk start|stop|status`: the embedded single-node ZooKeeper."""

from __future__ import annotations

import json

import click

from cli.main import main
from core.embedded import DEFAULT_PORT, EmbeddedZooKeeper


@main.group("zk")
def zk_group() -> None:
    """The embedded ZooKeeper every command uses when neither --zk nor GROUPSHIFT_ZK is given."""


@zk_group.command("start")
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True, help="Client port on 127.0.0.1.")
def zk_start(port: int) -> None:
    """Start the embedded ZooKeeper (a local java process) and wait until it serves."""
    zk = EmbeddedZooKeeper(port=port)
    already = zk.pid() is not None
    connect = zk.start()
    click.echo(f"{'already running' if already else 'started'}: {connect} (data in {zk.dir})")


@zk_group.command("stop")
def zk_stop() -> None:
    """Stop the embedded ZooKeeper."""
    click.echo("stopped" if EmbeddedZooKeeper().stop() else "not running")


@zk_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def zk_status(as_json: bool) -> None:
    """Show whether the embedded ZooKeeper runs, where, and its mode; exit 3 when it does not run."""
    status = EmbeddedZooKeeper().status()
    if as_json:
        click.echo(json.dumps(status))
    elif status["running"]:
        click.echo(f"running: {status['connect']} pid {status['pid']} mode {status['mode']}")
    else:
        click.echo(f"not running (would serve {status['connect']})")
    if not status["running"]:
        raise SystemExit(3)
