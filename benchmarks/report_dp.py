"""The data-parallel section of the benchmark: a hang in one rank of a real DP=2 vLLM while the
other serves (``dp_runs``). Markdown only; pure."""

from __future__ import annotations

from .dp_runs import DP_FAULTS, RankRun, named_right
from .report import summarize

LABELS = {"busy_loop": "busy loop in one rank's EngineCore.step", "stall": "one rank's EngineCore blocked on a lock"}


def _s(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f} s"


def render_dp(runs: tuple[RankRun, ...], start_s: float | None = None) -> list[str]:
    if not runs:
        return []
    out = [
        "",
        "### Data parallel (`--data-parallel-size 2`): one rank hung while the other serves",
        "",
        "Onset = the hang began inside `EngineCore_DP<k>` (the fault plugin's marker; 4 clients of load "
        "running over both ranks). The load goes on during the run: the other rank serves it.",
        "",
        "| fault injected | incident | detected | onset→incident median | max | each run (s) | "
        "names the rank and its engine | how confirmed | served by the other rank meanwhile | other incidents |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for fault, kind in DP_FAULTS:
        group = [r for r in runs if r.fault == fault]
        if not group:
            continue
        s = summarize([r.onset_to_incident_s for r in group if r.onset_to_incident_s is not None])
        each = ", ".join("miss" if r.onset_to_incident_s is None else f"{r.onset_to_incident_s:.1f}" for r in group)
        named = sum(named_right(r) for r in group)
        reasons = ", ".join(sorted({str(r.signals.get("reason")) for r in group if r.signals}))
        served = ", ".join(str(r.served_meanwhile) for r in group)
        others = sorted({k for r in group for k in r.incidents if k != kind})
        out.append(
            f"| {LABELS.get(fault, fault)} | `{kind}` | {s.n}/{len(group)} | {_s(s.median)} | {_s(s.max)} | {each} | "
            f"{named}/{len(group)} | {reasons or '—'} | {served} | {', '.join(others) or 'none'} |"
        )
    if start_s is not None:
        out += ["", f"The DP=2 server's start (spawn → /health 200): {start_s:.1f} s."]
    return out
