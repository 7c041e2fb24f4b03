"""Remediation on a real vLLM in the benchmark: fault onset → serving again, phase by phase,
beside vLLM's own start. Data and Markdown; pure (phases come from the incident's actions,
``benchmarks.recovery.phases``)."""

from __future__ import annotations

from dataclasses import dataclass, field

PHASES = ("detection", "evidence", "drain", "stop", "release", "start", "ready")


@dataclass(frozen=True)
class RestartRun:
    fault: str
    kind: str
    own_start_s: float  # the replaced server's own spawn → /health 200
    phases: dict[str, float | None] = field(default_factory=dict)  # PHASES + open_to_start, onset_to_serving
    outcome: str = ""  # the incident's end: "resolved", or what went wrong


def _f(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def render_restarts(runs: tuple[RestartRun, ...]) -> list[str]:
    if not runs:
        return []
    out = [
        "",
        "### Restart of a real vLLM by the guardian (command mode), phase by phase (seconds)",
        "",
        "| fault | incident | " + " | ".join(PHASES) + " | incident → replacement start | onset → serving again "
        "| vLLM's own start | the guardian's share | outcome |",
        "|---|---|" + "---:|" * (len(PHASES) + 4) + "---|",
    ]
    for r in runs:
        p = r.phases
        total = p.get("onset_to_serving")
        serving = None if p.get("start") is None or p.get("ready") is None else (p["start"] or 0) + (p["ready"] or 0)
        share = None if total is None or serving is None else total - serving
        out.append(
            f"| {r.fault} | `{r.kind}` | "
            + " | ".join(_f(p.get(x)) for x in PHASES)
            + f" | {_f(p.get('open_to_start'))} | {_f(total)} | {_f(r.own_start_s)} | {_f(share)} | {r.outcome} |"
        )
    out += [
        "",
        "Each phase ends when its action is stamped on the incident; evidence runs beside drain and stop. "
        "The guardian's share = onset → serving again minus the replacement's start and ready phases "
        "(what vLLM itself takes to come up).",
    ]
    return out
