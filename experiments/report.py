"""An experiment run's `results.json` as PNG plots and a REPORT.md that reads on its own:

    write_report(json.loads(Path("out/results.json").read_text()), Path("out"))  # REPORT.md, plots/*.png

Any scenario, scheme or row may be missing or carry `{"skipped": reason}` / `{"error": message}` instead of
figures: the report says so in words and goes on. Plots are drawn on matplotlib's Agg canvas (no display).
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import re
import statistics
import textwrap
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.extras import require
from core.scheme import Scheme
from experiments.worker import ONE_SYNC, scheme_of

# Scheme (and run) names -> labels, in the report's order: scheme one's sync_before_read run after it.
SCHEMES = {
    Scheme.ONE.value: Scheme.ONE.label,
    ONE_SYNC: "one + sync before read",
    **{s.value: s.label for s in Scheme if s is not Scheme.ONE},
}
MAX_SCHEMES, MAX_PARTITIONS = 8, 16
DASH = "–"

GLOSSARY = f"""\
**How to read this.** Every scenario runs the same consumer group under each rebalancing scheme on a real
ZooKeeper. Scale-up measures one member joining a stable group of N − 1 (*one by one*, how a group
grows) and N members starting together (*all at once*); a fault scenario injects one fault into a
consuming, committing group and counts what it cost from the members' own processing logs.

* **H1 rebalance fan-out**: members that had to take part in one member's join (N = the whole group).
* **H2 watch notifications per event**, **H3 ZooKeeper requests per round**: what the ZooKeeper server
  sent and received because of one join, until the group was stable again (server side).
* **H4 stop-the-world pause**: per member already in the group, how long it could not consume the
  partitions it kept through the join (0 = it never stopped).
* **H5 time to stable**: from the join or fault until every partition has one owner and no rebalance runs.
* **S1 conflicts**: scheme one's failed ownership claims (partition still owned by another member) and
  the rebalance attempts that failed because of them.
* **S2 decision disagreement**: members deciding from different views of the group: partitions two
  members decided to own (*double-claimed*) or none did (*unclaimed*).
* **S3 unowned partition-seconds**: time without an active owner after the fault, summed over partitions.
* **S4 double ownership / consumption**: seconds two members both believed they owned a partition (summed
  over partitions); **duplicates**: extra processings (a record processed twice counts 1).
