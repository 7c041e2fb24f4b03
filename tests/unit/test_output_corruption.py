"""output_corruption: conditions A-D over a target's gate rounds and reports; the health score."""

from __future__ import annotations

import dataclasses

import pytest

from vllm_guardian.config.schema_detectors import DetectorsConfig, OutputCorruptionConfig
from vllm_guardian.detectors import output_corruption
from vllm_guardian.gates.judge import GateFailure
from vllm_guardian.gates.ledger import LedgerView, ReportRecord, RoundRecord
from vllm_guardian.model import Kind

from tests.support.detector_world import make_view

CFG = OutputCorruptionConfig()  # A: 5 in 60 s, C: 3 rounds, D: 3 rounds
ALL = frozenset({"L1", "L2", "L3", "L4", "L5"})


def fail(level: str, check: str = "x") -> GateFailure:
    return GateFailure(level, check, "1+1=", "garbage", "2", {})


def rnd(t: float, *levels: str, judged=ALL, ambiguous=False) -> RoundRecord:
    return RoundRecord(t, tuple(fail(lv) for lv in levels), judged, ambiguous)


def rep(t: float, level: str) -> ReportRecord:
    return ReportRecord(t, fail(level, "gateway"), "req-1")


def conds(view: LedgerView, now: float) -> list[str]:
    return [c.name for c in output_corruption.active_conditions(view, now, CFG)]


@pytest.mark.parametrize(
    "rounds, reports, now, expected",
    [
        # A: five L1/L2 failures within 60 s
        ([rnd(0, "L1", "L1", "L2"), rnd(10, "L1", "L1")], [], 10, ["A"]),
        ([rnd(0, "L1", "L1", "L2"), rnd(10, "L1")], [], 10, []),
        ([rnd(0, "L1", "L1", "L2")], [rep(5, "L1"), rep(6, "L2")], 6, ["A"]),  # reports count
        ([rnd(0, "L1", "L1", "L2"), rnd(61, "L1", "L1")], [], 61, []),  # the first ones aged out
        # B: any L3 failure, at once
        ([rnd(0, "L3")], [], 0, ["B"]),
        ([rnd(0)], [rep(1, "L3")], 1, ["B"]),
        ([rnd(0, "L3"), rnd(60)], [], 60, []),  # a clean round after it
        # C: L4 three judged rounds in a row
        ([rnd(0, "L4"), rnd(60, "L4"), rnd(120, "L4")], [], 120, ["C"]),
        ([rnd(0, "L4"), rnd(60), rnd(120, "L4")], [], 120, []),
        ([rnd(0, "L4"), rnd(60, judged=frozenset({"L1"})), rnd(120, "L4"), rnd(180, "L4")], [], 180, ["C"]),
        # D: L5 three rounds in a row
        ([rnd(0, "L5"), rnd(60, "L5"), rnd(120, "L5")], [], 120, ["D"]),
        ([rnd(0, "L5"), rnd(60, "L5")], [], 60, []),
        # several at once: B names the incident first
        ([rnd(0, "L5", "L3"), rnd(60, "L5"), rnd(120, "L5", "L3")], [], 120, ["B", "D"]),
    ],
)
def test_conditions(rounds, reports, now, expected):
    assert conds(LedgerView(tuple(rounds), tuple(reports), 60.0), now) == expected


def test_a_condition_is_held_between_rounds_while_the_latest_round_still_fails():
    view = LedgerView((rnd(0, "L1", "L1", "L1", "L1", "L1"),), (), 60.0)
    assert conds(view, 30) == ["A"]
    assert conds(view, 90) == ["A"]  # aged out of A's window, but held (3 rounds) while unfixed
    assert conds(view, 181) == []


def test_a_clean_round_ends_the_hold():
    view = LedgerView((rnd(0, "L1", "L1", "L1", "L1", "L1"), rnd(60)), (), 60.0)
    assert conds(view, 70) == []


def test_a_failure_after_a_clean_round_is_not_held_by_the_condition_before_it():
    # D held at 120, a clean round at 130 resolved it; the failure at 190 is a new episode's first
    view = LedgerView((rnd(0, "L5"), rnd(60, "L5"), rnd(120, "L5"), rnd(130), rnd(190, "L5")), (), 60.0)
    assert conds(view, 190) == []


def test_l4_rounds_that_were_only_ambiguous_are_alert_only():
    view = LedgerView(tuple(rnd(t, "L4", ambiguous=True) for t in (0, 60, 120)), (), 60.0)
    (c,) = output_corruption.active_conditions(view, 120, CFG)
    assert c.name == "C" and c.alert_only


@pytest.mark.parametrize(
    "rounds, reports, score",
    [
        ([rnd(0)], [], 100),
        ([rnd(0, "L1")], [], 92),
        ([rnd(0, "L3")], [], 20),  # a condition holds: at most 20
        ([rnd(0, "L5")], [], 85),
        ([rnd(0, "L5"), rnd(60, "L5"), rnd(120, "L5")], [], 20),
        ([], [rep(0, "L1")], 92),
    ],
)
def test_health_score(rounds, reports, score):
    now = max([r.t for r in rounds] + [r.t for r in reports])
    assert output_corruption.health_score(LedgerView(tuple(rounds), tuple(reports), 60.0), now, CFG) == score


def test_no_score_before_the_gates_saw_anything():
    assert output_corruption.health_score(LedgerView(), 0.0, CFG) is None
    assert output_corruption.health_score(None, 0.0, CFG) is None


def _view(gates: LedgerView | None, now: float):
    base = make_view()
    return dataclasses.replace(base, state=dataclasses.replace(base.state, now=now), gates=gates)


def test_the_finding_carries_level_condition_and_the_failing_sample():
    gates = LedgerView((rnd(0, "L3"),), (), 60.0)
    f = output_corruption.evaluate(_view(gates, 0.0), DetectorsConfig())
    assert f is not None
    assert f.kind is Kind.OUTPUT_CORRUPTION and f.confirmed
    assert f.signals["level"] == "L3" and f.signals["condition"] == "B"
    assert f.signals["sample"] == {
        "level": "L3",
        "check": "x",
        "prompt": "1+1=",
        "output": "garbage",
        "expected": "2",
        "figures": {},
        "source": "own",
    }
    assert f.signals["health_score"] == 20 and not f.signals["alert_only"]


def test_no_finding_without_gates_or_while_healthy():
    assert output_corruption.evaluate(_view(None, 0.0), DetectorsConfig()) is None
    assert output_corruption.evaluate(_view(LedgerView((rnd(0),), (), 60.0), 0.0), DetectorsConfig()) is None


def test_thresholds_come_from_config():
    cfg = DetectorsConfig(output_corruption=OutputCorruptionConfig(l5_rounds=1))
    f = output_corruption.evaluate(_view(LedgerView((rnd(0, "L5"),), (), 60.0), 0.0), cfg)
    assert f is not None and f.signals["condition"] == "D"
