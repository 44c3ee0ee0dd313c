"""The comparison scenarios: each one runs for every scheme on the same cluster and returns figures.

    ctx = Context(lab, quick=False, progress=print)
    SCENARIOS["hard-kill"].run(ctx)     # {"description", "settings", "schemes": {scheme: figures}}

Fault scenarios run every scheme's group side by side (one `GroupRun` each, its own topic and
group, the same ZooKeeper and coordinator nodes), in phases: all groups form; the fault hits
each group (or the shared cluster) at once; all settle, drain and stop; then each group's logs are
analysed (`experiments/analysis.py`). The scale-up scenario runs the schemes one after the other,
so ZooKeeper's server-side counters belong to one scheme at a time.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from core.scheme import Scheme
from experiments import analysis, zkstats
from experiments.harness import CUT_GID, NODE_OPTIONS, GroupRun, Lab, RunSettings
from experiments.kafka_worker import unsupported
from experiments.worker import DEFAULT_SCHEMES, ONE_SYNC, scheme_of
from zk_rebalance import metrics as zk_metrics

COORDINATOR_SCHEMES = tuple(s.value for s in Scheme.coordinated())


@dataclass
class Context:
    lab: Lab
    quick: bool = False
    schemes: tuple[str, ...] = DEFAULT_SCHEMES
    progress: Callable[[str], None] = lambda line: None
    settings: RunSettings = field(default_factory=RunSettings)
    #: per scenario, ZooKeeper's server-side counters around its steps (all schemes together)
    zk_server: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.quick:
            self.settings = fault_settings(True, self.settings)


def fault_settings(quick: bool, settings: RunSettings | None = None) -> RunSettings:
    """The fault scenarios' group settings (`--quick`: smaller groups, shorter sessions)."""
    settings = settings or RunSettings()
    if not quick:
        return settings
    return replace(
        settings,
        workers=2,
        partitions=4,
        session_ms=2000,
        heartbeat_ms=200,
        warmup_s=0.5,
        settle_quiet_s=0.5,
        zk_backoff_ms=500,
    )


@dataclass(frozen=True)
class Scenario:
    """A scenario, the ZooKeeper cluster its groups use, and whether it must run with nothing beside
    it. Scenarios on different clusters share no server, counter or coordinator node, so the
    runner runs them side by side (`experiments/runner.py`); one that is `alone` (scale-up: its
    figures are milliseconds, and the server's counters must be one scheme's) runs first, by itself."""

    name: str
    description: str
    run: Callable[[Context], dict]
    cluster: str = "single"
    alone: bool = False


