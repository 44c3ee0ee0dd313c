"""`groupshift groups list|describe|watch|delete`: consumer groups of both schemes, side by side."""

from __future__ import annotations

import json
import time

import click

from cli.inspect_common import data_option, output_option, scheme_option, warn, zk_session
from cli.main import main, zk_option
from core.errors import GroupshiftError, ZooKeeperUnavailable


@main.group("groups")
def groups_group() -> None:
    """Consumer groups: scheme one (/consumers, Kafka 0.8) and scheme three (coordinator) side by side."""


@groups_group.command("list")
@scheme_option("all", allow_all=True)
@click.option("--state", "states", multiple=True, help="Only groups in this state (repeatable).")
@output_option
@zk_option
def list_(scheme, states, output, zk) -> None:
    """Every group with its scheme, state, members and protocol (offsets-only groups too)."""
    from migrate.groups.listing import list_groups
    from migrate.groups.render import render

    with zk_session(zk) as client:
        rows = list_groups(client, scheme, list(states))
    cols = ["group", "scheme", "state", "members", "protocol", "partitions_with_offsets"]
    text = render([_struct(r) for r in rows], output, cols)
    if text:
        click.echo(text)


@groups_group.command("describe")
@click.argument("group")
@scheme_option("all", allow_all=True)
@click.option("--members", "view", flag_value="members", help="Members and their partitions.")
@click.option(
    "--offsets", "view", flag_value="offsets", help="Per partition: offset, log end, lag (default)."
)
@click.option("--state", "view", flag_value="state", help="Group state, generation, protocol, status.")
@click.option(
    "--samples", default=None, help="Watch file with the commit window (default: where `watch` puts it)."
)
@output_option
@data_option
@zk_option
def describe(group, scheme, view, samples, output, data, zk) -> None:
    """Members, per-partition offsets, lag and owners, state, and Burrow-style status of GROUP."""
    from core.zk import resolve_zk
    from migrate.groups.describe import group_summary, log_offsets, partition_rows, partitions_of
    from migrate.groups.listing import find
    from migrate.groups.render import render
    from migrate.groups.watch import WatchState, samples_path
    from topics.root import default_root

    view = view or "offsets"
    root = data if data is not None else default_root()  # refused before ZooKeeper is asked
    results = []
    with zk_session(zk) as client:
        views = find(client, group, scheme)
    from topics.log import Log  # pyarrow: only for a group that exists

    log = Log(root)
    now = int(time.time() * 1000)
    for s, v in views.items():
        path = samples_path(s, group, resolve_zk(zk), samples)
        state = WatchState.load(path, s, group) if path.exists() else None
        rows = partition_rows(v, log_offsets(log, partitions_of(v)), state, now)
        summary = group_summary(v, rows)
        notes = list(v.notes)
        if state is None and view in ("offsets", "state"):
            notes.append(f"no commit window for statuses yet: run `groupshift groups watch {group}`")
        results.append((v, rows, summary, notes))

    if output == "json":
        click.echo(
            json.dumps([_json_result(v, rows, summary, notes, view) for v, rows, summary, notes in results])
        )
        return
    for i, (v, rows, summary, notes) in enumerate(results):
        if not v.members:
            click.echo(f"Consumer group '{group}' ({v.scheme.value}) has no active members.", err=True)
        elif v.state not in ("Stable", "Empty"):
            click.echo(
                f"Warning: consumer group '{group}' ({v.scheme.value}) is rebalancing ({v.state}).", err=True
            )
        warn(notes)
        if i:
            click.echo("")
        if view == "state":
            click.echo(render([summary], output))
        elif view == "members":
            cols = _MEMBER_COLS + (["epoch", "target"] if _incremental(v) else [])
            click.echo(render([_member_row(v, m) for m in v.members], output, cols))
        else:
            if output == "table":
                click.echo(
                    f"GROUP {group} ({v.scheme.value})  state {v.state}  members {len(v.members)}  "
                    f"lag {summary['total_lag'] if summary['total_lag'] is not None else '-'}  "
                    f"status {summary['status'] or '-'}"
                )
            cols = [
                "topic",
                "partition",
                "committed",
                "log_end",
                "lag",
                "owner",
                "host",
                "client_id",
                "status",
            ]
            click.echo(render([_struct(r) for r in rows], output, cols))


_MEMBER_COLS = ["member_id", "client_id", "host", "instance_id", "partitions", "assignment", "subscription"]


def _incremental(v) -> bool:
    """Scheme two's incremental form: members have epochs and targets (docs/groups.md)."""
    return v.protocol_type == "consumer-incremental"


