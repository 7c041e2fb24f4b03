"""vLLM's own states, wired: the probe's reading, the tracker's phase, the detectors' stand-down, status."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.support.detector_world import NOW, T, gauges, make_view, seconds
from tests.unit.test_remediation_recurring import CMD
from vllm_guardian.config.schema import LifecycleConfig, PolicyConfig
from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.detectors import busy_loop, checkpoint_failed, engine_dead, engine_stall
from vllm_guardian import vllm_versions as vv
from vllm_guardian.host.http import HttpError
from vllm_guardian.model import Kind, ProcessInfo, ProcKey, Role, Sample, Target
from vllm_guardian.probes.vllm_state import Asked, read_answers
from vllm_guardian.remediation.decide import Situation, decide
from vllm_guardian.remediation.policy import Verdict
from vllm_guardian.series import metrics as m
from vllm_guardian.state.tracker import Tracker
from vllm_guardian.state.vllm_states import VllmAnswers, serves_grpc, status_of
from vllm_guardian.surface.status_render import _vllm_lines
from vllm_guardian.testing.fake_http import FakeHttp, ok

CFG = DetectorsConfig()
API = ProcKey(100, 5000)
URL = "http://127.0.0.1:8000"
RETIRED = ok(json.dumps({"error": vv.RETIRED_ERROR}), 503)


def answers(routes: dict, asked: Asked) -> VllmAnswers:
    http = FakeHttp({("GET", path): answer for path, answer in routes.items()})
    return read_answers(http, "t", API, URL, asked, 2.0)


def ft(*statuses: str) -> str:
    return json.dumps({"engines": [{"id": i, "status": s} for i, s in enumerate(statuses)]})


# ------------------------------------------------------------------ what the probe reads, per row
V034 = Asked(True, "/checkpoint/status", "/v1/fault_tolerance/status")


@pytest.mark.parametrize(
    "routes, asked, expected",
    [
        ({"/version": ok('{"version": "0.32.0"}')}, Asked(True, None, None), {"version": "0.32.0"}),
        (
            {"/version": ok('{"version": "0.33.1"}'), "/fault_tolerance/status": ok(ft("healthy", "diagnosing"))},
            Asked(True, None, "/fault_tolerance/status"),
            {"version": "0.33.1", "engines": {0: "healthy", 1: "diagnosing"}},
        ),
        (
            {"/version": ok('{"version": "0.34.0"}'), "/checkpoint/status": ok('{"state": "prepared"}')},
            V034,
            {"version": "0.34.0", "checkpoint": "prepared", "ft_absent": True},
        ),
        (
            {"/version": ok('{"version": "0.34.0"}'), "/checkpoint/status": ok('{"state": "running"}', 503)},
            V034,
            {"version": "0.34.0", "checkpoint": "running", "ft_absent": True},  # 503 running: serving
        ),
        ({"/version": RETIRED}, V034, {"retired": True}),  # a retired rank: nothing else is asked
    ],
    ids=["0.32", "0.33-ft-round", "0.34-prepared", "0.34-running-503", "retired"],
)
def test_the_probe_reads_each_rows_own_state_endpoints(routes, asked, expected):
    got = answers(routes, asked)
    read = {k: getattr(got, k) for k in ("version", "checkpoint", "engines", "ft_absent") if getattr(got, k)}
    if got.retired:
        read["retired"] = True
    assert read == expected


@pytest.mark.parametrize(
    "routes",
    [
        {"/version": ok(json.dumps({"version": "9" * 65}))},  # too long to be a version
        {"/version": ok('{"version": "0.34\\n0"}'), "/checkpoint/status": ok('{"state": "prepared"}', 503)},
        {"/version": ok("[1, 2]"), "/checkpoint/status": ok('{"state": "preparing"}', 200)},  # wrong code
        {"/version": ok('{"error": "retired"}', 503), "/checkpoint/status": ok("not json", 500)},
        {"/checkpoint/status": ok('{"state": "exploded"}', 500), "/v1/fault_tolerance/status": ok("{}")},
        {"/version": HttpError("timeout", "2s"), "/checkpoint/status": HttpError("timeout", "2s")},
        {"/v1/fault_tolerance/status": ok(json.dumps({"engines": [{"id": -1, "status": "dead"}, {"id": True}]}))},
        {"/version": ok(json.dumps({"error": vv.RETIRED_ERROR}), 200)},  # the retired text without its 503
    ],
    ids=["long-version", "bad-code", "wrong-code", "near-retired", "unknown-state", "hung", "bad-engines", "200"],
)
def test_hostile_answers_are_no_state(routes):
    got = answers({"/version": ok('{"version": "0.34.0"}'), **routes}, V034)
    assert got.checkpoint is None and not got.engines and not got.retired
    assert got.version in (None, "0.34.0")


# ------------------------------------------------------------------ the tracker's phase
LIFE = LifecycleConfig(max_pause=600.0, resume_grace=30.0, recovery_grace=30.0)


def tracker(*cmdline: str) -> Tracker:
    tr = Tracker(60, lifecycle=LIFE)
    procs = (ProcessInfo(API, 1, Role.API_SERVER, cmdline or ("vllm",)),)
    tr.apply_discovery((Target("t", API, procs, 8000, URL),), (), 0)
    tr.server_says_ready("t", API, "m", 1)
    return tr


def said(tr: Tracker, now: float, **kw) -> list[str]:
    return tr.vllm_state(VllmAnswers("t", API, **kw), now)


def test_a_checkpoint_in_progress_is_a_hold_as_a_pause_and_its_restore_starts_the_grace():
    tr = tracker()
    said(tr, 5, version="0.34.0", version_read=True, checkpoint="running")
    assert tr.state("t", 6).hold is None
    assert any("stand down" in c for c in said(tr, 10, checkpoint="preparing"))
    said(tr, 12, checkpoint="prepared")
    st = tr.state("t", 130)
    assert (st.hold, st.hold_since, st.vllm_phase) == ("checkpointing", 10, vv.CHECKPOINTING)
    said(tr, 140, checkpoint="running")
    st = tr.state("t", 150)
    assert st.hold is None and st.on_purpose and not tr.state("t", 171).on_purpose


def test_a_pause_said_during_a_checkpoint_does_not_end_it():
    tr = tracker()
    said(tr, 10, checkpoint="prepared")
    tr.server_state("t", API, False, False, 11)  # /is_paused says nothing of vLLM's checkpoint
    assert tr.state("t", 12).hold == "checkpointing"


def test_an_engine_is_in_its_round_until_vllms_timeout_plus_grace_then_judged():
    tr = tracker()
    said(tr, 100, engines={0: "healthy", 1: "diagnosing"})
    st = tr.state("t", 100 + 120 + 29)
    assert (st.recovering, st.overdue, st.vllm_phase) == (((1, 149.0),), (), vv.RECOVERING)
    st = tr.state("t", 100 + 120 + 30)
    assert (st.recovering, st.overdue, st.vllm_phase) == ((), ((1, 150.0),), None)
    said(tr, 260, engines={0: "healthy", 1: "dead"})
    st = tr.state("t", 261)
    assert (st.recovering, st.ft_dead) == ((), (1,))


def test_the_version_is_read_once_and_a_newer_one_gets_the_newest_row_and_a_notice():
    tr = tracker()
    changes = said(tr, 5, version="0.35.2", version_read=True)
    assert changes == ["vLLM 0.35.2 (capability row 0.34.0)", "vLLM 0.35.2 is newer than known: using 0.34.0's row"]
    assert said(tr, 6, version="0.99.0", version_read=True) == []  # read once per incarnation
    s = status_of(tr.targets["t"].vllm, 7, 30, grpc=False)
    assert (s.version, s.row, s.notice) == ("0.35.2", "0.34.0", "vLLM 0.35.2 is newer than known: using 0.34.0's row")
    assert _vllm_lines(s) == ["  vLLM 0.35.2 (row 0.34.0)", f"  notice: {s.notice}"]


def test_an_answer_of_the_previous_incarnation_says_nothing():
    tr = tracker()
    assert tr.vllm_state(VllmAnswers("t", ProcKey(100, 1), retired=True), 5) == []
    assert tr.state("t", 6).vllm_phase is None


def test_a_grpc_server_says_what_the_guardian_cannot_see():
    tr = tracker("vllm", "serve", "m", "--grpc")
    assert serves_grpc(tr.targets["t"].target)
    s = status_of(None, 1, 30, grpc=True)
    assert "/metrics (a --grpc server has none)" in s.blind
    assert any(line.startswith("  sees: /proc") and "cannot see: /metrics" in line for line in _vllm_lines(s))


# ------------------------------------------------------------------ the detectors
def stalled():
    flat = [Sample(T, "", metric, 4242.0, t) for t in seconds(NOW - 40, NOW) for metric in (m.ITERATIONS, m.SUCCESS)]
    return make_view(flat, gauges(running=0, waiting=3, since=NOW - 40))


def with_state(v, **kw):
    return replace(v, state=replace(v.state, lifecycle=LIFE, **kw))


@pytest.mark.parametrize(
    "state, judged",
    [
        ({}, True),
        ({"recovering": ((0, 60.0),)}, False),
        ({"vllm_phase": vv.RETIRED}, False),
        ({"hold": "checkpointing", "hold_since": NOW - 40, "held_since": NOW - 40}, False),
        ({"overdue": ((0, 151.0),)}, True),
    ],
    ids=["as-usual", "in-vllms-round", "retired", "checkpointing", "round-overdue"],
)
def test_a_stalled_engine_is_judged_only_outside_vllms_own_states(state, judged):
    finding = engine_stall.evaluate(with_state(stalled(), **state), CFG)
    assert (finding is not None) is judged
    if finding is not None and "overdue" in state:
        assert finding.signals["vllm_phase"] == "recovering_overdue" and "vLLM's own" in finding.summary


def test_an_engine_vllm_calls_dead_after_its_round_is_engine_dead_and_not_during_one():
    v = with_state(make_view(), ft_dead=(1,))
    f = engine_dead.evaluate(v, CFG)
    assert f is not None and (f.signals["reason"], f.signals["dp_rank"]) == ("fault_tolerance_dead", 1)
    assert engine_dead.evaluate(with_state(make_view(), ft_dead=(1,), recovering=((0, 5.0),)), CFG) is None
    assert engine_dead.evaluate(with_state(make_view(engine_alive=False), recovering=((0, 5.0),)), CFG) is None


def test_a_retired_rank_is_never_engine_dead_nor_a_busy_loop():
    v = with_state(make_view(engine_alive=False), vllm_phase=vv.RETIRED)
    assert engine_dead.evaluate(v, CFG) is None and busy_loop.evaluate(v, CFG) is None


def test_a_failed_checkpoint_is_an_incident_that_never_restarts():
    f = checkpoint_failed.evaluate(with_state(make_view(), vllm_phase=vv.CHECKPOINT_FAILED), CFG)
    assert f is not None and f.kind is Kind.CHECKPOINT_FAILED and f.confirmed
    from vllm_guardian.detectors.kinds import NEVER_RESTART

    assert f.kind in NEVER_RESTART
    assert checkpoint_failed.evaluate(with_state(make_view(), vllm_phase=vv.CHECKPOINTING), CFG) is None


def test_no_restart_starts_while_vllms_own_round_runs():
    s = Situation(
        kind=Kind.ENGINE_STALL,
        incident_id="i",
        mode=Mode.REMEDIATE,
        active=False,
        previous=None,
        restart=CMD,
        method_refusal=None,
        unstartable=None,
        device_fault=None,
        maintenance=False,
        policy=PolicyConfig(),
        tripped=1,
        total=4,
        ever_ready=True,
        budget=Verdict(True, "ok"),
        pids=(20,),
        vllm_round="vLLM's own fault-tolerance round in progress for engine 0 (5s)",
    )
    refusal = decide(s).refusal
    assert refusal is not None and (refusal.key, refusal.status) == ("vllm_round", "deferred")
    assert decide(replace(s, vllm_round=None)).start
