"""The `groupshift` click group: wiring and the one place user errors become one-line messages."""

from __future__ import annotations

import logging
import sys

import click

from core.errors import GroupshiftError


class GroupshiftGroup(click.Group):
    """A click group that reports `GroupshiftError` as one line and exit code 1, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except GroupshiftError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)


@click.group(cls=GroupshiftGroup)
@click.version_option(package_name="groupshift")
@click.option("-v", "--verbose", count=True, help="Log to stderr: -v warnings (kazoo's too), -vv debug.")
def main(verbose: int) -> None:
    """groupshift: Kafka consumer-group rebalancing on real ZooKeeper (scheme one and scheme three)."""
    # A user error is one line; kazoo's reconnect chatter would bury it, so it is shown only on -v.
    level = {0: logging.ERROR, 1: logging.WARNING}.get(verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(level if verbose else logging.CRITICAL)


def zk_option(f):
    """`--zk HOST:PORT[,...][/chroot]`; default `$GROUPSHIFT_ZK`, else the embedded ZooKeeper."""
    return click.option(
        "--zk",
        "zk",
        default=None,
        metavar="HOST:PORT[/CHROOT]",
        help="ZooKeeper connect string (default: $GROUPSHIFT_ZK, else the embedded `groupshift zk start`).",
    )(f)


def _register() -> None:
    # Sub-command groups live in their own modules; importing them attaches them to `main`.
    import importlib
    import pkgutil

    import cli

    for mod in pkgutil.iter_modules(cli.__path__):
        if mod.name.startswith("cmd_"):
            importlib.import_module(f"cli.{mod.name}")


_register()
