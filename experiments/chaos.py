"""The chaos runner: random joins, leaves, kills, pauses, coordinator restarts and ZooKeeper server
restarts on the 3-node ensemble while records are produced and consumed, then every record checked.

    plan = schedule(seed=7, duration_s=300)          # reproducible: the same seed, the same actions
    results = run_chaos(lab, ["two", "three-eager"], plan, progress=print)
    results["two"]["lost"], results["two"]["duplicate_committed"], results["two"]["max_owners_at_commit"]

Every scheme's group (its own topic) gets the same actions at the same moments, on the same
ensemble and coordinator nodes. When the faults end, the producers stop, every fault is undone and
the groups drain side by side until the drain deadline (`drain_timeout_s`, by default
`default_drain_timeout(duration)`); then every member is stopped (SIGTERM, SIGKILL after a grace)
whether the groups drained or not. Coordinator schemes must lose nothing, commit no output twice,
never have two owners commit one partition, drain before the deadline and leave no member
unrecovered (`verdict`); scheme one's figures are reported. The actions are drawn from the seed
before the run starts, so a run can be repeated; the timing of what the group does in between is
the real system's.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from core.errors import GroupshiftError
from core.scheme import Scheme
from experiments import analysis
from experiments.harness import GroupRun, Lab, RunSettings
from experiments.scenarios import measure
from experiments.worker import scheme_of

ACTIONS = ("join", "leave", "kill", "pause", "coordinator-restart", "zookeeper-restart")
WEIGHTS = (3, 2, 2, 1, 1, 1)
MAX_DURATION_S = 3600.0
MAX_DRAIN_S = 3600.0
STOP_GRACE_S = 15.0  # members still running this long after SIGTERM are killed
LISTED = 8  # partitions / members named in a verdict line; the JSON has them all


class ChaosError(GroupshiftError):
    """A chaos run could not start (a group did not form)."""


def default_drain_timeout(duration_s: float) -> float:
    """60 s plus half the fault window (the backlog grows with it), at most 15 minutes."""
    return min(900.0, 60.0 + duration_s / 2)


@dataclass(frozen=True)
class Action:
    at_s: float
    kind: str
    pick: float  # which member / node / server, as a fraction of the candidates at that moment

    def as_list(self) -> list:
        return [round(self.at_s, 2), self.kind, round(self.pick, 3)]


def schedule(seed: int, duration_s: float, every_s: tuple[float, float] = (2.0, 4.0)) -> list[Action]:
    """The actions of a run, drawn from `seed`: one every 2–4 s, none in the last 3 s."""
    rng = random.Random(seed)
    out, t = [], rng.uniform(*every_s)
    while t < duration_s - 3.0:
        out.append(Action(t, rng.choices(ACTIONS, WEIGHTS)[0], rng.random()))
        t += rng.uniform(*every_s)
    return out


def _pick(candidates: list, fraction: float):
    return candidates[min(len(candidates) - 1, int(fraction * len(candidates)))] if candidates else None


class Chaos:
    """Applies a schedule to several groups at once, and undoes every fault at the end."""

    def __init__(self, lab: Lab, runs: dict[str, GroupRun], settings: RunSettings, progress):
        self.lab, self.runs, self.settings, self.progress = lab, runs, settings, progress
        self.ensemble = lab.ensemble()
        self.nodes = lab.nodes("ensemble") if any(scheme_of(s) is not Scheme.ONE for s in runs) else None
        self.timers: list[threading.Timer] = []
        self.done: list[list] = []
        self._down_server = None

    def apply(self, action: Action) -> None:
        kind, target = action.kind, ""
        members = sorted(set.intersection(*(set(r.live()) for r in self.runs.values())))
        if kind == "join" and len(members) < self.settings.partitions:
            target = f"c{len(self.done)}"
            for run in self.runs.values():
                run.spawn(target)
        elif kind in ("leave", "kill", "pause") and len(members) > 2:
            victim = _pick(members, action.pick)
            for run in self.runs.values():
                if kind == "leave":
                    threading.Thread(target=run.terminate, args=(victim,), daemon=True).start()
                elif kind == "kill":
                    run.kill(victim)
                else:
                    run.pause(victim)
            if kind == "pause":
                self._later(self.settings.session_ms / 1000 + 1.0, self._resume, victim)
            target = victim
        elif kind == "coordinator-restart" and self.nodes is not None:
            alive = [n for n, p in self.nodes.nodes.items() if p.alive]
            if len(alive) == len(self.nodes.nodes):
                node = _pick(sorted(alive), action.pick)
                self.nodes.kill(node)
                self._later(2.0, self.lab.restart_node, self.nodes, node)
                target = f"node {node}"
            else:
                target = "skipped: a node is still restarting"
        elif kind == "zookeeper-restart" and self._down_server is None:
            server = _pick(sorted(self.ensemble.servers), action.pick)
            self._down_server = self.ensemble.servers[server]
            self._down_server.stop()
            self._later(3.0, self._restart_server)
            target = f"zk{server}"
        else:
            target = "skipped"
        self.done.append([round(action.at_s, 2), kind, target])
        self.progress(f"chaos t={action.at_s:5.1f}s {kind} {target}")

    def _later(self, delay: float, fn, *args) -> None:
        timer = threading.Timer(delay, fn, args)
        timer.daemon = True
        self.timers.append(timer)
        timer.start()

    def _resume(self, victim: str) -> None:
        for run in self.runs.values():
            if victim in run.live():
                run.resume(victim)

    def _restart_server(self) -> None:
        if self._down_server is not None:
            self._down_server.start()
            self._down_server = None

    def cancel(self) -> None:
        """Drop the undo steps not yet due (`heal` does them all at once)."""
        for timer in self.timers:
            timer.cancel()

    def heal(self) -> None:
        self.cancel()
        for timer in self.timers:
            timer.join(35)  # one already running: a node restart waits up to 30 s to listen
        for run in self.runs.values():
            for member in run.live():
                run.resume(member)  # SIGCONT on a running process is harmless
        self._restart_server()
        self.ensemble.wait_quorum(60)
        if self.nodes is not None:
            for node_id, proc in list(self.nodes.nodes.items()):
                if not proc.alive:
                    self.lab.restart_node(self.nodes, node_id)


def _listed(items: list[str]) -> str:
    return ", ".join(items[:LISTED]) + (f" and {len(items) - LISTED} more" if len(items) > LISTED else "")


def verdict(figures: dict) -> list[str]:
    """What a coordinator scheme must never do, one line each; empty when it held."""
    bad = []
    if figures.get("lost"):
        bad.append(f"{figures['lost']} records lost")
    if figures.get("duplicate_committed"):
        bad.append(f"{figures['duplicate_committed']} outputs committed twice")
    if two := figures.get("two_owner_partitions"):
        bad.append(f"{len(two)} partitions with two committing owners: {_listed(two)}")
    elif figures.get("max_owners_at_commit", 0) > 1:
        bad.append(f"{figures['double_owner_commits']} commits by a second owner of a partition")
    if behind := figures.get("not_drained"):
        within = f" within {figures['drain_timeout_s']:g} s" if figures.get("drain_timeout_s") else ""
        lags = [f"{tp} ({n} behind)" for tp, n in behind.items()]
        bad.append(f"{len(behind)} partitions not drained{within}: {_listed(lags)}")
    elif not figures.get("drained", True):
        bad.append("the group did not consume to the end of the log")
    if stuck := figures.get("unrecovered"):
        who = [f"{m['member']} ({m['reason']})" for m in stuck]
        bad.append(f"{len(stuck)} members never recovered: {_listed(who)}")
    return bad


def drain(runs: dict[str, GroupRun], ends: dict[str, dict], deadline: float, poll_s: float = 0.5) -> dict:
    """Wait until every group committed to its log ends, or the deadline. Per scheme: the
    monotonic time it drained, or None."""
    drained: dict[str, float | None] = dict.fromkeys(runs)
    while True:
        for s, run in runs.items():
            if drained[s] is None and not analysis.behind(ends[s], run.committed_ends()):
                drained[s] = time.monotonic()
        if all(t is not None for t in drained.values()) or time.monotonic() >= deadline:
            return drained
        next(iter(runs.values())).lab.sleep(min(poll_s, deadline - time.monotonic()))


def run_chaos(
    lab: Lab,
    schemes: list[str],
    duration_s: float,
    seed: int,
    settings: RunSettings,
    progress=lambda s: None,
    drain_timeout_s: float | None = None,
) -> dict:
    plan = schedule(seed, duration_s)
    drain_s = default_drain_timeout(duration_s) if drain_timeout_s is None else drain_timeout_s
    out: dict = {
        "seed": seed,
        "duration_s": duration_s,
        "drain_timeout_s": drain_s,
        "planned": [a.as_list() for a in plan],
        "schemes": {},
    }
    runs: dict[str, GroupRun] = {}
    chaos = None
    try:
        for s in schemes:
            runs[s] = GroupRun(lab, "chaos", s, settings, cluster="ensemble")
        for run in runs.values():
            run.start(3)
        for s, run in runs.items():
            if not run.wait_settled(timeout=60):
                raise ChaosError(f"{s}: the group did not form within 60 s; see {run.logdir}")
        chaos = Chaos(lab, runs, settings, progress)
        t0 = time.monotonic()
        marks = {s: r.mark("chaos", seed=seed) for s, r in runs.items()}
        for action in plan:
            lab.sleep(max(0.0, t0 + action.at_s - time.monotonic()))
            chaos.apply(action)
        lab.sleep(max(0.0, t0 + duration_s - time.monotonic()))
        t_end = time.monotonic()
        ends = {s: run.stop_producing() for s, run in runs.items()}
        progress(f"chaos: faults over; producers stopped, healing, then draining for at most {drain_s:g} s")
        chaos.heal()
        for run in runs.values():
            if not run.live():
                run.spawn("last")
        drained = drain(runs, ends, t_end + drain_s)
        states = {}
        for s, run in runs.items():  # before the members stop: who is alive and working
            events = run.events()
            lagging = analysis.behind(ends[s], run.committed_ends(events))
            states[s] = {
                "drain": run.mark("drain"),
                "settled": run.settled(events),
                "not_drained": lagging,
                "unrecovered": analysis.unrecovered(events, run.live(), t_end, lagging),
            }
            if lagging:
                progress(f"chaos: {s} did not drain within {drain_s:g} s: {_listed(list(lagging))}")
        stop_by = time.monotonic() + STOP_GRACE_S
        for run in runs.values():
            run.signal_stop()
        for run in runs.values():
            run.stop_all(deadline=stop_by)
        for s, run in runs.items():
            state = states[s]
            finished = {"ends": ends[s], "drained": not state["not_drained"]}
            figures = measure(run, marks[s], finished, settle_by=state["drain"], upto=run.committed_ends())
            figures["settled"] = state["settled"]
            figures["drain_timeout_s"] = drain_s
            figures["time_to_drain_s"] = None if drained[s] is None else round(drained[s] - t_end, 2)
            figures["not_drained"] = state["not_drained"]
            figures["unrecovered"] = state["unrecovered"]
            figures["verdict"] = verdict(figures) if scheme_of(s) is not Scheme.ONE else []
            out["schemes"][s] = figures
        out["actions"] = chaos.done
    finally:
        if chaos is not None:
            chaos.cancel()
        for run in runs.values():
            run.close()
    return out


def parse_duration(text: str) -> float:
    """`90`, `90s`, `5m`, `1h` → seconds (between 1 s and an hour; also the drain timeout's bounds)."""
    units = {"s": 1, "m": 60, "h": 3600}
    t = text.strip().lower()
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise ValueError(f"duration {text!r} is not a number of seconds or a number with s, m or h") from None
    if not 1 <= value <= MAX_DURATION_S:
        raise ValueError(f"duration {text!r} must be between 1s and 1h")
    return value
