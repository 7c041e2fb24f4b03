"""The correctness gates in the benchmark: corruption onset → ``output_corruption``, and what the
gates cost the server at the defaults. Data and Markdown; pure."""

from __future__ import annotations

from dataclasses import dataclass

from .report import summarize

GATE_FAULTS = (  # (fault plugin trigger, label)
    ("logits_nan", "NaN in the logits"),
    ("logits_noise", "noise added to the logits"),
)


@dataclass(frozen=True)
class GateRun:
    fault: str
    onset_to_incident_s: float | None  # corruption switched on inside vLLM → incident; None: missed
    first_answer_to_incident_s: float | None = None  # the first corrupted forward pass → incident
    condition: str | None = None  # A | B | C | D
    level: str | None = None
    resolved_after_clear_s: float | None = None  # None: still open at the deadline
    other_incidents: tuple[str, ...] = ()
    config: str = ""  # which guardian config saw it (the fluent-wrong runs: defaults / user diagnostics)
    confirmation_rounds: int = 0  # quick rounds the guardian ran up to the incident (cumulative)


@dataclass(frozen=True)
class GateCostRow:
    interval_s: float
    requests_per_round: int
    round_server_s: tuple[float, ...]  # each measured round (idle server, requests one at a time)
    requests_per_hour: float
    server_seconds_per_hour: float
    share_of_capacity: float
    confirmations_per_episode: int = 0
    confirmation_server_s: float = 0.0


@dataclass(frozen=True)
class GatesSection:
    interval_s: float  # the gate interval of the detection runs
    runs: tuple[GateRun, ...]
    cost: GateCostRow | None
    false_rounds: int = 0  # failed gate rounds on the healthy server before the first fault
    healthy_rounds: int = 0
    fluent: FluentSection | None = None


@dataclass(frozen=True)
class FluentConfig:
    label: str  # defaults | user diagnostics
    interval_s: float
    diagnostics: tuple[str, ...]  # the configured L5 prompts (the built-in checks come on top)
    healthy_rounds: int = 0
    false_rounds: int = 0


@dataclass(frozen=True)
class FluentSection:
    """Fluent but wrong answers (``logits_permute``), watched by guardians of different configs at once."""

    configs: tuple[FluentConfig, ...]
    runs: tuple[GateRun, ...]
    permuted_tokens: int


def _s(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f} s"


def render_gates(g: GatesSection) -> list[str]:
    out = [
        "",
        f"### Output-correctness gates on the same real vLLM (gate round every {g.interval_s:g} s)",
        "",
        "| corruption injected (fault plugin, inside vLLM) | detected | onset→incident median | max | each run (s) "
        "| first corrupted answer→incident median | condition / level | resolved after the fault cleared "
        "| other incidents |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for fault, label in GATE_FAULTS:
        runs = [r for r in g.runs if r.fault == fault]
        if not runs:
            continue
        s = summarize([r.onset_to_incident_s for r in runs if r.onset_to_incident_s is not None])
        each = ", ".join("miss" if r.onset_to_incident_s is None else f"{r.onset_to_incident_s:.1f}" for r in runs)
        first = summarize([r.first_answer_to_incident_s for r in runs if r.first_answer_to_incident_s is not None])
        conds = ", ".join(sorted({f"{r.condition}/{r.level}" for r in runs if r.condition}))
        resolved = [r.resolved_after_clear_s for r in runs if r.resolved_after_clear_s is not None]
        res = f"{len(resolved)}/{len(runs)}" + (f", {_s(max(resolved))} max" if resolved else "")
        others = sorted({k for r in runs for k in r.other_incidents})
        out.append(
            f"| {label} (`{fault}`) | {s.n}/{len(runs)} | {_s(s.median)} | {_s(s.max)} | {each} "
            f"| {_s(first.median)} | {conds or '—'} "
            f"| {res} | {', '.join(others) or 'none'} |"
        )
    out += [
        "",
        "Onset = the corruption switched on inside vLLM (every answer garbage from then on); the server "
        "has no other traffic, so the first corrupted answer is the next gate round's: onset→incident "
        "includes the wait for that round (half an interval on average).",
        "",
        f"Healthy server before the first fault: {g.healthy_rounds} gate rounds, {g.false_rounds} failed.",
    ]
    if g.fluent is not None:
        out += render_fluent(g.fluent)
    if g.cost is not None:
        c = g.cost
        s = summarize(list(c.round_server_s))
        out += [
            "",
            f"What the gates cost the server at the defaults (a round every {c.interval_s:g} s, "
            f"{c.requests_per_round} completions per round; round measured {s.n}× on the idle server, "
            f"median {1000 * (s.median or 0):.0f} ms, max {1000 * (s.max or 0):.0f} ms): "
            f"{c.requests_per_hour:.0f} requests and {c.server_seconds_per_hour:.1f} server-seconds per hour, "
            f"{100 * c.share_of_capacity:.3f} % of one server's capacity (goal ≤ 1 %). A failing round adds at most "
            f"{c.confirmations_per_episode} quick confirmation rounds ({c.confirmation_server_s:.2f} server-seconds), "
            "only while something fails.",
        ]
    return out


def render_fluent(f: FluentSection) -> list[str]:
    out = [
        "",
        f"### Fluent but wrong (`logits_permute`: {f.permuted_tokens} whole-word tokens rotated by one place "
        "inside vLLM's logits processor — finite, as confident, plain words; only the answers change)",
        "",
        "| guardian config | round every | detected | onset→incident median | max | each run (s) | condition / level "
        "| resolved after the fault cleared | healthy rounds before (failed) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in f.configs:
        runs = [r for r in f.runs if r.config == c.label]
        s = summarize([r.onset_to_incident_s for r in runs if r.onset_to_incident_s is not None])
        each = ", ".join("miss" if r.onset_to_incident_s is None else f"{r.onset_to_incident_s:.1f}" for r in runs)
        conds = ", ".join(sorted({f"{r.condition}/{r.level}" for r in runs if r.condition}))
        resolved = [r.resolved_after_clear_s for r in runs if r.resolved_after_clear_s is not None]
        res = f"{len(resolved)}/{len(runs)}" + (f", {_s(max(resolved))} max" if resolved else "")
        out.append(
            f"| {c.label} ({len(c.diagnostics)} configured diagnostic(s) + the built-in checks) | {c.interval_s:g} s "
            f"| {s.n}/{len(runs)} | {_s(s.median)} | {_s(s.max)} | {each} | {conds or '—'} | {res} "
            f"| {c.healthy_rounds} ({c.false_rounds}) |"
        )
    out += [
        "",
        "Both guardians watch the same server at once; the fault is switched on at a random phase of their "
        "round schedules. Onset→incident = the wait for the next scheduled round (uniform over the interval) "
        "plus the quick confirmation rounds.",
    ]
    return out
