"""Never restart in the middle of vLLM's own fault-tolerance round; a finding naming another rank is judged."""

from __future__ import annotations

from dataclasses import replace

from tests.support.detector_world import make_view
from tests.support.remediation_world import API, World
from vllm_guardian.detectors.vllm_round import in_round
from vllm_guardian.model import Finding, Kind, Severity
from vllm_guardian.state.vllm_states import VllmAnswers


def test_an_open_hang_incident_waits_while_vllms_round_runs_then_restarts_after_its_deadline(tmp_path):
    w = World(tmp_path)
    now = w.clock.monotonic()
    w.tracker.vllm_state(VllmAnswers("llm", API, engines={0: "diagnosing"}), now)
    inc = w.open(Kind.BUSY_LOOP)
    text = w.consider(inc)
    assert "never restarted mid-round" in text and w.control.signals == []
    w.step(seconds=120 + 30)  # vLLM's engine_recovery_timeout_sec + lifecycle.recovery_grace
    assert "never restarted mid-round" not in w.consider(inc)
    w.step(n=5)
    assert w.control.signals  # judged and restarted as usual once the round outlasted its deadline


def finding(**signals) -> Finding:
    return Finding(Kind.ENGINE_STALL, "llm", Severity.CRITICAL, "frozen", signals, confirmed=True)


def test_a_finding_about_another_rank_than_the_one_in_vllms_round_is_judged():
    v = make_view()
    v = replace(v, state=replace(v.state, recovering=((1, 30.0),)))
    assert in_round(v, finding(dp_rank=0)) is not None  # rank 0 is not in a round
    assert in_round(v, finding(dp_rank=1)) is None  # rank 1 is
    assert in_round(v, finding()) is None  # names no rank: the round is the likelier cause
