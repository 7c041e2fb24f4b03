"""An operator's drain is on purpose: while a target is drained by ``guardian drain`` (until
``guardian undrain``) and for ``lifecycle.resume_grace`` after, the hang detectors stand down."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vllm_guardian.config.schema import LifecycleConfig
from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors import busy_loop, engine_stall
from vllm_guardian.model import ProcessInfo, ProcKey, Role, Sample, Target
from vllm_guardian.series import metrics as m
from vllm_guardian.state.tracker import Tracker
from tests.support.detector_world import NOW, T, gauges, make_view, seconds
from tests.support.remediation_world import World

CFG = DetectorsConfig()
LIFE = LifecycleConfig(resume_grace=30.0)
API = ProcKey(100, 5000)


def drained(on: bool, ended: float | None):
    v = make_view()
    return replace(v, state=replace(v.state, drained=on, drain_ended=ended, lifecycle=LIFE))


@pytest.mark.parametrize(
    "on, ended, stands_down",
    [(True, None, True), (False, NOW - 10, True), (False, NOW - 31, False), (False, None, False)],
    ids=["drained", "undrain-grace", "grace-over", "never-drained"],
)
def test_hang_detectors_stand_down_while_drained_by_the_operator_and_for_the_grace(on, ended, stands_down):
    assert drained(on, ended).state.on_purpose is stands_down


def test_a_frozen_engine_with_pending_work_is_no_stall_while_drained():
    flat = [Sample(T, "", metric, 4242.0, t) for t in seconds(NOW - 40, NOW) for metric in (m.ITERATIONS, m.SUCCESS)]
    v = make_view(flat, gauges(running=0, waiting=3, since=NOW - 40))
    assert engine_stall.evaluate(v, CFG) is not None  # the same numbers, not drained: a stall
    out = replace(v, state=replace(v.state, drained=True, lifecycle=LIFE))
    assert engine_stall.evaluate(out, CFG) is None
    assert busy_loop.evaluate(out, CFG) is None


def test_the_tracker_holds_an_operator_drain_from_start_to_undrain_and_starts_the_grace():
    tr = Tracker(60, lifecycle=LIFE)
    tr.apply_discovery((Target("t", API, (ProcessInfo(API, 1, Role.API_SERVER, ("vllm",)),), 8000),), (), 0)
    assert tr.operator_drain("t", False, 5) is None  # nothing changed
    assert "drained by the operator" in (tr.operator_drain("t", True, 10) or "")
    assert tr.operator_drain("t", True, 20) is None
    assert tr.state("t", 50).drained and tr.state("t", 50).on_purpose
    assert "undrained" in (tr.operator_drain("t", False, 100) or "")
    st = tr.state("t", 110)
    assert not st.drained and st.drain_ended == 100 and st.on_purpose
    assert not tr.state("t", 131).on_purpose


def test_the_remediator_says_drained_by_the_operator_from_drain_until_undrain(tmp_path):
    w = World(tmp_path)
    assert not w.rem.operator_drained("llm")
    assert w.rem.manual("llm", w.tracker.targets["llm"], w.clock.monotonic(), "drain", False) == "llm: drain started"
    assert w.rem.operator_drained("llm")  # draining already
    w.step(1, n=40)  # the drain waits for the requests to finish, at most drain.timeout (30 s)
    assert w.rem.phase("llm") == "drained" and w.rem.operator_drained("llm")
    w.rem.undrain("llm")
    assert not w.rem.operator_drained("llm")


def test_a_restart_by_the_guardian_is_not_an_operator_drain(tmp_path):
    w = World(tmp_path)
    w.consider(w.open())
    w.step(1, n=2)
    assert w.rem.active("llm") and not w.rem.operator_drained("llm")