* **S5 offset regressions**: commits that moved a partition's committed offset backwards, in the order
  they took effect as the members' logs show it; for scheme one also in ZooKeeper's own write order
  (each offset znode's `mzxid`), which also counts a write that landed twice.
* **S6 zombie lifetime**: how long a replaced member went on believing it held a partition after another
  took it over, and the records it processed meanwhile.
* **duplicate committed**: duplicates whose output was committed (visible downstream); **lost**: records
  with no committed output; **double-owner commits**: successful commits of a partition after another
  member had also committed it successfully while the committer believed it held it (*max owners at a
  commit* above 1: two owners acted on one partition); **fenced commits**: commits refused as the member
  no longer owned the partition, or whose outcome is unknown (a timeout) — the consumer delivers those
  records again (the protection working, not a failure). Times: ms without decimals, s with two;
  {DASH}: not measured.
"""

Column = tuple[str, tuple[str, ...], str]  # header, path into an entry, kind: s, ms, raw, else a count


def _columns(spec: str) -> list[Column]:
    """ "header: dotted.path; ...": a key ending in _s is seconds, in _ms milliseconds; lists count items."""
    kinds = {"seed": "raw", "faults": "raw"}
    pairs = [[x.strip() for x in c.split(":")] for c in spec.replace("\n", " ").split(";") if c.strip()]
    return [(h, tuple(p.split(".")), kinds.get(p.split(".")[-1], p.rpartition("_")[2])) for h, p in pairs]


FAULT_TABLES = {
    "Correctness": _columns("""records: records; processed: processed; duplicates (S4): duplicates;
        duplicate committed: duplicate_committed; lost: lost; double-owner commits: double_owner_commits;
        max owners at a commit: max_owners_at_commit;
        offset regressions (S5): offset_regressions;
        S5 in ZooKeeper (mzxid order): zk_offset_regressions; commits: commits;
        fenced commits: fenced_commits"""),
    "Availability and coordination": _columns("""time to stable (H5), s: time_to_stable_s;
        unowned partition-s (S3): unowned_partition_s; double ownership, s (S4): double_ownership_s;
        zombie lifetime, s (S6): zombie.lifetime_s;
        zombie records: zombie.records; zombie commits accepted: zombie.commits_accepted;
        zombie commits refused: zombie.commits_refused; S1 conflicts: s1.conflicts;
        S1 failed attempts: s1.failed_attempts; S2 views: s2.views; S2 double-claimed: s2.double_claimed;
        S2 unclaimed: s2.unclaimed; stale decisions: stale_decisions;
        S2 (one generation, two owners): generation_conflicts; ZK requests: zk.requests;
        ZK watch notifications: zk.watch_notifications"""),
}
CHAOS_COLUMNS = _columns("""duration, s: duration_s; seed: seed; records: records; lost: lost;
    duplicate committed: duplicate_committed; partitions with two committing owners: two_owner_partitions;
    double-owner commits: double_owner_commits; time to drain, s: time_to_drain_s;
    partitions not drained: not_drained; members never recovered: unrecovered; faults injected: faults""")
SCALE_TABLES = _columns("""time to stable (H5), ms: time_to_stable_ms; ZooKeeper requests (H3): zk_requests;
    watch notifications (H2): watch_notifications""")
LARGEST_N = _columns("""H1 fan-out: fanout; H2 watch notifications: watch_notifications;
    H3 ZK requests: zk_requests; H4 median pause, ms: median_pause_ms; H4 max pause, ms: max_pause_ms;
    H5 time to stable, ms: time_to_stable_ms; watches at rest: watches_at_rest;
    S1 conflicts (all at once): s1_conflicts""")
# Scale-up plots against N, one file each named after the key: key, y label, title.
VS_N = [
    ("time_to_stable_ms", "time to stable (ms, log scale)", "H5: time until the group is stable"),
    ("zk_requests", "ZooKeeper requests (server side)", "H3: ZooKeeper requests per round"),
    ("watch_notifications", "watch notifications (server side)", "H2: watch notifications per event"),
]
SCALE_READINGS = [  # row key, kind, sentence on the largest vs the smallest value, topic when close
    ("time_to_stable_ms", "ms", "{hi} needs {r} the time of {lo} to be stable", "time to stable"),
    ("zk_requests", "int", "{hi} causes {r} the ZooKeeper requests of {lo}", "ZooKeeper requests"),
    ("max_pause_ms", "ms", "the longest pause is {r} longer under {hi} than under {lo}", "longest pause"),
]
BAD_THINGS = [
    ("duplicate_committed", "committed duplicate outputs"),
    ("lost", "lost records"),
    ("double_owner_commits", "committed while another member owned the partition"),
]


def label(scheme: str) -> str:
    return SCHEMES.get(scheme, scheme)


def _ordered(schemes: Any) -> list[str]:
    """Known schemes in the canonical order, then any others as they come."""
    keys = list(schemes) if isinstance(schemes, dict) else []
    return [s for s in SCHEMES if s in keys] + [s for s in keys if s not in SCHEMES]


def _problem(entry: Any) -> str | None:
    """Why `entry` carries no figures ("skipped: ...", "error: ..."), or None when it does."""
    found = [f"{k}: {entry[k]}" for k in ("skipped", "error") if k in _dict(entry)]
    return found[0] if found else (None if isinstance(entry, dict) else "missing")


def _get(entry: Any, path: tuple[str, ...]) -> Any:
    return functools.reduce(lambda e, key: _dict(e).get(key), path, entry)


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _fmt(x: Any, kind: str) -> str:
    if isinstance(x, list | tuple | dict):  # S2's partition lists, chaos's lagging partitions: how many
        return str(len(x))
    if x is None or isinstance(x, bool):
        return DASH if x is None else ("yes" if x else "no")
    v = _num(x)
    if v is None or kind == "raw":
        return str(x)
    return f"{v:,.2f}" if kind == "s" else f"{v:,.0f}"  # counts and ms: no decimals


def _nums(xs: Any) -> list[float]:
    return [v for v in map(_num, xs if isinstance(xs, list) else []) if v is not None]


def _natural(s: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "scenario"


def _table(header: list[str], rows: list[list[str]]) -> str:
    cells = [header, ["---"] * len(header), *rows]
    return "\n".join(
        "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in r) + " |" for r in cells
    )


def _dict(x: Any) -> dict:
    return x if isinstance(x, dict) else {}


def _is_scale(name: str, scenario: dict) -> bool:
    schemes = _dict(scenario.get("schemes")).values()
    return name == "scale-up" or any("one_by_one" in _dict(v) or "all_at_once" in _dict(v) for v in schemes)


def _rows(scenario: dict, scheme: str, mode: str) -> dict[int, dict]:
    """The good rows of a scale-up scheme by N (rows with an error left out)."""
    rows = _get(scenario, ("schemes", scheme, mode))
    return {r["n"]: r for r in rows or [] if isinstance(r, dict) and "n" in r and "error" not in r}


def _figure(**kwargs: Any) -> Any:
    require("matplotlib", "experiments")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    return FigureCanvasAgg(Figure(**kwargs)).figure


def _save(fig: Any, path: Path, top: float = 1.0) -> Path:
    fig.tight_layout(rect=(0, 0, 1, top))
    # tight_layout leaves a placeholder layout engine behind, for which savefig draws the figure
    # once more before drawing it to the file: the same pixels, 1/6 of the report's time
    fig.set_layout_engine(None)
    fig.savefig(path, dpi=110)
    return path


def _palette(keys: list[str]) -> dict[str, Any]:
    """A colour per key, none of them red (red marks two owners)."""
    from matplotlib import colormaps

    name, red = ("tab10", {3}) if len(keys) <= 9 else ("tab20", {6, 7})
    colors = [c for i, c in enumerate(colormaps[name].colors) if i not in red]
    return {k: colors[i % len(colors)] for i, k in enumerate(keys)}


def _plot_vs_n(scenario: dict, key: str, ylabel: str, title: str, path: Path) -> Path | None:
    schemes = _ordered(scenario.get("schemes"))
    color = _palette(list(dict.fromkeys([*SCHEMES, *schemes])))
    ax = (fig := _figure(figsize=(8, 5))).add_subplot()
    seen: list[tuple[int, float]] = []
    for scheme, (mode, style) in itertools.product(schemes, (("one_by_one", "-"), ("all_at_once", "--"))):
        pts = sorted((n, _num(r.get(key))) for n, r in _rows(scenario, scheme, mode).items())
        if pts := [(n, v) for n, v in pts if v is not None]:
            seen += pts
            lbl = label(scheme) if style == "-" else None
            ax.plot(*zip(*pts, strict=True), style, marker="o", color=color[scheme], label=lbl)
    if not seen:
        return None
    ax.set_xscale("log")  # N doubles: evenly spaced; the ticks are the Ns themselves
    ax.set_xticks(ns := sorted({n for n, _ in seen}), [str(n) for n in ns])
    ax.minorticks_off()
    ax.set_yscale("log") if min(v for _, v in seen) > 0 else ax.set_yscale("symlog", linthresh=1)
    ax.plot([], [], "k-", label="one by one (a join)")
    ax.plot([], [], "k--", label="all at once (N start)")
    ax.set(xlabel="group size N (members, log scale)", ylabel=ylabel, title=title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _plot_pauses(scenario: dict, path: Path) -> Path | None:
    """Per scheme, a box and the points of `pauses_ms` of its one-by-one join at the largest N it reached."""
    data: dict[str, tuple[int, list[float]]] = {}
    for scheme in _ordered(scenario.get("schemes")):
        if rows := {n: r for n, r in _rows(scenario, scheme, "one_by_one").items() if "pauses_ms" in r}:
            data[scheme] = (n := max(rows), _nums(rows[n]["pauses_ms"]))
    if not data:
        return None
    ax = (fig := _figure(figsize=(8, 5))).add_subplot()
    jitter, color = random.Random(0), _palette(list(dict.fromkeys([*SCHEMES, *data])))
    for i, (scheme, (_, pauses)) in enumerate(data.items()):
        if pauses:
            ax.boxplot([pauses], positions=[i], widths=0.5, showfliers=False)
            xs = [i + jitter.uniform(-0.18, 0.18) for _ in pauses]
            ax.scatter(xs, pauses, s=14, alpha=0.7, color=color[scheme], zorder=3)
    ticks = [f"{textwrap.fill(label(s), 18)}\nN = {n}" for s, (n, _) in data.items()]
    ax.set_xticks(range(len(data)), ticks, fontsize=8)
    if max((max(p) for _, p in data.values() if p), default=0.0) > 1000:
        ax.set_yscale("symlog", linthresh=10)
    ax.set(ylim=(0, None), ylabel="pause per member (ms)", title="H4: pause during a join (one by one)")
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)


def _plot_timeline(name: str, scenario: dict, path: Path) -> Path | None:
    tls = {s: _dict(_get(scenario, ("schemes", s, "timeline"))) for s in _ordered(scenario.get("schemes"))}
    if not (schemes := dict([(s, t) for s, t in tls.items() if t.get("intervals")][:MAX_SCHEMES])):
        return None
    held = [iv for tl in schemes.values() for ivs in tl["intervals"].values() for iv in ivs]
    members = sorted({iv[0] for iv in held}, key=_natural)
    color = _palette(members)
    rows = [min(MAX_PARTITIONS, len(tl["intervals"])) for tl in schemes.values()]
    fig = _figure(figsize=(11, 1.2 + sum(0.28 * h + 0.6 for h in rows)))
    axes = fig.subplots(len(rows), 1, sharex=True, squeeze=False, height_ratios=[h + 2 for h in rows])[:, 0]
    for ax, (scheme, tl) in zip(axes, schemes.items(), strict=True):
        parts = sorted(tl["intervals"], key=_natural)
        shown = parts[:MAX_PARTITIONS]
        for y, tp in enumerate(shown):
            for member, a, b in tl["intervals"][tp]:
                ax.broken_barh([(a, max(b - a, 0.0))], (y - 0.35, 0.7), facecolor=color[member])
        for tp, a, b in (o for o in tl.get("overlaps") or [] if o[0] in shown):
            bar = (shown.index(tp) - 0.45, 0.9)
            ax.broken_barh([(a, max(b - a, 0.0))], bar, facecolor="red", edgecolor="darkred", lw=1.5)
        if _num(tl.get("t_fault")) is not None:
            ax.axvline(tl["t_fault"], color="black", ls="--", lw=1)
        ax.set_yticks(range(len(shown)), shown, fontsize=7)
        more = f" (first {len(shown)} of {len(parts)} partitions)" if len(parts) > len(shown) else ""
        ax.set_title(label(scheme) + more, fontsize=9, loc="left")
        ax.set(ylim=(len(shown) - 0.5, -0.5), ylabel="partition")
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1].set_xlabel("seconds since the scenario started")
    keys = [*color.items(), ("two owners", "red")]
    handles = [axes[0].broken_barh([], (0, 1), facecolor=c, label=k) for k, c in keys]
    handles += axes[0].plot([], [], "k--", label="fault")
    fig.legend(handles=handles, loc="upper right", fontsize=8, ncols=min(len(handles), 8))
    fig.suptitle(f"{name}: who held each partition", x=0.01, ha="left", fontsize=11)
    return _save(fig, path, top=1 - 0.4 / fig.get_figheight())


def plot_files(results: dict, out: Path) -> list[Path]:
    """Draw every plot the results allow into `out/plots/`; returns the PNGs written."""
    (plots := Path(out) / "plots").mkdir(parents=True, exist_ok=True)
    jobs: list[tuple[Callable[..., Path | None], tuple]] = []
    for name, sc in _dict(results.get("scenarios")).items():
        if _problem(sc):
            continue
        if _is_scale(name, sc):
            jobs += [(_plot_vs_n, (sc, k, y, t, plots / f"{k.removesuffix('_ms')}.png")) for k, y, t in VS_N]
            jobs.append((_plot_pauses, (sc, plots / "join_pause.png")))
        else:
            jobs.append((_plot_timeline, (name, sc, plots / f"timeline-{_slug(name)}.png")))
    written = []
    for job, args in jobs:
        try:
            if (path := job(*args)) is not None:
                written.append(path)
        except Exception as exc:  # a malformed corner of the results must not cost the whole report
            warnings.warn(f"report: plot {args[-1].name} failed: {exc!r}", stacklevel=2)
    return written


def _who(entries: dict[str, Any], key: str, what: str) -> str:
    """ "only **X** committed duplicate outputs (12)" / "no scheme ..." over the schemes with figures."""
    hits = {s: v for s, e in entries.items() if (v := _num(_dict(e).get(key))) is not None}
    if not (bad := {s: v for s, v in hits.items() if v > 0}):
        return f"no scheme {what}" if hits else ""
    if len(bad) == 1:
        return f"{'only ' if len(hits) > 1 else ''}**{label(*bad)}** {what} ({sum(bad.values()):,.0f})"
    every = "every scheme" if len(bad) == len(hits) else f"{len(bad)} schemes"
    return f"{every} {what}: " + ", ".join(f"**{label(s)}** {v:,.0f}" for s, v in bad.items())


def _ratio(values: dict[str, float | None], kind: str, template: str, topic: str) -> str:
    """`template` ("{hi} needs {r} the time of {lo}") for the largest and the smallest positive value."""
    vals = {s: v for s, v in values.items() if v is not None and v > 0}
    if len(vals) < 2:
        return ""
    hi, lo = max(vals, key=vals.get), min(vals, key=vals.get)
    numbers = f"({_fmt(vals[hi], kind)} vs {_fmt(vals[lo], kind)}{ {'ms': ' ms', 's': ' s'}.get(kind, '') })"
    if vals[hi] < 1.5 * vals[lo]:
        return f"{topic}: every scheme within 1.5× of the others {numbers}"
    r = f"{vals[hi] / vals[lo]:,.{1 if vals[hi] < 10 * vals[lo] else 0}f}×"
    return template.format(hi=f"**{label(hi)}**", lo=f"**{label(lo)}**", r=r) + f" {numbers}"


def _reading(parts: list[str], prefix: str = "") -> list[str]:
    return [f"*Reading:* {prefix}{'; '.join(p for p in parts if p)}."] if any(parts) else []


def _problems(entries: dict[str, Any], extra: list[str] | None = None) -> list[str]:
    lines = [f"- **{label(s)}**: {p}" for s, e in entries.items() if (p := _problem(e))] + (extra or [])
    return ["Not measured:\n\n" + "\n".join(lines)] if lines else []


def _image(plots: list[Path], name: str, alt: str) -> str:
    """The image if it was drawn (plot_files writes them all to plots/ beside REPORT.md)."""
    return f"![{alt}](plots/{name})" if any(Path(p).name == name for p in plots) else ""


def _scale_section(sc: dict, plots: list[Path]) -> list[str]:
    schemes = _ordered(sc.get("schemes"))
    modes = {"one_by_one": "One by one (a member joins N − 1)", "all_at_once": "All at once (N start)"}
    md: list[str] = []
    for mode, what in modes.items():
        rows = {s: r for s in schemes if (r := _rows(sc, s, mode))}
        ns = sorted({n for r in rows.values() for n in r})
        for title, path, kind in SCALE_TABLES if ns else []:
            cells = [[str(n), *(_fmt(_get(r.get(n), path), kind) for r in rows.values())] for n in ns]
            md += [f"**{what}: {title}**", _table(["N", *map(label, rows)], cells)]
    errors = [
        f"- **{label(s)}** ({m.replace('_', ' ')}, N = {r.get('n', '?')}): error: {r['error']}"
        for s, m in itertools.product(schemes, modes)
        for r in _get(sc, ("schemes", s, m)) or []
        if "error" in _dict(r)
    ]
    md += _problems({s: sc["schemes"][s] for s in schemes}, errors)
    obo = {s: _rows(sc, s, "one_by_one") for s in schemes}
    if (big := max((n for r in obo.values() for n in r), default=None)) is not None:
        at = {s: dict(r[big]) for s, r in obo.items() if big in r}
        for s, r in at.items():
            r["median_pause_ms"] = statistics.median(p) if (p := _nums(r.get("pauses_ms"))) else None
            r["s1_conflicts"] = _get(_rows(sc, s, "all_at_once").get(big), ("conflicts", "conflicts"))
        md += [f"**At the largest N = {big}, one join:**", _scheme_table(at, LARGEST_N)]
        readings = [_ratio({s: _num(r.get(k)) for s, r in at.items()}, *how) for k, *how in SCALE_READINGS]
        md += _reading(readings, f"for one join at N = {big}, ")
    images = [(f"{k.removesuffix('_ms')}.png", t) for k, _, t in VS_N]
    images.append(("join_pause.png", "H4: pause in a join"))
    return md + [_image(plots, n, alt) for n, alt in images]


def _scheme_table(good: dict[str, Any], columns: list[Column]) -> str:
    """One row per scheme, one column per metric some scheme has."""
    if not (cols := [c for c in columns if any(_get(e, c[1]) is not None for e in good.values())]):
        return ""
    rows = [[label(s), *(_fmt(_get(e, path), kind) for _, path, kind in cols)] for s, e in good.items()]
    return _table(["scheme", *(c[0] for c in cols)], rows)


def _schemes_section(raw: Any, tables: dict[str, list[Column]]) -> list[str]:
    """A table per group of columns, what was not measured, a reading."""
    entries = {s: raw[s] for s in _ordered(raw)}
    good = {s: e for s, e in entries.items() if not _problem(e)}
    md = [x for t, cols in tables.items() if (tb := _scheme_table(good, cols)) for x in (f"**{t}**", tb)]
    md += _problems(entries) if good else ["No scheme produced figures here.", *_problems(entries)]
    tts = {s: _num(e.get("time_to_stable_s")) for s, e in good.items()}
    settle = _ratio(tts, "s", "{hi} took {r} the time of {lo} to settle", "time to settle")
    return md + _reading([_who(good, k, what) for k, what in BAD_THINGS] + [settle])


def _chaos_section(chaos: Any) -> list[str]:
    if problem := _problem(chaos):
        return [f"Chaos run {problem}."]

    def faults(actions: Any) -> str | None:  # [[t, "kill", "m3"], ...] as "kill ×2, pause ×1"
        kinds = Counter(a[1] for a in actions or [] if isinstance(a, list | tuple) and len(a) > 1)
        return ", ".join(f"{k} ×{n}" for k, n in kinds.most_common()) or None

    entries = {s: e if _problem(e) else {**e, "faults": faults(e.get("actions"))} for s, e in chaos.items()}
    intro = (
        "Random faults (joins, leaves, kills, pauses, coordinator and ZooKeeper restarts) injected over a "
        "fixed duration from a fixed seed; then the producers stop, every fault is undone and the groups "
        "drain until the drain timeout. *Time to drain*: from the end of the faults until every partition "
        f"was committed to its log end ({DASH}: not within the timeout)."
    )
    return [intro, *_schemes_section(entries, {"What they cost": CHAOS_COLUMNS}), *_verdicts(entries)]


def _verdicts(entries: dict[str, Any]) -> list[str]:
    """Per scheme with figures: its verdict, the partitions that did not drain (how far behind) and the
    members that never recovered."""
    lines = []
    for s in _ordered(entries):
        e = entries[s]
        if _problem(e):
            continue
        bad = [str(v) for v in e.get("verdict") or []]
        judged = (
            "reported, not judged"
            if scheme_of(s) is Scheme.ONE
            else ("FAILED: " + "; ".join(bad) if bad else "held")
        )
        lines.append(f"- **{label(s)}**: {judged}.")
        if lag := _dict(e.get("not_drained")):
            within = (
                f" within {_fmt(e.get('drain_timeout_s'), 's')} s" if _num(e.get("drain_timeout_s")) else ""
            )
            parts = ", ".join(
                f"{tp} ({_fmt(n, 'count')} behind)" for tp, n in list(lag.items())[:MAX_PARTITIONS]
            )
            lines.append(f"  Not drained{within}: {parts}{' …' if len(lag) > MAX_PARTITIONS else ''}.")
        if stuck := [m for m in e.get("unrecovered") or [] if isinstance(m, dict)]:
            who = "; ".join(f"{m.get('member')}: {m.get('reason')}" for m in stuck[:MAX_PARTITIONS])
            lines.append(f"  Never recovered: {who}{' …' if len(stuck) > MAX_PARTITIONS else ''}.")
    return ["**Verdicts**\n\n" + "\n".join(lines)] if lines else []


def _zk_server_line(zk: dict) -> str:
    """ZooKeeper's own counters around the scenario, every scheme's groups together."""
    forming, fault = _dict(zk.get("forming")), _dict(zk.get("fault_to_drained"))
    return (
        "ZooKeeper server side, every group of the scenario together (`mntr`, `wchc`): forming the groups "
        f"took {forming.get('requests', '-')} requests and {forming.get('watch_notifications', '-')} watch "
        f"notifications; from the fault until drained, {fault.get('requests', '-')} requests and "
        f"{fault.get('watch_notifications', '-')} watch notifications; {zk.get('watches_before_fault', '-')} "
        f"watches on {zk.get('watching_sessions_before_fault', '-')} sessions were held before the fault."
    )


def render_markdown(results: dict, plots: list[Path], out: Path) -> str:
    """REPORT.md's text for `out/REPORT.md`: run facts, glossary, a section per scenario, the chaos run.
    It links the `plots` drawn (plot_files) as `plots/<name>.png`, relative to `out`."""
    md = ["# groupshift experiments: rebalancing schemes compared on real ZooKeeper"]
    keys = {"started": "started", "wall time, s": "wall_s", "quick run": "quick"}
    facts = [[h, _fmt(results.get(k), "s" if k == "wall_s" else "raw")] for h, k in keys.items()]
    facts += [[f"{k} version", str(v)] for k, v in _dict(results.get("versions")).items()]
    md.append(_table(["run", "value"], facts))
    if settings := _dict(results.get("settings")):
        rows = [[k, json.dumps(v)] for k, v in settings.items()]
        md += ["**Settings**", _table(["setting", "value"], rows)]
    md += [GLOSSARY, "Schemes: " + "; ".join(f"**{label(s)}** (`{s}`)" for s in SCHEMES) + "."]
    for name, sc in _dict(results.get("scenarios")).items():
        md.append(f"## {name}")
        if problem := _problem(sc):
            md.append(f"Scenario {problem}.")
            continue
        md.append(sc["description"] if isinstance(sc.get("description"), str) else "")
        facts = [f"wall time {_fmt(sc['wall_s'], 's')} s"] if _num(sc.get("wall_s")) is not None else []
        facts += [f"{k} = {json.dumps(v)}" for k, v in _dict(sc.get("settings")).items()]
        md.append("*" + "; ".join(facts) + "*" if facts else "")
        if _is_scale(name, sc):
            md += _scale_section(sc, plots)
            continue
        md += _schemes_section(_dict(sc.get("schemes")), FAULT_TABLES)
        if zk := _dict(sc.get("zk_server")):
            md.append(_zk_server_line(zk))
        md.append(_image(plots, f"timeline-{_slug(name)}.png", f"{name}: partition ownership over time"))
    if "chaos" in results:
        md += ["## chaos", *_chaos_section(results["chaos"])]
    return "\n\n".join(b.strip("\n") for b in md if b.strip()) + "\n"


def write_report(results: dict, out: Path) -> list[Path]:
    """Write `out/REPORT.md` and `out/plots/*.png`; returns the files written (the report last)."""
    (out := Path(out)).mkdir(parents=True, exist_ok=True)
    plots = plot_files(results, out)
    (report := out / "REPORT.md").write_text(render_markdown(results, plots, out), encoding="utf-8")
    return [*plots, report]
