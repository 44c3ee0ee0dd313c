"""`groupshift offsets export|import|reset|delete`: committed offsets of either scheme (dry run default)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from cli.inspect_common import data_option, output_option, scheme_option, warn, zk_session
from cli.main import command_config_option, main, zk_option
from core.errors import GroupshiftError
from core.types import TopicPartition


def bootstrap_option(f):
    f = command_config_option(f)
    return click.option(
        "--bootstrap",
        default=None,
        metavar="HOST:PORT[,...]",
        help="A Kafka-protocol broker: the group's offsets there instead of in ZooKeeper.",
    )(f)


@main.group("offsets")
def offsets_group() -> None:
    """Committed offsets: export, import, reset (dry run unless --execute) and delete."""


@offsets_group.command("export")
@click.argument("group")
@click.option(
    "--format", "fmt", type=click.Choice(["csv", "json", "zk-export"]), default="csv", show_default=True
)
@scheme_option(None)
@bootstrap_option
@zk_option
def export(group, fmt, scheme, bootstrap, security, zk) -> None:
    """Print GROUP's committed offsets: csv (topic,partition,offset), json or zk-export lines.

    With --bootstrap, the group's offsets on that Kafka-protocol broker (every partition of its topics).
    """
    from migrate.groups.listing import exists_in, read
    from migrate.offsets.files import export as render
    from migrate.schemes.model import choose_scheme

    if bootstrap is not None:
        from migrate.migration.kafka_target import KafkaTarget, no_group

        _no_scheme(scheme)
        with KafkaTarget(bootstrap, security=security) as t:
            counts = t.partitions()
            tps = [TopicPartition(topic, p) for topic, n in sorted(counts.items()) for p in range(n or 0)]
            offsets = t.offsets(group, tps)
        if not offsets:
            raise no_group(group, t.bootstrap)
        click.echo(render(group, offsets, fmt), nl=False)
        return
    with zk_session(zk) as client:
        s = choose_scheme(group, exists_in(client, group), scheme)
        view = read(client, s, group, live=False)
    click.echo(render(group, {tp: c.offset for tp, c in view.offsets.items()}, fmt), nl=False)


def _mode(dry_run: bool, execute: bool) -> bool:
    if dry_run and execute:
        raise GroupshiftError("--dry-run and --execute contradict each other; give one")
    return execute


@offsets_group.command("import")
@click.argument("group")
@click.option("--from-file", "from_file", required=True, help="csv (3 or 4 columns) or zk-export lines.")
@click.option("--dry-run", is_flag=True, help="Only print the plan (the default).")
@click.option("--execute", is_flag=True, help="Write the offsets.")
@scheme_option(None)
@bootstrap_option
@output_option
@data_option
@zk_option
def import_(group, from_file, dry_run, execute, scheme, bootstrap, security, output, data, zk) -> None:
    """Write the offsets of a file into GROUP: every line validated first, then all or nothing.

    With --bootstrap, into GROUP on that Kafka-protocol broker (refused while it has members there).
    """
    from migrate.offsets import plans
    from migrate.offsets.files import parse

    execute = _mode(dry_run, execute)
    offsets = parse(_read_file(from_file), group, from_file)
    if bootstrap is not None:
        from migrate.migration.kafka_target import KafkaTarget

        _no_scheme(scheme)
        with KafkaTarget(bootstrap, security=security) as t:
            plan = plans.kafka_import_plan(t, group, offsets)
            _show_and_write(None, f"kafka at {t.bootstrap}", group, plan, execute, output, target=t)
        return
    with zk_session(zk) as client:
        s, plan = plans.import_plan(client, _log(data), group, offsets, scheme)
        _show_and_write(client, s, group, plan, execute, output)


@offsets_group.command("reset")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, help="T or T:P,P,... (repeatable).")
@click.option("--all-topics", is_flag=True, help="Every partition the group has committed offsets for.")
@click.option("--to-earliest", is_flag=True, help="The log start offset.")
@click.option("--to-latest", is_flag=True, help="The log end offset.")
@click.option("--to-current", is_flag=True, help="The committed offset (the log end where none).")
@click.option("--to-offset", type=int, default=None, help="This offset (clamped to the log's range).")
@click.option("--shift-by", type=int, default=None, help="Committed + N (clamped).")
@click.option(
    "--to-datetime", default=None, help="ISO 8601, e.g. 2024-05-01T12:00:00.000+02:00 (UTC if no zone)."
)
@click.option("--by-duration", default=None, help="Now minus an ISO 8601 duration PnDTnHnMnS.")
@click.option(
    "--from-file", "from_file", default=None, help="Offsets from a csv or zk-export file (clamped)."
)
@click.option("--dry-run", is_flag=True, help="Only print the plan (the default).")
@click.option("--execute", is_flag=True, help="Write the plan.")
@scheme_option(None)
@output_option
@data_option
@zk_option
def reset(group, topics, all_topics, to_offset, shift_by, to_datetime, by_duration, from_file, **kw):
    """Reset GROUP's offsets (refused while it has live members); prints the plan, writes with --execute."""
    from migrate.offsets import plans
    from migrate.offsets.files import parse
    from migrate.offsets.reset import Scenario, parse_datetime, parse_duration, parse_topic_scope

    execute = _mode(kw["dry_run"], kw["execute"])
    given = [
        (name, v)
        for name, v in [
            ("to-earliest", kw["to_earliest"] or None),
            ("to-latest", kw["to_latest"] or None),
            ("to-current", kw["to_current"] or None),
            ("to-offset", to_offset),
            ("shift-by", shift_by),
            ("to-datetime", to_datetime),
            ("by-duration", by_duration),
            ("from-file", from_file),
        ]
        if v is not None
    ]
    if len(given) != 1:
        raise GroupshiftError(
            "give exactly one of --to-earliest, --to-latest, --to-current, --to-offset, --shift-by, "
            f"--to-datetime, --by-duration, --from-file (got {len(given)})"
        )
    kind = given[0][0]
    if kind == "from-file":
        if topics or all_topics:
            raise GroupshiftError("--from-file takes its partitions from the file; drop --topic/--all-topics")
    elif bool(topics) == all_topics:
        raise GroupshiftError("give the partitions to reset: --topic T[:P,...] (repeatable) or --all-topics")
    if kind == "to-offset" and to_offset < 0:
        raise GroupshiftError(f"--to-offset {to_offset} is negative; offsets start at 0")
    at_ms = None
    if kind == "to-datetime":
        at_ms = int(parse_datetime(to_datetime).timestamp() * 1000)
    elif kind == "by-duration":
        at_ms = int(time.time() * 1000 - parse_duration(by_duration).total_seconds() * 1000)
    scope = parse_topic_scope(topics)
    file_offsets = parse(_read_file(from_file), group, from_file) if from_file else None
    value = to_offset if kind == "to-offset" else shift_by
    with zk_session(kw["zk"]) as client:
        s, plan = plans.reset_plan(
            client,
            _log(kw["data"]),
            group,
            Scenario(kind, value),
            scope=scope,
            all_topics=all_topics,
            at_ms=at_ms,
            file_offsets=file_offsets,
            scheme=kw["scheme"],
        )
        if at_ms is not None and at_ms > time.time() * 1000:
            plan.warnings.insert(
                0, "that time is in the future: every partition falls back to its log end offset"
            )
        _show_and_write(client, s, group, plan, execute, kw["output"])


