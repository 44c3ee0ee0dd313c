"""The `groupshift` click group: wiring and the one place user errors become one-line messages."""

from __future__ import annotations

import faulthandler
import importlib
import logging
import signal
import sys

import click
from kazoo.exceptions import KazooException

from core.errors import GroupshiftError

_VERBOSE_HELP = "Log to stderr: -v warnings (kazoo's too), -vv debug. Accepted before or after the command."
# Each command's module, imported when the command runs (or `--help` lists it): a command pays for
# its own imports only. Importing the module registers the command on `main`.
COMMANDS = {
    "consume": "cli.cmd_consume",
    "coordinator": "cli.cmd_coordinator",
    "demo": "cli.cmd_demo",
    "experiment": "cli.cmd_experiment",
    "groups": "cli.cmd_groups",
    "migrate": "cli.cmd_migrate",
    "offsets": "cli.cmd_offsets",
    "topics": "cli.cmd_topics",
    "users": "cli.cmd_users",
    "zk": "cli.cmd_zk",
}


class GroupshiftGroup(click.Group):
    """The root group: any user error is one line on stderr and a non-zero exit, never a traceback.

    Click's own usage errors (exit code 2) are shortened to one line too, and every command
    accepts `-v`/`-vv`, before or after its name.
    """

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        prog_name = prog_name or "groupshift"  # also under `python -m cli`
        _dump_stacks_on_sigusr1()
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            _fail("aborted", 1)
        except click.ClickException as exc:
            hint = f"; see `{exc.ctx.command_path} --help`" if getattr(exc, "ctx", None) else ""
            _fail(exc.format_message().rstrip(".") + hint, exc.exit_code)
        except GroupshiftError as exc:
            _fail(str(exc), 1)
        except KazooException as exc:  # e.g. an ACL that denies this client
            detail = f": {exc}" if str(exc) else ""
            _fail(
                f"ZooKeeper refused the request ({exc.__class__.__name__}{detail}); "
                "check the --zk namespace and its ACLs",
                1,
            )
        except OSError as exc:  # a file or directory the user named cannot be used
            where = f": {exc.filename}" if exc.filename else ""
            _fail(f"{exc.strerror or exc.__class__.__name__}{where}", 1)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        _add_verbose(cmd)
        super().add_command(cmd, name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(COMMANDS[cmd_name])  # registers it
        return self.commands.get(cmd_name)


def _dump_stacks_on_sigusr1() -> None:
    """`kill -USR1 <pid>` prints every thread's stack to the process's stderr (a long command that
    seems stuck shows where it waits) and the command goes on. The process's own stderr
    (`sys.__stderr__`), also when a caller runs the command in-process with `sys.stderr` captured
    (click's CliRunner); nothing is registered when the process has no stderr."""
    try:
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    except (AttributeError, ValueError, OSError):  # no stderr, or one without a file descriptor
        pass


def _fail(message: str, code: int) -> None:
    click.echo("error: " + " ".join(message.split()), err=True)
    sys.exit(code)


def _add_verbose(cmd: click.Command) -> None:
    """Give `cmd` (and, for a group, every command added to it later) a `-v/--verbose` option."""
    if not any(getattr(p, "name", None) == "verbose" for p in cmd.params):
        cmd.params.append(
            click.Option(
                ["-v", "--verbose"],
                count=True,
                expose_value=False,
                callback=_verbosity,
                help=_VERBOSE_HELP,
            )
        )
    if isinstance(cmd, click.Group) and not isinstance(cmd, GroupshiftGroup):
        original = cmd.add_command

        def add_command(sub: click.Command, name: str | None = None) -> None:
            _add_verbose(sub)
            original(sub, name)

        cmd.add_command = add_command  # type: ignore[method-assign]
        for sub in cmd.commands.values():
            _add_verbose(sub)


def _verbosity(ctx: click.Context, param: click.Parameter, value: int) -> None:
    # `-v` counts wherever it is given: `groupshift -v topics list -v` is -vv.
    root = ctx.find_root()
    total = root.meta.get("groupshift.verbose", 0) + (value or 0)
    root.meta["groupshift.verbose"] = total
    # A user error is one line; kazoo's reconnect chatter would bury it, so it is shown only on -v.
    level = {0: logging.ERROR, 1: logging.WARNING}.get(total, logging.DEBUG)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)
    logging.getLogger("kazoo").setLevel(level if total else logging.CRITICAL)
    if not total:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_interrupted_py4j_call)


def _interrupted_py4j_call(record: logging.LogRecord) -> bool:
    """py4j logs a traceback on the root logger when Ctrl-C or SIGTERM interrupts a call into the
    Spark JVM; the command says "aborted" in one line itself (shown with -v)."""
    return not record.getMessage().startswith("KeyboardInterrupt while sending command")


@click.group(cls=GroupshiftGroup)
@click.version_option(package_name="groupshift")
def main() -> None:
    """groupshift: Kafka consumer-group rebalancing on real ZooKeeper (schemes one, two and three)."""


_add_verbose(main)


def _zk_value(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    # Checked while parsing, so a malformed --zk (or an empty one, which would silently fall back
    # to $GROUPSHIFT_ZK) is refused before the command does anything.
    from core.zk import parse_zk

    if value is not None:
        try:
            parse_zk(value)
        except GroupshiftError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return value


def zk_option(f):
    """`--zk HOST:PORT[/chroot]`; default `$GROUPSHIFT_ZK`, else the embedded ZooKeeper."""
    return click.option(
        "--zk",
        "zk",
        default=None,
        callback=_zk_value,
        metavar="HOST:PORT[/CHROOT]",
        help="ZooKeeper connect string (default: $GROUPSHIFT_ZK, else the embedded `groupshift zk start`). "
        "The chroot must be canonical (/a/b: no //, trailing /, . or .., whitespace).",
    )(f)
