"""The `groupshift` click group: wiring and the one place user errors become one-line messages."""

from __future__ import annotations

import faulthandler
import importlib
import logging
import os
import signal
import sys

import click
from kazoo.exceptions import AuthFailedError, InvalidACLError, KazooException, NoAuthError

from core import zk_auth
from core.errors import GroupshiftError

_VERBOSE_HELP = "Log to stderr: -v warnings (kazoo's too), -vv debug. Accepted before or after the command."
# Each command's module, imported when the command runs (or `--help` lists it): a command pays for
# its own imports only. Importing the module registers the command on `main`.
COMMANDS = {
    "acls": "cli.cmd_acls",
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
        except (NoAuthError, AuthFailedError) as exc:
            from core.zk import refused_by_acl

            _fail(str(refused_by_acl(exc)), 1)
        except InvalidACLError:  # connect() checks this first where it can; a create without a chroot
            from core.zk import ZkSecurity, unknown_acl_scheme

            _fail(str(unknown_acl_scheme(ZkSecurity.from_env().acl)), 1)
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


# What py4j logs, with a traceback, when Ctrl-C or SIGTERM interrupts a call into the Spark JVM:
# the interrupted call (on the root logger), then, when the JVM is stopping too, its failure to
# close that call's connection (py4j.clientserver).
PY4J_INTERRUPT_NOISE = (
    "KeyboardInterrupt while sending command",
    "Exception occurred while shutting down connection",
)


def _interrupted_py4j_call(record: logging.LogRecord) -> bool:
    """Leave out py4j's tracebacks of an interrupted call (`PY4J_INTERRUPT_NOISE`); the command
    says "aborted" in one line itself (they are shown with -v)."""
    return not record.getMessage().startswith(PY4J_INTERRUPT_NOISE)


def _zk_setting(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """A root (or per-command) ZooKeeper security option: checked now, then handed to every
    ZooKeeper client of this process and of the processes it starts through its variable."""
    if value is None:
        return
    var = _ZK_SETTINGS[param.name]
    if param.name in _PATH_SETTINGS:
        value = os.path.abspath(value)  # a process started in another directory finds it too
    if var == zk_auth.ENV_AUTH_FILE:
        zk_auth.load_auth_file(value)  # a bad file is refused before anything runs
    elif var == zk_auth.ENV_READ_PRINCIPAL:
        zk_auth.parse_readers(value)
    os.environ[var] = value  # TLS files are checked together when the command connects


_ZK_SETTINGS = {
    "zk_auth_file": zk_auth.ENV_AUTH_FILE,
    "zk_read_principal": zk_auth.ENV_READ_PRINCIPAL,
    "zk_tls_ca": zk_auth.ENV_TLS_CA,
    "zk_tls_cert": zk_auth.ENV_TLS_CERT,
    "zk_tls_key": zk_auth.ENV_TLS_KEY,
}
_PATH_SETTINGS = frozenset(_ZK_SETTINGS) - {"zk_read_principal"}
_ZK_AUTH_HELP = (
    "ZooKeeper credential: a file with one digest:USER:PASSWORD or sasl:USER:PASSWORD (SASL "
    "DIGEST-MD5) line, not readable by others "
    "(default: $GROUPSHIFT_ZK_AUTH_FILE). Znodes this command and the processes it starts "
    "create get an ACL for that user only (plus --zk-read-principal)."
)


def zk_auth_file_option(f):
    """`--zk-auth-file PATH`: the root option, also accepted by every command that takes `--zk`."""
    return click.option(
        "--zk-auth-file",
        "zk_auth_file",
        type=click.Path(dir_okay=False),
        expose_value=False,
        callback=_zk_setting,
        metavar="PATH",
        help=_ZK_AUTH_HELP,
    )(f)


def _zk_security_options(f):
    f = zk_auth_file_option(f)
    for name, metavar, text in (
        (
            "zk-read-principal",
            "SCHEME:ID[,...]",
            "Operator principals that may read (never change) the znodes created with --zk-auth-file, in "
            "ZooKeeper's id form: digest:USER:HASH (from `groupshift zk digest`), sasl:NAME, x509:DN "
            "(default: $GROUPSHIFT_ZK_READ_PRINCIPAL).",
        ),
        (
            "zk-tls-ca",
            "PEM",
            "Connect to ZooKeeper's secureClientPort over TLS, trusting this CA "
            "(default: $GROUPSHIFT_ZK_TLS_CA).",
        ),
        ("zk-tls-cert", "PEM", "Client certificate for ZooKeeper's TLS (default: $GROUPSHIFT_ZK_TLS_CERT)."),
        ("zk-tls-key", "PEM", "Its private key (default: $GROUPSHIFT_ZK_TLS_KEY)."),
    ):
        f = click.option(
            "--" + name,
            name.replace("-", "_"),
            expose_value=False,
            callback=_zk_setting,
            metavar=metavar,
            help=text,
        )(f)
    return f


@click.group(cls=GroupshiftGroup)
@click.version_option(package_name="groupshift")
@_zk_security_options
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
    """`--zk HOST:PORT[/chroot]`; default `$GROUPSHIFT_ZK`, else the embedded ZooKeeper; and
    `--zk-auth-file` beside it."""
    f = zk_auth_file_option(f)
    return click.option(
        "--zk",
        "zk",
        default=None,
        callback=_zk_value,
        metavar="HOST:PORT[/CHROOT]",
        help="ZooKeeper connect string (default: $GROUPSHIFT_ZK, else the embedded `groupshift zk start`). "
        "The chroot must be canonical (/a/b: no //, trailing /, . or .., whitespace).",
    )(f)


def command_config_option(f):
    """`--command-config FILE`: TLS and SASL settings for the nodes or brokers a command talks to,
    as a Kafka client properties file (docs/security.md); checked before the command does anything."""

    def load(ctx: click.Context, param: click.Parameter, value: str | None):
        if value is None:
            return None
        from security.client_config import load as load_config

        try:
            return load_config(value)
        except GroupshiftError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None

    return click.option(
        "--command-config",
        "security",
        default=None,
        callback=load,
        metavar="FILE",
        help="Kafka client properties (security.protocol, sasl.*, ssl.*) for secured listeners.",
    )(f)