def _parallel(fn: Callable[[str], dict | None], schemes: list[str]) -> dict[str, BaseException]:
    """Run `fn(scheme)` for every scheme in its own thread; the exceptions, by scheme."""
    errors: dict[str, BaseException] = {}

    def target(scheme: str) -> None:
        try:
            fn(scheme)
        except BaseException as exc:  # reported per scheme, the others go on
            errors[scheme] = exc

    # daemon: an interrupted run's main thread cleans up and exits without waiting for them (the
    # lab, stopping, makes whatever they start next fail at once)
    threads = [threading.Thread(target=target, args=(s,), name=f"exp-{s}", daemon=True) for s in schemes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def measure(
    run: GroupRun,
    since: float,
    finished: dict,
    victim: str | None = None,
    settle_by: float | None = None,
    upto: dict[str, int] | None = None,
) -> dict:
    """Every figure of one group's run from its logs: processing, ownership, scheme one's events
    (`upto`: see `analysis.summary`)."""
    events = run.events()
    until = max((e["t"] for e in events), default=since)
    out = analysis.summary(events, finished["ends"], since=since, until=until, settle_by=settle_by, upto=upto)
    out["drained"] = finished["drained"]
    if victim is not None:
        out["zombie"] = analysis.zombie(events, victim, since)
    if scheme_of(run.scheme) is Scheme.ONE:
        zk_events = run.zk_events()
        settled = since + out["time_to_stable_s"]
        out["s1"] = zk_metrics.conflicts(zk_events, since, settled + 0.001)
        out["h1_fanout"] = zk_metrics.fanout(zk_events, since, settled + 0.001)
        # S5 in ZooKeeper's own write order (mzxid): sees a write that landed twice (zkclient re-issues
        # a write after a lost session), which the processing log shows once
        after_fault = [e for e in zk_events if e["t"] >= since]
        out["zk_offset_regressions"] = len(zk_metrics.offset_regressions(after_fault))
        out["zk"] = {
            "requests": zk_metrics.zk_requests(zk_events, since, settled + 0.001)["total"],
            "watch_notifications": sum(
                zk_metrics.watch_notifications(zk_events, since, settled + 0.001).values()
            ),
        }
    else:
        out["generation_conflicts"] = generation_conflicts(events)
    out["timeline"] = {"t_fault": round(since - run.t0, 3), **analysis.timeline(events, run.t0, until)}
    return out


def generation_conflicts(events: list[dict]) -> int:
    """S2 for the coordinator schemes: partitions assigned to two members under one generation."""
    owners: dict[tuple[int, str], set[str]] = {}
    for e in events:
        if e["ev"] == "assigned" and e.get("gen", -1) >= 0:
            for tp in e["partitions"]:
                owners.setdefault((e["gen"], tp), set()).add(e["member"])
    return sum(1 for members in owners.values() if len(members) > 1)


def fault_scenario(
    ctx: Context,
    name: str,
    *,
    each: Callable[[GroupRun], str | None] | None = None,
    shared: Callable[[dict[str, GroupRun]], None] | None = None,
    schemes: tuple[str, ...] | None = None,
    skip: dict[str, str] | None = None,
    run_options: Callable[[str], dict] | None = None,
    victim: str | None = None,
) -> dict[str, dict]:
    """Form a group per scheme, apply the fault (`each` per group, or `shared` once), settle,
    drain, stop, measure. `each` returns the victim's member name, if any."""
    chosen = [s for s in (schemes or ctx.schemes) if s in ctx.schemes or s == ONE_SYNC]
    skip = {**{s: why for s in chosen if (why := unsupported(s))}, **(skip or {})}
    results: dict[str, dict] = {s: {"skipped": why} for s, why in skip.items() if s in ctx.schemes}
    chosen = [s for s in chosen if s not in results]
    runs: dict[str, GroupRun] = {}
    faults: dict[str, float] = {}
    victims: dict[str, str | None] = {}

    def form(scheme: str) -> None:
        run = GroupRun(ctx.lab, name, scheme, ctx.settings, **(run_options(scheme) if run_options else {}))
        runs[scheme] = run
        run.start()
        if not run.wait_settled(timeout=60):
            raise TimeoutError(f"{scheme}: the group did not form within 60 s")

    def hit(scheme: str) -> None:
        faults[scheme] = runs[scheme].mark(name)
        victims[scheme] = each(runs[scheme]) if each else victim

    def settle(scheme: str) -> None:
        run = runs[scheme]
        settled = run.wait_settled()
        time.sleep(1.0)
        drain = run.mark("drain")  # ownership changes after this are the final shutdown's
        finished = run.finish()
        results[scheme] = measure(run, faults[scheme], finished, victims.get(scheme), settle_by=drain)
        results[scheme]["settled"] = settled

    cluster = (run_options(chosen[0]) if run_options and chosen else {}).get("cluster", "single")

    def counts() -> dict[str, int]:
        return zkstats.cluster_counts(ctx.lab.addresses(cluster))

    before = counts()
    ctx.progress(f"{name}: forming {len(chosen)} groups of {ctx.settings.workers}")
    failed = _parallel(form, chosen)
    time.sleep(ctx.settings.warmup_s)
    at_fault = counts()
    live = [s for s in chosen if s not in failed]
    ctx.progress(f"{name}: fault")
    if shared is not None:
        t = time.monotonic()
        for s in live:
            faults[s] = runs[s].mark(name)
            victims[s] = victim
        try:
            shared({s: runs[s] for s in live})
        except BaseException as exc:
            failed.update({s: exc for s in live})
            faults.update({s: t for s in live})
    else:
        failed.update(_parallel(hit, live))
    live = [s for s in live if s not in failed]
    ctx.progress(f"{name}: settling and draining")
    failed.update(_parallel(settle, live))
    after = counts()
    ctx.zk_server[name] = {
        "forming": zkstats.delta(at_fault, before),
        "fault_to_drained": zkstats.delta(after, at_fault),
        "watches_before_fault": at_fault.get("watches"),
        "watching_sessions_before_fault": at_fault.get("watching_sessions"),
    }
    for scheme, exc in failed.items():
        results[scheme] = {"error": f"{type(exc).__name__}: {exc}"}
        if scheme in runs:
            runs[scheme].close()
    return {s: results[s] for s in [*ctx.schemes, ONE_SYNC] if s in results}


def _pause_past_session(run: GroupRun) -> str:
    victim = run.live()[0]
    run.pause(victim)
    time.sleep(run.settings.session_ms / 1000 + 3.0)
    run.resume(victim)
    return victim


def _rolling(run: GroupRun) -> None:
    for member in list(run.live()):
        run.terminate(member)
        # A restarted process is away while it starts: the group handles its leave, then its join.
        # A fork of the launcher is back within milliseconds, so the group is let settle first.
        run.wait_settled(quiet_s=0.5)
        run.spawn(member)
        run.wait_settled(quiet_s=0.5)


def _add_partitions(run: GroupRun) -> None:
    run.store.add_partitions(run.topic, 2 * run.settings.partitions)


def cut_off(ctx: Context) -> dict:
    """A member cut off from the network (ZooKeeper and the coordinator) that still reads the log."""
    if os.geteuid() != 0:
        skip = "needs root: the cut is an iptables owner match on the member's group id"
        return {s: {"skipped": skip} for s in ctx.schemes}

    def cut(runs: dict[str, GroupRun]) -> None:
        rule = ["OUTPUT", "-m", "owner", "--gid-owner", str(CUT_GID), "-j", "DROP"]

        subprocess.run(["iptables", "-A", *rule], check=True)
        for run in runs.values():
            run.driver.emit("cut", victim="cut")
        try:
            time.sleep(ctx.settings.session_ms / 1000 + 4.0)
        finally:
            subprocess.run(["iptables", "-D", *rule], check=True)
            for run in runs.values():
                run.driver.emit("restored", victim="cut")

    return fault_scenario(
        ctx, "cut-off", shared=cut, victim="cut", run_options=lambda s: {"cut_victim": True}
    )


def coordinator_kill(ctx: Context) -> dict:
    killed: dict = {}

    def kill(runs: dict[str, GroupRun]) -> None:
        nodes = ctx.lab.nodes()
        node = ctx.lab.coordinator_of()
        killed["node"] = node
        if node is not None:
            nodes.kill(node)
        killed["restart"] = lambda: nodes.start_node(node) if node is not None else None

    out = fault_scenario(
        ctx,
        "coordinator-kill",
        shared=kill,
        skip={Scheme.ONE.value: "scheme one has no coordinator: nothing to kill"},
    )
    if killed.get("restart"):
        killed["restart"]()  # back to two nodes for the scenarios that follow
    for figures in out.values():
        if "skipped" not in figures and "error" not in figures:
            figures["killed_node"] = killed.get("node")
    return out


def follower_partition(ctx: Context) -> dict:
    """Scheme one: its split brain reproduced (faithful and with sync_before_read). Coordinator
    schemes: the coordinator's ZooKeeper session is on the follower cut from its quorum."""
    from experiments.split_brain import split_brains

    ens = ctx.lab.ensemble()
    results: dict[str, dict] = {}
    if Scheme.ONE.value in ctx.schemes:
        # faithful and with sync_before_read: two groups through one partition of the follower
        ctx.progress(f"follower-partition: scheme {Scheme.ONE.value} and {ONE_SYNC}")
        logs = ctx.lab.out / "logs" / "follower-partition"
        runs = {Scheme.ONE.value: (logs / Scheme.ONE.value, False), ONE_SYNC: (logs / ONE_SYNC, True)}
        try:
            for scheme, out in split_brains(ens, runs).items():
                results[scheme] = {
                    "s1": out["s1"],
                    "s2": {**out["s2"], "double_claimed": out["s2"]["double_claimed"]},
                    "conflicts": len(out["conflicts"]),
                    "unowned_partition_s": round(out["s3"], 3),
                    "stale_decisions": sum(1 for v in out["a_views"][1:] if v == ["g_a"]),
                }
        except Exception as exc:
            results.update({scheme: {"error": f"{type(exc).__name__}: {exc}"} for scheme in runs})
        finally:
            ens.heal()
    coordinator = [s for s in ctx.schemes if scheme_of(s) is not Scheme.ONE]
    if not coordinator:
        return results
    follower, leader = ens.followers()[0], ens.leader()
    chroot = f"/groupshift-exp-{ctx.lab.tag}-fp-{uuid.uuid4().hex[:4]}"
    zk = follower.connect_string + chroot
    nodes = ctx.lab.start_nodes(zk, 1, name="follower-partition", **NODE_OPTIONS)
    try:

        def options(scheme: str) -> dict:
            bootstrap = nodes.kafka_bootstrap if scheme_of(scheme).kafka else nodes.bootstrap
            return {"cluster": "ensemble", "zk": leader.connect_string + chroot, "bootstrap": bootstrap}

        def partition(runs: dict[str, GroupRun]) -> None:
            ens.partition(follower)
            try:
                for run in runs.values():  # a decision to make while the coordinator's view is cut off
                    run.spawn()
                time.sleep(ens.tick_ms / 1000 * 5 + 3.0)
            finally:
                ens.heal(follower)

        ctx.progress("follower-partition: coordinator schemes")
        more = fault_scenario(
            ctx, "follower-partition", shared=partition, schemes=tuple(coordinator), run_options=options
        )
        results.update(more)
    finally:
        nodes.close()
    return {s: results[s] for s in (Scheme.ONE.value, ONE_SYNC, *COORDINATOR_SCHEMES) if s in results}


def scale_up(ctx: Context) -> dict:
    from experiments.scale import ScaleSettings, run_scale
    from experiments.scale_kafka import run_kafka_scale

    sizes = [4, 8] if ctx.quick else [4, 8, 16, 32, 64]
    nodes = ctx.lab.nodes()
    own = [s for s in ctx.schemes if not Scheme(s).kafka]
    skipped = {s: {"skipped": why} for s in ctx.schemes if (why := unsupported(s))}
    kafka = [s for s in ctx.schemes if Scheme(s).kafka and s not in skipped]
    settings, logdir = ScaleSettings(), ctx.lab.out / "logs" / "scale-up"
    out: dict = {"settings": asdict(settings), "partitions": 2 * max(sizes), "schemes": {}}
    if own:
        out = run_scale(
            ctx.lab.chroot(),
            ctx.lab.host_port(),
            nodes.bootstrap,
            sizes,
            schemes=own,
            logdir=logdir,
            progress=ctx.progress,
            settings=settings,
        )
    if kafka:  # librdkafka members are processes, measured from their event logs
        out["schemes"] |= run_kafka_scale(
            ctx.lab,
            ctx.lab.host_port(),
            sizes,
            kafka,
            out["partitions"],
            logdir=logdir,
            progress=ctx.progress,
            session_ms=settings.session_ms,
            heartbeat_ms=settings.heartbeat_ms,
            timeout_s=settings.timeout_s,
        )
    out["schemes"] |= skipped
    return out


def _fault(name: str, description: str, **kw) -> Scenario:
    return Scenario(name, description, lambda ctx: fault_scenario(ctx, name, **kw))


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "scale-up",
            "Members join a group one by one up to N and all at once at N (N = 4 … 64); per join: time "
            "to stable, ZooKeeper requests and watch notifications (server side), members that "
            "rebalanced, and how long each member's kept partitions stopped.",
            scale_up,
            alone=True,
        ),
        _fault(
            "clean-leave",
            "One member of a consuming group leaves cleanly (SIGTERM: it closes its consumer).",
            each=lambda run: run.terminate(run.live()[-1]),
        ),
        _fault(
            "hard-kill",
            "One member of a consuming group is killed (SIGKILL): the group only learns it from its "
            "session timing out.",
            each=lambda run: run.kill(run.live()[-1]),
        ),
        _fault(
            "zombie",
            "One member is stopped (SIGSTOP) for longer than its session timeout, then woken up "
            "(SIGCONT): it goes on processing what it polled and commits, unless it is fenced.",
            each=_pause_past_session,
        ),
        Scenario(
            "cut-off",
            "One member is cut off from the network (ZooKeeper and the coordinator) for longer than "
            "its session timeout while it can still read the log, then reconnected.",
            cut_off,
        ),
        Scenario(
            "follower-partition",
            "A ZooKeeper follower of the 3-node ensemble is partitioned from its quorum. Scheme one: "
            "a member mid-rebalance reads its view through that follower while others join through "
            "the leader (faithful, and with sync before read). Coordinator schemes: the coordinator's "
            "ZooKeeper session is on that follower while a member joins.",
            follower_partition,
            cluster="ensemble",
        ),
        Scenario(
            "coordinator-kill",
            "The coordinator node of every group is killed (SIGKILL); the standby node takes its "
            "shard over from ZooKeeper.",
            coordinator_kill,
        ),
        _fault(
            "rolling-restart",
            "Every member is restarted in turn (SIGTERM; once the group has settled without it, a new "
            "process with the same name), waiting for the group to settle each time.",
            each=_rolling,
        ),
        _fault(
            "partitions-added",
            "The subscribed topic grows from P to 2P partitions while the group consumes it.",
            each=_add_partitions,
        ),
    )
}


def settings_of(ctx: Context) -> dict:
    return asdict(ctx.settings) | {"quick": ctx.quick, "schemes": list(ctx.schemes)}


def run_scenario(ctx: Context, name: str) -> dict:
    scenario = SCENARIOS[name]
    t = time.monotonic()
    schemes = scenario.run(ctx)
    if name == "scale-up":
        body = {
            "schemes": schemes["schemes"],
            "settings": schemes.get("settings", {}),
            "partitions": schemes.get("partitions"),
        }
    else:
        body = {"schemes": schemes, "settings": settings_of(ctx)}
        if name in ctx.zk_server:
            body["zk_server"] = ctx.zk_server.pop(name)
    return {"description": scenario.description, "wall_s": round(time.monotonic() - t, 1), **body}


def logs_of(out: Path, name: str) -> Path:
    return out / "logs" / name