def _partitions_text(tps) -> str | None:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ", ".join(f"{t}({','.join(map(str, ps))})" for t, ps in sorted(by_topic.items())) or None


def _member_row(v, m) -> dict:
    extra = {}
    if _incremental(v):
        extra = {"epoch": m.epoch, "target": _partitions_text(m.target) if m.target is not None else "-"}
    return extra | {
        "member_id": m.member_id,
        "client_id": m.client_id,
        "host": m.host,
        "instance_id": m.instance_id,
        "partitions": len(m.partitions),
        "assignment": _partitions_text(m.partitions),
        "subscription": (m.error and "unreadable registration")
        or (
            ",".join(f"{t}:{n}" for t, n in m.subscription.items())
            + ("" if m.pattern == "static" else f" ({m.pattern})")
        ),
    }


def _json_result(v, rows, summary, notes, view) -> dict:
    out = {"summary": summary, "notes": notes}
    if view in ("members", "offsets"):
        out["members"] = [
            _member_row(v, m) | {"partitions": [list(tp) for tp in m.partitions]} for m in v.members
        ]
    if view == "offsets":
        out["partitions"] = [_struct(r) for r in rows]
    return out


def _struct(s) -> dict:
    import msgspec

    return msgspec.structs.asdict(s)


@groups_group.command("watch")
@click.argument("group")
@scheme_option(None)
@click.option(
    "--interval", type=float, default=10.0, show_default=True, help="Seconds between samples (0.1-3600)."
)
@click.option("--count", type=int, default=None, help="Stop after N samples (default: until interrupted).")
@click.option(
    "--samples", default=None, help="Where to keep the window (default: $GROUPSHIFT_HOME/watch/...)."
)
@data_option
@zk_option
def watch(group, scheme, interval, count, samples, data, zk) -> None:
    """Sample GROUP's commits and log end offsets into a local window (used by `describe` statuses)."""
    from core.zk import resolve_zk
    from migrate.groups.describe import log_offsets, partitions_of
    from migrate.groups.listing import exists_in, read
    from migrate.groups.status import evaluate, group_status
    from migrate.groups.watch import WatchState, samples_path
    from migrate.schemes.model import choose_scheme
    from topics.log import Log

    if not 0.1 <= interval <= 3600:
        raise GroupshiftError(f"--interval {interval:g} is out of range; use 0.1 to 3600 seconds")
    if count is not None and not 1 <= count <= 10_000_000:
        raise GroupshiftError(f"--count {count} is out of range; use 1 to 10000000")
    log = Log(data)
    with zk_session(zk, long_lived=True) as client:  # a watch outlives ZooKeeper restarts
        s = choose_scheme(group, exists_in(client, group), scheme)
        path = samples_path(s, group, resolve_zk(zk), samples)
        state = WatchState.load(path, s, group)
        n = 0
        away = False
        try:
            while count is None or n < count:
                if n or away:
                    time.sleep(interval)
                try:
                    v = read(client, s, group, live=False)
                except ZooKeeperUnavailable as exc:  # kazoo reconnects by itself; sample again then
                    if not away:
                        warn(f"{exc}; waiting for ZooKeeper to come back")
                    away = True
                    continue
                if away:
                    warn("ZooKeeper is back; sampling again")
                    away = False
                if v is None:
                    raise GroupshiftError(f"group {group!r} no longer exists under scheme {s.value}")
                ranges = log_offsets(log, partitions_of(v))
                ends = {tp: (r.end if r else None) for tp, r in ranges.items()}
                now = int(time.time() * 1000)
                new = state.record(v, ends, now)
                state.save(path)
                n += 1
                statuses = []
                for tp in partitions_of(v):
                    commits, window_ends = state.window(tp)
                    c, e = v.offsets.get(tp), ends.get(tp)
                    cur = max(0, e - c.offset) if c and e is not None else None
                    statuses.append(evaluate(commits, current_lag=cur, now=now, ends=window_ends))
                click.echo(
                    f"sample {state.samples}: {new} new commit(s), status {group_status(statuses)} ({path})"
                )
        except KeyboardInterrupt:
            pass


@groups_group.command("delete")
@click.argument("group")
@scheme_option(None)
@zk_option
def delete(group, scheme, zk) -> None:
    """Delete GROUP and all its offsets (refused while it has live members)."""
    from migrate.groups.listing import exists_in
    from migrate.schemes.model import choose_scheme
    from migrate.schemes.writes import delete_group

    with zk_session(zk) as client:
        s = choose_scheme(group, exists_in(client, group), scheme)
        how = delete_group(client, s, group)
    click.echo(f"deleted group {group} ({s.value}): {how}")
