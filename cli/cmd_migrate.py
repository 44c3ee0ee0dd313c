"""`groupshift migrate plan|run|status|verify|rollback`: move a group between the schemes (thin: no logic)."""

from __future__ import annotations

import json

import click

from cli.inspect_common import zk_session
from cli.main import command_config_option, main, zk_option
from core.errors import GroupshiftError
from core.scheme import MIGRATABLE

SCHEMES = click.Choice([s.value for s in MIGRATABLE])  # server: scheme two's groups (the coordinator's store)
DESTS = click.Choice([s.value for s in MIGRATABLE] + ["kafka"])  # kafka: a group on a Kafka-protocol broker


@main.group("migrate")
def migrate_group() -> None:
    """Move a consumer group and its offsets between scheme one (zk) and the coordinator's schemes
    (server: scheme two, coordinator: scheme three), and back, or into a group on any
    Kafka-protocol broker (--to kafka --bootstrap HOST:PORT)."""


def _output(f):
    return click.option(
        "--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True
    )(f)


def _direction(f):
    f = click.option(
        "--mode",
        type=click.Choice(["offline", "live"]),
        default="offline",
        show_default=True,
        help="offline: the group is stopped. live: zk -> coordinator|server while it consumes (the bridge).",
    )(f)
    f = click.option(
        "--legacy-assignor",
        type=click.Choice(["range", "roundrobin"]),
        default="range",
        show_default=True,
        help="live: the legacy consumers' partition.assignment.strategy (the bridge assigns the same).",
    )(f)
    f = click.option(
        "--to", "dest", type=DESTS, required=True, help="The scheme to move to (kafka: needs --bootstrap)."
    )(f)
    f = _bootstrap(f)
    return click.option("--from", "source", type=SCHEMES, required=True, help="The scheme it is in.")(f)


def _bootstrap(f):
    f = command_config_option(f)
    return click.option(
        "--bootstrap",
        default=None,
        metavar="HOST:PORT[,...]",
        help="--to kafka: a Kafka-protocol broker (any: Kafka, groupshift's --kafka-listen, ...).",
    )(f)


def _kafka(dest: str, bootstrap: str | None, mode: str) -> bool:
    """Whether this is a migration into a Kafka-protocol group; refuses inconsistent options."""
    if dest != "kafka":
        if bootstrap is not None:
            raise GroupshiftError("--bootstrap is for --to kafka; drop it or migrate --to kafka")
        return False
    if not bootstrap:
        raise GroupshiftError("--to kafka needs --bootstrap HOST:PORT (a broker speaking Kafka's protocol)")
    if mode != "offline":
        raise GroupshiftError(
            "a migration to kafka is offline; drop --mode live (the bridge is zk -> coordinator)"
        )
    return True


def _say(line: str) -> None:
    click.echo(line, err=True)


@migrate_group.command("plan")
@click.argument("group")
@_direction
@_output
@zk_option
def plan_cmd(group, source, dest, bootstrap, security, mode, legacy_assignor, output, zk) -> None:
    """Print what `run` would do (partitions, offsets, members, checks); writes nothing."""
    from migrate.groups.render import render
    from migrate.migration.report import plan
    from migrate.migration.sides import check_args

    kafka = _kafka(dest, bootstrap, mode)
    if not kafka:
        check_args(source, dest, mode)
    with zk_session(zk) as client:
        if kafka:
            from migrate.migration import to_kafka

            p = to_kafka.plan(client, group, source, bootstrap, security)
        elif mode == "live":
            from migrate.migration import live

            p = live.plan(client, group, legacy_assignor, dest=dest)
        else:
            p = plan(client, group, source, dest, mode)
    failed = [c for c in p["checks"] if not c["ok"]]
    if output == "json":
        click.echo(json.dumps(p))
    else:
        click.echo(
            f"migrate {group} from {source} to {_dest(p)} ({mode}): {p['partitions']} partitions, "
            f"{p['to_copy']} to copy; steps: {' -> '.join(p['steps']) or 'none'}"
        )
        for c in p["checks"]:
            detail = f" ({c['detail']})" if c["detail"] else ""
            click.echo(f"  [{'ok' if c['ok'] else 'FAIL'}] {c['check']}{detail}")
        click.echo(render(p["offsets"], "table", ["topic", "partition", "source", "destination"]))
    if failed:
        raise click.exceptions.Exit(1)