@offsets_group.command("delete")
@click.argument("group")
@click.option("--topic", required=True, help="The topic whose committed offsets to delete.")
@scheme_option(None)
@zk_option
def delete(group, topic, scheme, zk) -> None:
    """Delete GROUP's committed offsets of one topic (refused while the group has live members)."""
    from migrate.groups.listing import exists_in
    from migrate.schemes.model import choose_scheme
    from migrate.schemes.writes import delete_offsets

    with zk_session(zk) as client:
        s = choose_scheme(group, exists_in(client, group), scheme)
        how = delete_offsets(client, s, group, topic)
    click.echo(f"deleted offsets of group {group} ({s.value}) for topic {topic}: {how}")


# -- helpers ---------------------------------------------------------------------------------------


def _no_scheme(scheme) -> None:
    if scheme is not None:
        raise GroupshiftError("--scheme is for ZooKeeper groups; drop it with --bootstrap")


def _log(data):
    from topics.log import Log

    return Log(data)


def _read_file(name: str) -> bytes:
    path = Path(name)
    if path.is_dir():
        raise GroupshiftError(f"{name} is a directory; --from-file needs a file")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise GroupshiftError(f"cannot read {name}: {exc.strerror}") from None


def _show_and_write(client, scheme, group, plan, execute, output, target=None) -> None:
    import msgspec

    from migrate.groups.render import Progress, render
    from migrate.schemes.writes import commit

    where = scheme if target is not None else scheme.value  # a Rebalancer, or "kafka at HOST:PORT"
    warn(plan.warnings)
    rows = [msgspec.structs.asdict(r) for r in plan.rows]
    cols = ["topic", "partition", "current", "new", "log_end", "lag_after"]
    click.echo(render(rows, output, cols))
    if not execute:
        click.echo(
            f"dry run: nothing written to group {group} ({where}); add --execute to write these offsets",
            err=True,
        )
        return
    if target is not None:
        n = target.commit(group, plan.offsets(), progress=Progress(f"writing {group}"))
        how = f"in {n} OffsetCommit request(s)"
    else:
        how = commit(client, scheme, group, plan.offsets(), progress=Progress(f"writing {group}"))
    click.echo(f"wrote {len(plan.rows)} offset(s) for group {group} ({where}) {how}", err=True)
