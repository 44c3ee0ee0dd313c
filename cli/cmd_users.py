"""`groupshift users add|list|remove`: SASL users' credentials in ZooKeeper, as Kafka kept them.

docs/security.md ("Credentials") tells where they are stored and in which form.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import click

from cli.main import main, zk_option
from core.errors import GroupshiftError
from security.sasl import MECHANISMS
from security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS


@main.group("users")
def users_group() -> None:
    """SASL users: their credentials under /config/users, where Kafka's brokers read them.

    A coordinator node's SASL listeners authenticate clients against them (docs/security.md).
    """


def _user(ctx, param, value: str) -> str:
    from security.credentials import check_user

    try:
        return check_user(value)
    except GroupshiftError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _mechanism_option(required: bool, help: str):
    return click.option(
        "--mechanism",
        "mechanism",
        type=click.Choice(MECHANISMS),
        required=required,
        help=help,
    )


@contextlib.contextmanager
def _zk(zk: str | None, create: bool):
    """A client on `--zk` that gives up when ZooKeeper stops answering (as `groups` and `offsets`
    do); `add` creates a missing chroot first, as Kafka's tools do, `list` and `remove` never."""
    from cli.inspect_common import zk_session
    from core.zk import ensure_chroot

    if create:
        ensure_chroot(zk)
    with zk_session(zk) as client:
        yield client


@users_group.command("add")
@click.argument("user", callback=_user)
@_mechanism_option(True, "The mechanism the credential is for (a user may have several: add each).")
@click.option(
    "--password-file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A file holding the password alone (one line; not readable by others: chmod o-r).",
)
@click.option(
    "--iterations",
    type=click.IntRange(MIN_ITERATIONS, MAX_ITERATIONS),
    default=DEFAULT_ITERATIONS,
    show_default=True,
    help="PBKDF2 iterations of the stored credential (Kafka's bounds).",
)
@zk_option
def add(user, mechanism, password_file, iterations, zk) -> None:
    """Set USER's credential for a mechanism (replacing one it had); a node reads it at once.

    Nothing but a salted verifier is stored: for SCRAM, Kafka's credential (salt, stored key,
    server key, iterations); for PLAIN, the same form of the password's PBKDF2.
    """
    from security.credentials import CredentialStore, read_password_file
    from security.scram import make_credential, plain_verifier

    password = read_password_file(password_file)
    if mechanism == "PLAIN":
        credential = plain_verifier(password, iterations)
    else:
        credential = make_credential(mechanism, password, iterations)
    with _zk(zk, create=True) as client:
        CredentialStore(client).put(user, mechanism, credential)
    click.echo(f"user {user}: {mechanism} credential set ({iterations} iterations)")


@users_group.command("list")
@click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True)
@zk_option
def list_(output, zk) -> None:
    """Every user with a SASL credential: one line per user and mechanism, with its iterations."""
    from security.credentials import CredentialStore

    with _zk(zk, create=False) as client:
        users = CredentialStore(client).users()
    if output == "json":
        doc = {u: {m: {"iterations": c.iterations} for m, c in creds.items()} for u, creds in users.items()}
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
        return
    rows = [(u, m, str(c.iterations)) for u, creds in users.items() for m, c in sorted(creds.items())]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(("USER", "MECHANISM"))]
    for row in [("USER", "MECHANISM", "ITERATIONS"), *rows]:
        click.echo(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}")


@users_group.command("remove")
@click.argument("user", callback=_user)
@_mechanism_option(False, "Remove only this mechanism's credential (default: every one USER has).")
@zk_option
def remove(user, mechanism, zk) -> None:
    """Remove USER's credentials; a node refuses new connections of USER at once (open ones stay)."""
    from security.credentials import CredentialStore

    wanted = [mechanism] if mechanism else list(MECHANISMS)
    with _zk(zk, create=False) as client:
        removed = CredentialStore(client).remove(user, wanted)
    if not removed:
        what = f"{wanted[0]} credential" if mechanism else "SASL credentials"
        raise GroupshiftError(f"user {user} has no {what}; `groupshift users list` shows who has")
    click.echo(f"user {user}: removed {', '.join(removed)}")