@migrate_group.command("run")
@click.argument("group")
@_direction
@click.option("--overwrite", is_flag=True, help="Replace offsets the destination already has.")
@click.option(
    "--batch",
    type=click.IntRange(1, 1000),
    default=1000,
    show_default=True,
    help="Offsets per ZooKeeper transaction (or OffsetCommit request).",
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0, 86_400),
    default=0,
    show_default=True,
    help="live: seconds to wait for the last legacy consumer to leave before returning still bridged.",
)
@_output
@zk_option
def run_cmd(
    group, source, dest, bootstrap, security, mode, legacy_assignor, overwrite, batch, wait_s, output, zk
) -> None:
    """Start, or resume after a crash, the migration of GROUP (planned -> ... -> done).

    Live mode bridges the group and returns; run it again once the legacy consumers are replaced
    (or pass --wait) to finish.
    """
    from migrate.groups.render import Progress
    from migrate.migration.offline import check_args, run
    from migrate.migration.report import status

    kafka = _kafka(dest, bootstrap, mode)
    if not kafka:
        check_args(source, dest, mode)
    if mode == "live" and overwrite:
        raise GroupshiftError("--overwrite is for --mode offline; a live migration starts from no offsets")
    with zk_session(zk) as client:
        if kafka:
            from migrate.migration import to_kafka

            to_kafka.run(
                client,
                group,
                source,
                bootstrap,
                overwrite=overwrite,
                batch=batch,
                say=_say,
                progress=Progress(f"copying {group}"),
                security=security,
            )
            _show_status(status(client, group), output)
            return
        if mode == "live":
            from migrate.migration import live

            live.run(
                client,
                group,
                legacy_assignor=legacy_assignor,
                wait_s=wait_s,
                dest=dest,
                say=_say,
                progress=Progress(f"carrying {group} over"),
            )
            _show_status(status(client, group), output)
            return
        run(
            client,
            group,
            source,
            dest,
            mode=mode,
            overwrite=overwrite,
            batch=batch,
            say=_say,
            progress=Progress(f"copying {group}"),
        )
        _show_status(status(client, group), output)


@migrate_group.command("rollback")
@click.argument("group")
@click.option(
    "--batch", type=click.IntRange(1, 1000), default=1000, show_default=True, help="Offsets per transaction."
)
@_bootstrap
@_output
@zk_option
def rollback_cmd(group, batch, bootstrap, security, output, zk) -> None:
    """Undo an unfinished migration: the destination's offsets as they were before it.

    A migration to kafka is rolled back on the brokers its record names (or --bootstrap).
    """
    from migrate.groups.render import Progress
    from migrate.migration import to_kafka
    from migrate.migration.offline import rollback
    from migrate.migration.report import status

    with zk_session(zk) as client:
        if bootstrap is not None or to_kafka.recorded(client, group):
            to_kafka.rollback(
                client,
                group,
                bootstrap=bootstrap,
                say=_say,
                progress=Progress(f"restoring {group}"),
                security=security,
            )
        else:
            rollback(client, group, batch=batch, say=_say, progress=Progress(f"restoring {group}"))
        _show_status(status(client, group), output)


@migrate_group.command("status")
@click.argument("group")
@_output
@zk_option
def status_cmd(group, output, zk) -> None:
    """The recorded migration of GROUP: its state and history."""
    from migrate.migration.report import status

    with zk_session(zk) as client:
        _show_status(status(client, group), output)


@migrate_group.command("verify")
@click.argument("group")
@_direction
@_output
@zk_option
def verify_cmd(group, source, dest, bootstrap, security, mode, legacy_assignor, output, zk) -> None:
    """Compare GROUP's offsets in the two schemes, partition by partition (exit 1 when they differ)."""
    from migrate.groups.render import render
    from migrate.migration import to_kafka
    from migrate.migration.report import verify
    from migrate.migration.sides import check_args

    kafka = _kafka(dest, bootstrap, mode)
    if not kafka:
        check_args(source, dest, mode)
    with zk_session(zk) as client:
        v = (
            to_kafka.verify(client, group, source, bootstrap, security)
            if kafka
            else verify(client, group, source, dest)
        )
    if output == "json":
        click.echo(json.dumps(v))
    else:
        same = "equal" if v["equal"] else f"{len(v['differ'])} partition(s) differ"
        click.echo(f"group {group}: {v['partitions']} partitions under {source}, {_dest(v)}: {same}")
        if v["differ"]:
            click.echo(render(v["differ"][:100], "table", ["topic", "partition", "source", "destination"]))
    if not v["equal"]:
        raise click.exceptions.Exit(1)


def _show_status(s: dict, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(s))
        return
    running = f", running ({s['running']})" if s["running"] else ""
    click.echo(
        f"migration of {s['group']} from {s['from']} to {_dest(s)} ({s['mode']}): {s['state']}{running}; "
        f"{s['partitions']} partitions"
    )
    if "legacy_members" in s:
        click.echo(
            f"  legacy assignor {s['legacy_assignor']}: {len(s['legacy_members'])} legacy member(s), "
            f"{len(s['bridged_members'])} bridged coordinator member(s)"
        )
    for h in s["history"]:
        click.echo(f"  {h['state']:<12} {h['at_ms']}")


def _dest(d: dict) -> str:
    return f"{d['to']} at {d['bootstrap']}" if d.get("bootstrap") else d["to"]
