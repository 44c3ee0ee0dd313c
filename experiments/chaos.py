"""The chaos runner: random joins, leaves, kills, pauses, coordinator restarts and ZooKeeper server
restarts on the 3-node ensemble while records are produced and consumed, then every record checked.

    plan = schedule(seed=7, duration_s=300)          # reproducible: the same seed, the same actions
    results = run_chaos(lab, ["two", "three-eager"], plan, progress=print)
    results["two"]["lost"], results["two"]["duplicate_committed"], results["two"]["max_owners_at_commit"]

Every scheme's group (its own topic) gets the same actions at the same moments, on the same
ensemble and coordinator nodes. Coordinator schemes must lose nothing, commit no output twice and
never have two owners commit one partition (`verdict`); scheme one's duplicates and conflicts are
reported. The actions are drawn from the seed before the run starts, so a run can be repeated; the
timing of what the group does in between is the real system's.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from experiments.harness import GroupRun, Lab, RunSettings
from experiments.scenarios import measure

ACTIONS = ("join", "leave", "kill", "pause", "coordinator-restart", "zookeeper-restart")
WEIGHTS = (3, 2, 2, 1, 1, 1)
MAX_DURATION_S = 3600.0


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
        self.nodes = lab.nodes("ensemble") if any(not s.startswith("one") for s in runs) else None
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
                self._later(2.0, self.nodes.start_node, node)
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

    def heal(self) -> None:
        for timer in self.timers:
            timer.join(10)
        for run in self.runs.values():
            for member in run.live():
                run.resume(member)  # SIGCONT on a running process is harmless
        self._restart_server()
        self.ensemble.wait_quorum(60)
        if self.nodes is not None:
            for node_id, proc in self.nodes.nodes.items():
                if not proc.alive:
                    self.nodes.start_node(node_id)


def verdict(figures: dict) -> list[str]:
    """What a coordinator scheme must never do; empty when it held."""
    bad = []
    if figures.get("lost"):
        bad.append(f"{figures['lost']} records lost")
    if figures.get("duplicate_committed"):
        bad.append(f"{figures['duplicate_committed']} outputs committed twice")
    if figures.get("max_owners_at_commit", 0) > 1:
        bad.append(f"{figures['double_owner_commits']} commits by a second owner of a partition")
    if not figures.get("drained", True):
        bad.append("the group did not consume to the end of the log")
    return bad


def run_chaos(
    lab: Lab, schemes: list[str], duration_s: float, seed: int, settings: RunSettings, progress=lambda s: None
) -> dict:
    plan = schedule(seed, duration_s)
    runs = {s: GroupRun(lab, "chaos", s, settings, cluster="ensemble") for s in schemes}
    out: dict = {
        "seed": seed,
        "duration_s": duration_s,
        "planned": [a.as_list() for a in plan],
        "schemes": {},
    }
    chaos = None
    try:
        for run in runs.values():
            run.start(3)
        for s, run in runs.items():
            if not run.wait_settled(timeout=60):
                raise TimeoutError(f"{s}: the group did not form within 60 s")
        chaos = Chaos(lab, runs, settings, progress)
        t0 = time.monotonic()
        marks = {s: r.mark("chaos", seed=seed) for s, r in runs.items()}
        for action in plan:
            time.sleep(max(0.0, t0 + action.at_s - time.monotonic()))
            chaos.apply(action)
        time.sleep(max(0.0, t0 + duration_s - time.monotonic()))
        progress("chaos: healing every fault, then draining")
        chaos.heal()
        for s, run in runs.items():
            if not run.live():
                run.spawn("last")
            settled = run.wait_settled(timeout=90)
            drain = run.mark("drain")
            finished = run.finish()
            figures = measure(run, marks[s], finished, settle_by=drain)
            figures["settled"] = settled
            figures["verdict"] = verdict(figures) if not s.startswith("one") else []
            out["schemes"][s] = figures
        out["actions"] = chaos.done
    finally:
        for run in runs.values():
            run.close()
        if chaos is not None:
            chaos.heal()
    return out


def parse_duration(text: str) -> float:
    """`90`, `90s`, `5m`, `1h` → seconds (between 1 s and an hour)."""
    units = {"s": 1, "m": 60, "h": 3600}
    t = text.strip().lower()
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise ValueError(f"duration {text!r} is not a number of seconds or a number with s, m or h") from None
    if not 1 <= value <= MAX_DURATION_S:
        raise ValueError(f"duration {text!r} must be between 1s and 1h")
    return value
