"""`groupshift zk start|stop|status`: the embedded single-node ZooKeeper."""

from __future__ import annotations

import json

import click

from cli.main import main
from core.embedded import DEFAULT_PORT, EmbeddedZooKeeper


@main.group("zk")
def zk_group() -> None:
    """The embedded ZooKeeper every command uses when neither --zk nor GROUPSHIFT_ZK is given.

    Its data, config and log live under $GROUPSHIFT_HOME/zk (default ./.groupshift/zk).
    """


@zk_group.command("start")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help=f"Client port on 127.0.0.1 [default: {DEFAULT_PORT}, or the port the running one uses].",
)
def zk_start(port: int | None) -> None:
    """Start the embedded ZooKeeper (a local java process) and wait until it serves.

    When it already runs, prints its address; asking for another port than the one it runs on
    is an error that names the address it runs on.
    """
    zk = EmbeddedZooKeeper(port=port)
    already = zk.running_port() is not None
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


@zk_group.command("digest")
@click.argument("user")
@click.option(
    "--password-file",
    required=True,
    type=click.Path(dir_okay=False),
    help="A file holding the password on one line, not readable by others.",
)
def zk_digest(user: str, password_file: str) -> None:
    """Print USER's ZooKeeper digest id, `digest:USER:HASH`, for --zk-read-principal.

    HASH is what ZooKeeper's digest scheme stores (base64 of SHA-1 of USER:PASSWORD): an ACL can
    name the user without holding the password. The password is read from a file, never the
    command line. For digest users only: a SASL user needs no hash, name it `sasl:USER`.
    """
    from core import zk_auth
    from core.errors import GroupshiftError

    if user.startswith("sasl:"):
        raise GroupshiftError(
            f"`zk digest` prints digest ids only; a SASL user needs no hash: name it {user[:60]} "
            "in --zk-read-principal as it is"
        )
    zk_auth.check_user(user, "USER")
    click.echo(f"digest:{zk_auth.digest_id(user, zk_auth.load_password_file(password_file))}")
