"""output_corruption: the server answers, but with garbage. Conditions A-D over the gates.

Reads ``view.gates`` (a ``LedgerView``: the target's judged gate rounds and the
external reports about it, ``vllm_guardian.gates.ledger``). With the config block
``detectors.output_corruption``:

- **A** ``l1_l2_failures`` or more L1 (format) / L2 (perplexity) failures within the
  last ``l1_l2_window`` seconds;
- **B** any L3 (distribution) failure: in the latest round, or reported within the hold;
- **C** L4 (agreement) failed ``l4_rounds`` judged rounds in a row (reports count as
  failed rounds at their time); when every one of them was only *ambiguous* (two
  instances split, no baseline) the finding is ``alert_only``;
- **D** L5 (known answers) failed ``l5_rounds`` judged rounds in a row.

A condition that held at some record within the *hold* (``max(l1_l2_window, 3 x
round interval)``) keeps the finding up while the newest record still fails, so
an incident does not flap between rounds; a clean round lets it resolve.

``health_score`` condenses the same records into 0..100 (100: nothing wrong seen).

The finding's signals carry what explains it (``evidence``): the model and vLLM version,
and per failing prompt of the latest failing round the answer, its tokens and logprobs and
the baseline it was judged against (``gates.evidence``); ``failing_rounds`` lists the
failures of the rounds that made the condition.

What the finding rests on: ``own_conditions`` are the conditions that hold on the
guardian's own failures alone (its rounds, without reports and without L4 failures that
only other nodes' fingerprints or autodiscovered local servers make); ``external`` names the
external sources among the records (``report``, ``peers``, ``local_peers``);
``confirmed_by_own_round`` says whether a round of the guardian's own failed after the first
external record. Remediation reads them
(``remediation/external.py``): external evidence is a hint, not a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vllm_guardian.config.schema_detectors import DetectorsConfig, OutputCorruptionConfig
from vllm_guardian.gates.judge import GateFailure
from vllm_guardian.gates.ledger import LedgerView
from vllm_guardian.model import Finding, Kind, Severity
from vllm_guardian.detectors.view import TargetView

KIND = Kind.OUTPUT_CORRUPTION
ORDER = ("B", "A", "D", "C")  # which condition names the incident when several hold
LEVEL_OF = {"B": "L3", "C": "L4", "D": "L5"}


@dataclass(frozen=True)
class Condition:
    name: str  # A | B | C | D
    level: str
    sample: GateFailure
    count: int  # failures (A) or rounds in a row (C, D); 1 for B
    alert_only: bool = False


def hold_seconds(view: LedgerView, c: OutputCorruptionConfig) -> float:
    return max(c.l1_l2_window, 3 * view.interval)


def _failures(view: LedgerView, until: float, levels: tuple[str, ...]) -> list[tuple[float, GateFailure]]:
    out = [(r.t, f) for r in view.rounds if r.t <= until for f in r.failures if f.level in levels]
    out += [(rep.t, rep.failure) for rep in view.reports if rep.t <= until and rep.failure.level in levels]
    return sorted(out, key=lambda x: x[0])


def _streak(view: LedgerView, until: float, level: str, need: int) -> Condition | None:
    """The last ``need`` judged outcomes of ``level`` (rounds + reports) all failed?"""
    events: list[tuple[float, GateFailure | None, bool]] = []  # (t, failure or None, ambiguous)
    for r in view.rounds:
        if r.t <= until and level in r.judged:
            failed = [f for f in r.failures if f.level == level]
            events.append((r.t, failed[0] if failed else None, r.ambiguous and bool(failed)))
    for rep in view.reports:
        if rep.t <= until and rep.failure.level == level:
            events.append((rep.t, rep.failure, False))
    events.sort(key=lambda e: e[0])
    last = events[-need:]
    if len(last) < need or any(f is None for _, f, _ in last):
        return None
    sample = last[-1][1]
    assert sample is not None
    cond = "C" if level == "L4" else "D"
    return Condition(cond, level, sample, need, alert_only=all(amb for _, _, amb in last))


def conditions_at(view: LedgerView, t: float, c: OutputCorruptionConfig) -> list[Condition]:
    """Every condition that holds with the records up to time ``t``."""
    out: list[Condition] = []
    recent = [(ft, f) for ft, f in _failures(view, t, ("L1", "L2")) if ft > t - c.l1_l2_window]
    if len(recent) >= c.l1_l2_failures:
        sample = recent[-1][1]
        out.append(Condition("A", sample.level, sample, len(recent)))
    rounds = [r for r in view.rounds if r.t <= t]
    l3 = [f for f in rounds[-1].failures if f.level == "L3"] if rounds else []
    hold = hold_seconds(view, c)
    l3 += [rep.failure for rep in view.reports if t - hold < rep.t <= t and rep.failure.level == "L3"]
    if l3:
        out.append(Condition("B", "L3", l3[-1], 1))
    for level, need in (("L4", c.l4_rounds), ("L5", c.l5_rounds)):
        cond = _streak(view, t, level, need)
        if cond is not None:
            out.append(cond)
    return sorted(out, key=lambda x: ORDER.index(x.name))


def _latest_failed(view: LedgerView) -> bool:
    last_round = view.rounds[-1] if view.rounds else None
    last_report = view.reports[-1] if view.reports else None
    if last_report is not None and (last_round is None or last_report.t >= last_round.t):
        return True
    return bool(last_round and last_round.failures)


def active_conditions(view: LedgerView, now: float, c: OutputCorruptionConfig) -> list[Condition]:
    """The conditions now, or — while the records since the last clean round all fail — the
    latest that held within the hold. A clean round ends the hold: a failure after it starts
    afresh (it must meet a condition on its own), whatever held before."""
    now_conds = conditions_at(view, now, c)
    if now_conds or not _latest_failed(view):
        return now_conds
    hold = hold_seconds(view, c)
    clean = {r.t for r in view.rounds if not r.failures} - {r.t for r in view.reports}
    times = sorted({r.t for r in view.rounds} | {r.t for r in view.reports}, reverse=True)
    for t in times:
        if t < now - hold or t in clean:
            break
        held = conditions_at(view, t, c)
        if held:
            return held
    return []


def health_score(view: LedgerView | None, now: float, c: OutputCorruptionConfig) -> int | None:
    """0..100 from the recent records; None when the gates have seen nothing of the target."""
    if view is None or view.empty:
        return None
    hold = hold_seconds(view, c)
    score = 100.0
    l12 = [f for ft, f in _failures(view, now, ("L1", "L2")) if ft > now - hold]
    score -= min(40, 8 * len(l12))
    if any(cond.name == "B" for cond in conditions_at(view, now, c)):
        score -= 50
    for level in ("L4", "L5"):
        streak = 0
        for r in reversed(view.rounds):
            if level not in r.judged:
                continue
            if not any(f.level == level for f in r.failures):
                break
            streak += 1
        streak += sum(1 for rep in view.reports if rep.t > now - hold and rep.failure.level == level)
        score -= min(45, 15 * streak)
    if active_conditions(view, now, c):
        score = min(score, 20)
    return int(max(0, min(100, round(score))))


def own_view(view: LedgerView) -> LedgerView:
    """The records without external evidence: no reports, no failure resting on peers."""
    rounds = tuple(replace(r, failures=tuple(f for f in r.failures if f.source == "own")) for r in view.rounds)
    return LedgerView(rounds, (), view.interval)


def provenance(view: LedgerView, now: float, c: OutputCorruptionConfig) -> dict[str, object]:
    """``own_conditions``, ``external`` and ``confirmed_by_own_round`` (see the module doc)."""
    hold = hold_seconds(view, c)
    ext: list[tuple[float, str]] = [(r.t, "report") for r in view.reports if r.t > now - hold]
    ext += [(r.t, f.source) for r in view.rounds if r.t > now - hold for f in r.failures if f.source != "own"]
    first = min((t for t, _ in ext), default=None)
    confirmed = first is not None and any(
        r.t >= first and any(f.source == "own" for f in r.failures) for r in view.rounds
    )
    return {
        "own_conditions": [x.name for x in active_conditions(own_view(view), now, c)],
        "external": sorted({src for _, src in ext}),
        "confirmed_by_own_round": confirmed,
    }


def evaluate(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    gates, c = view.gates, cfg.output_corruption
    if gates is None or gates.empty:
        return None
    now = view.now
    conds = active_conditions(gates, now, c)
    if not conds:
        return None
    main = conds[0]
    alert_only = all(x.alert_only for x in conds)
    what = {
        "A": f"{main.count} L1/L2 failures within {c.l1_l2_window:g}s",
        "B": "L3 distribution failure",
        "C": f"L4 disagreement {main.count} rounds in a row"
        + (" (two instances split, no baseline: alert only)" if alert_only else ""),
        "D": f"L5 known answer wrong {main.count} rounds in a row",
    }[main.name]
    s = main.sample
    summary = f"output corruption, condition {main.name}: {what}: {s.check} on {s.prompt[:40]!r}"
    if s.output:
        summary += f" -> {s.output[:40]!r}"
    signals = {
        "level": main.level,
        "condition": main.name,
        "conditions": [x.name for x in conds],
        "levels": sorted({x.level for x in conds}),
        "sample": s.to_dict(),
        "count": main.count,
        "alert_only": alert_only,
        "health_score": health_score(gates, now, c),
        **provenance(gates, now, c),
    }
    signals.update(_evidence(gates, now, main.count))
    return Finding(
        kind=KIND, target=view.name, severity=Severity.CRITICAL, summary=summary, signals=signals, confirmed=True
    )


MAX_ROUNDS_SHOWN = 5


def _evidence(view: LedgerView, now: float, count: int) -> dict[str, object]:
    """The model, the vLLM version and the answers of the latest failing rounds."""
    failing = [r for r in view.rounds if r.failures][-max(1, min(count, MAX_ROUNDS_SHOWN)) :]
    latest = failing[-1] if failing else None
    out: dict[str, object] = {
        "model": latest.model if latest else None,
        "vllm_version": latest.version if latest else None,
        "evidence": list(latest.evidence) if latest else [],
        "failing_rounds": [
            {"age_s": round(now - r.t, 1), "failures": [f.to_dict() for f in r.failures[:10]]} for r in failing
        ],
    }
    reports = [rep for rep in view.reports][-MAX_ROUNDS_SHOWN:]
    if reports:
        out["reports"] = [
            {"age_s": round(now - rep.t, 1), "source": rep.source, "failure": rep.failure.to_dict()} for rep in reports
        ]
    return out
