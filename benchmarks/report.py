"""The benchmark's measurements as data, the arithmetic on them, and the Markdown table.

Pure: parsers of /proc text, summaries, and ``render_markdown(report)``; no I/O.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .report_gates import GatesSection
    from .report_restart import RestartRun

FAULTS = (  # (plugin trigger, incident kind the guardian must open, label)
    ("busy_loop", "busy_loop", "busy loop in EngineCore.step"),
    ("stall", "engine_stall", "EngineCore blocked on a lock"),
    ("die", "engine_dead", "EngineCore os._exit"),
)


# ---------------------------------------------------------------- /proc text
def parse_stat_cpu_ticks(text: str) -> int:
    """utime + stime (clock ticks) from the text of /proc/<pid>/stat (comm may hold spaces and parens)."""
    fields = text[text.rfind(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of the whole line


def parse_vmrss(text: str) -> int | None:
    """VmRSS in bytes from the text of /proc/<pid>/status; None for a zombie/kernel thread."""
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def cpu_percent(ticks_before: int, ticks_after: int, wall_s: float, clk_tck: int) -> float:
    """CPU used over a wall interval, in percent of one core."""
    if wall_s <= 0:
        raise ValueError("wall_s must be > 0")
    return 100.0 * (ticks_after - ticks_before) / clk_tck / wall_s


# ---------------------------------------------------------------- measurements
@dataclass(frozen=True)
class Summary:
    n: int
    median: float | None
    max: float | None


def probe_costs(before: dict, after: dict) -> tuple[ProbeCost, ...]:
    """Per-probe cost between two ``guardian status --json`` "probes" maps (runs and mean duration
    since the guardian started): the runs and the mean duration of the runs in between."""
    out = []
    for name in sorted(after):
        a, b = after[name], before.get(name, {"runs": 0, "mean_duration_s": 0.0})
        runs = int(a["runs"]) - int(b["runs"])
        spent_after = float(a["mean_duration_s"] or 0.0) * int(a["runs"])
        spent_before = float(b["mean_duration_s"] or 0.0) * int(b["runs"])
        total = spent_after - spent_before
        out.append(ProbeCost(name, runs, max(0.0, total) / runs if runs > 0 else 0.0))
    return tuple(out)


def summarize(values: list[float]) -> Summary:
    if not values:
        return Summary(0, None, None)
    return Summary(len(values), statistics.median(values), max(values))


@dataclass(frozen=True)
class FaultRun:
    fault: str  # plugin trigger
    kind: str  # the incident kind expected
    onset_to_incident_s: float | None  # None: not detected before the deadline
    incidents: tuple[str, ...] = ()  # kinds open when the run was judged (should be just `kind`)
    after_clear: tuple[str, ...] = ()  # kinds opened after the fault was cleared (misclassifications)
    liveness_probes: int = 0  # /health probes sent during the observation
    liveness_failures: int = 0
    liveness_fired_after_s: float | None = None  # onset -> the 3rd consecutive failure; None: never
    observed_s: float = 0.0

    @property
    def detected(self) -> bool:
        return self.onset_to_incident_s is not None


@dataclass(frozen=True)
class Negative:
    scenario: str
    seconds: float
    incidents: tuple[str, ...]
    note: str = ""


@dataclass(frozen=True)
class ProbeCost:
    name: str
    runs: int
    mean_duration_s: float


@dataclass(frozen=True)
class Overhead:
    window_s: float
    cpu_percent: float
    rss_mean_bytes: float
    rss_max_bytes: int
    children_cpu_percent: float  # the guardian's children (the embedded Redis)
    ticks: int
    last_tick_s: float | None
    max_tick_s: float | None
    probes: tuple[ProbeCost, ...] = ()


@dataclass(frozen=True)
class Report:
    runs: int
    vllm_version: str
    host: str
    wall_s: float
    server_starts_s: tuple[float, ...]
    fault_runs: tuple[FaultRun, ...]
    negatives: tuple[Negative, ...]
    overhead: Overhead | None
    period_s: float = 10.0
    threshold: int = 3
    notes: tuple[str, ...] = field(default_factory=tuple)
    gates: GatesSection | None = None
    restarts: tuple[RestartRun, ...] = ()


# ---------------------------------------------------------------- rendering
def _s(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f} s"


def _mib(x: float) -> str:
    return f"{x / (1 << 20):.1f} MiB"


def _other_incident(kind: str, runs: list[FaultRun]) -> str:
    during = sum(kind in x.incidents for x in runs)
    after = sum(kind in x.after_clear for x in runs)
    return f"{kind} ({during} during, {after} after clear)"


def _liveness(runs: list[FaultRun], period: float, threshold: int) -> str:
    fired = [r.liveness_fired_after_s for r in runs if r.liveness_fired_after_s is not None]
    probes = sum(r.liveness_probes for r in runs)
    failures = sum(r.liveness_failures for r in runs)
    if not fired:
        return f"never fired: {failures} failures in {probes} probes over {len(runs)} runs"
    s = summarize(fired)
    return (
        f"fired in {len(fired)}/{len(runs)} runs, {_s(s.median)} median / {_s(s.max)} max after onset "
        f"({failures} failures in {probes} probes)"
    )


def render_markdown(r: Report) -> str:
    lines = [
        f"### Detection on a real vLLM {r.vllm_version} (CPU build, tiny random Llama), {r.runs} runs per fault",
        "",
        f"Host: {r.host}. Onset = the first request after the fault plugin's trigger. "
        f"Guardian defaults (1 s tick, canary every 10 s with a 5 s timeout). "
        f"Kubernetes-style liveness = `GET /health` every {r.period_s:g} s, 1 s timeout, "
        f"failure threshold {r.threshold}, polled during the same runs.",
        "",
        "| fault injected | incident | detected | onset→incident median | max | each run (s) | "
        "other incidents | liveness probe on /health |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for fault, kind, label in FAULTS:
        runs = [x for x in r.fault_runs if x.fault == fault]
        if not runs:
            continue
        s = summarize([x.onset_to_incident_s for x in runs if x.onset_to_incident_s is not None])
        each = ", ".join("miss" if x.onset_to_incident_s is None else f"{x.onset_to_incident_s:.1f}" for x in runs)
        others = sorted({k for x in runs for k in (*x.incidents, *x.after_clear) if k != kind})
        other_txt = "none" if not others else ", ".join(_other_incident(k, runs) for k in others)
        lines.append(
            f"| {label} | `{kind}` | {s.n}/{len(runs)} | {_s(s.median)} | {_s(s.max)} | {each} | "
            f"{other_txt} | {_liveness(runs, r.period_s, r.threshold)} |"
        )
    lines += ["", "| negative scenario | observed | incidents (false positives) |", "|---|---|---|"]
    for scenario in dict.fromkeys(n.scenario for n in r.negatives):
        group = [n for n in r.negatives if n.scenario == scenario]
        notes = "; ".join(n.note for n in group if n.note)
        secs = [n.seconds for n in group]
        seen = "" if len(group) == 1 else f"{len(group)} runs, "
        span = f"{secs[0]:.0f} s" if len(group) == 1 else f"{min(secs):.0f}–{max(secs):.0f} s each"
        kinds = [k for n in group for k in n.incidents]
        lines.append(
            f"| {scenario}{f' ({notes})' if notes else ''} | {seen}{span} | {len(kinds)}"
            f"{'' if not kinds else ': ' + ', '.join(kinds)} |"
        )
    if r.overhead is not None:
        o = r.overhead
        lines += [
            "",
            f"Guardian cost while watching one real server ({o.window_s:.0f} s idle, /proc/<guardian pid>/stat): "
            f"CPU {o.cpu_percent:.2f} % of one core (+{o.children_cpu_percent:.2f} % for its children: the "
            f"embedded Redis), RSS {_mib(o.rss_mean_bytes)} mean / {_mib(o.rss_max_bytes)} max; "
            f"{o.ticks} ticks in the window; last tick {_ms(o.last_tick_s)}, slowest since start "
            f"{_ms(o.max_tick_s)}.",
            "",
            "| probe (guardian status --json, runs in the idle window) | runs | mean duration | per tick |",
            "|---|---|---|---|",
        ]
        for p in o.probes:
            per_tick = p.mean_duration_s * p.runs / o.ticks if o.ticks else 0.0
            lines.append(f"| {p.name} | {p.runs} | {_ms(p.mean_duration_s)} | {_ms(per_tick)} |")
    if r.server_starts_s:
        s = summarize(list(r.server_starts_s))
        lines += [
            "",
            f"vLLM server start (spawn → /health 200): {_s(s.median)} median, {_s(s.max)} max "
            f"over {s.n} starts; whole benchmark {r.wall_s / 60:.1f} min.",
        ]
    if r.gates is not None:
        from .report_gates import render_gates  # here: that module builds on this one's summaries

        lines += render_gates(r.gates)
    if r.restarts:
        from .report_restart import render_restarts

        lines += render_restarts(r.restarts)
    if r.notes:
        lines += [""] + [f"- {note}" for note in r.notes]
    return "\n".join(lines).rstrip() + "\n"


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{1000 * x:.2f} ms"
