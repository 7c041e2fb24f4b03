"""Does vLLM's own fault-tolerance round excuse a hang finding? (``--enable-fault-tolerance``)

Reads the engines the server says are in a round (DIAGNOSING / UNHEALTHY: ``TargetState.recovering``,
within vLLM's ``engine_recovery_timeout_sec`` of 120 s plus ``lifecycle.recovery_grace`` from when the
guardian saw the round begin) and those whose round outlasted that (``overdue``). Decides:

- a finding about an engine in its round is no finding (the engine waits for vLLM's instructions:
  no progress by design, and a restart would fight vLLM's own recovery); a finding that names another
  data-parallel rank (``dp_rank``) is kept; one that names none is excused while any engine is in a
  round (the round is the likelier cause);
- a finding about an engine whose round outlasted its deadline is judged, and says so in its summary
  and signals (``vllm_phase: recovering_overdue``, ``round_s``).
"""

from __future__ import annotations

from dataclasses import replace

from vllm_guardian.detectors.view import TargetView
from vllm_guardian.model import Finding


def _concerns(finding: Finding, engines: dict[int, float]) -> list[int]:
    rank = finding.signals.get("dp_rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        return [rank] if rank in engines else []
    return sorted(engines)


def in_round(view: TargetView, finding: Finding | None) -> Finding | None:
    """``finding`` unless vLLM's own round excuses it (above); annotated when a round went overdue."""
    if finding is None:
        return None
    st = view.state
    if _concerns(finding, dict(st.recovering)):
        return None
    overdue = dict(st.overdue)
    late = _concerns(finding, overdue)
    if not late:
        return finding
    engine = late[0]
    signals = dict(finding.signals, vllm_phase="recovering_overdue", round_engine=engine, round_s=overdue[engine])
    summary = (
        f"engine {engine} still in vLLM's own fault-tolerance round after {overdue[engine]:.0f}s (past its "
        f"120 s timeout + grace): {finding.summary}"
    )
    return replace(finding, signals=signals, summary=summary)
