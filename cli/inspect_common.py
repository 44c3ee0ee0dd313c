"""Options and plumbing shared by `groupshift groups` and `groupshift offsets` (thin: no logic here)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click
from kazoo.exceptions import KazooException

from core.errors import GroupshiftError, ZooKeeperUnavailable
from core.scheme import STORES
from migrate.groups.render import OUTPUTS

CONNECT_TIMEOUT_S = 5.0


@contextlib.contextmanager
def zk_session(zk: str | None, long_lived: bool = False):
    """A client on `--zk` that never creates anything (a missing chroot is an error). A command
    gives up when ZooKeeper stops answering in its middle; a `long_lived` one waits for it."""
    from migrate.schemes import zkio  # kazoo's client: only for commands that connect, not for --help

    give_up = None if long_lived else zkio.give_up_after()
    client = zkio.open_zk(zk, connect_timeout=CONNECT_TIMEOUT_S, give_up_after_s=give_up)
    try:
        yield client
    except (KazooException, GroupshiftError) as exc:
        waited = zkio.gave_up(client)
        if waited is None:
            raise
        raise ZooKeeperUnavailable(
            f"ZooKeeper ({zk or 'default --zk'}) stopped answering in the middle of the command "
            f"(waited {waited:g} s); what completed is kept — run the command again once it is back"
        ) from exc
    finally:
        zkio.close(client)


def output_option(f):
    return click.option(
        "--output",
        "-o",
        type=click.Choice(OUTPUTS),
        default="table",
        show_default=True,
        help="Output format.",
    )(f)


def data_option(f):
    return click.option(
        "--data",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Log root, for log start/end offsets (default: $GROUPSHIFT_DATA, else $GROUPSHIFT_HOME/data).",
    )(f)


def scheme_option(default: str | None, allow_all: bool = False):
    choices = [s.value for s in STORES] + (["all"] if allow_all else [])
    return click.option(
        "--scheme",
        type=click.Choice(choices),
        default=default,
        help="zk (scheme one, /consumers) or coordinator (scheme three, /groupshift/groups)"
        + ("; all: both" if allow_all else "; default: the one the group exists in"),
    )


def warn(lines: list[str], limit: int = 10) -> None:
    for line in lines[:limit]:
        click.echo(f"warning: {line}", err=True)
    if len(lines) > limit:
        click.echo(f"warning: ... and {len(lines) - limit} more like these", err=True)
