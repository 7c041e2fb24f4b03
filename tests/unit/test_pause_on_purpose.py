"""Paused or asleep on purpose is not a hang: the server's word, the stand-down, the grace, the limit."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.support.detector_world import NOW, T, gauges, make_view, seconds
from vllm_guardian.config.schema import LifecycleConfig
from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors import busy_loop, engine_stall, pause_too_long
from vllm_guardian.host.http import HttpError
from vllm_guardian.model import Kind, ProcessInfo, ProcKey, Role, Sample, Subject, Target
from vllm_guardian.series import metrics as m
from vllm_guardian.probes.server_state import read_state
from vllm_guardian.state.tracker import Tracker
from vllm_guardian.testing.fake_http import FakeHttp, ok

CFG = DetectorsConfig()
LIFE = LifecycleConfig(max_pause=600.0, resume_grace=30.0)
API = ProcKey(100, 5000)
URL = "http://127.0.0.1:8000"


def held(hold=None, since=None, ended=None):
    v = make_view()
    return replace(v, state=replace(v.state, hold=hold, hold_since=since, hold_ended=ended, lifecycle=LIFE))


# ------------------------------------------------------------------ what the server says
@pytest.mark.parametrize(
    "routes, paused, sleeping, exposed",
    [
        ({"/is_paused": ok('{"is_paused": true}'), "/is_sleeping": ok('{"is_sleeping": false}')}, True, False, True),
        ({"/is_paused": ok('{"is_paused": false}'), "/is_sleeping": ok('{"is_sleeping": true}')}, False, True, True),
        ({}, None, None, False),  # no VLLM_SERVER_DEV_MODE: 404 on both, not asked again
        ({"/is_paused": HttpError("timeout", "2s"), "/is_sleeping": HttpError("timeout", "2s")}, None, None, True),
        ({"/is_paused": ok("oops", 500), "/is_sleeping": ok('{"is_sleeping": "yes"}')}, None, None, True),
    ],
    ids=["paused", "asleep", "not-exposed", "hung-engine-answers-nothing", "garbage"],
)
def test_the_server_state_is_what_it_answers_and_no_answer_is_not_a_pause(routes, paused, sleeping, exposed):
    http = FakeHttp({("GET", path): answer for path, answer in routes.items()})
    st = read_state(http, "t", API, URL, 2.0)
    assert (st.paused, st.sleeping, st.exposed) == (paused, sleeping, exposed)


def tracker() -> Tracker:
    tr = Tracker(60, lifecycle=LIFE)
    procs = (ProcessInfo(API, 1, Role.API_SERVER, ("vllm",)),)
    tr.apply_discovery((Target("t", API, procs, 8000, URL),), (), 0)
    tr.server_says_ready("t", API, "m", 1)
    return tr


def test_a_pause_is_held_from_when_the_server_says_so_and_its_end_starts_the_grace():
    tr = tracker()
    assert "paused on purpose" in (tr.server_state("t", API, True, False, 10) or "")
    assert tr.state("t", 50).hold == "paused" and tr.state("t", 50).hold_since == 10
    assert "resumed" in (tr.server_state("t", API, False, False, 130) or "")
    st = tr.state("t", 140)
    assert st.hold is None and st.hold_ended == 130 and st.on_purpose  # within the 30 s grace
    assert not tr.state("t", 161).on_purpose


def test_asleep_wins_over_paused_and_an_older_incarnation_says_nothing():
    tr = tracker()
    tr.server_state("t", API, True, True, 10)  # (the probe tells a vLLM pause from a sleep: held_as)
    assert tr.state("t", 11).hold == "sleeping"
    assert tr.server_state("t", ProcKey(100, 1), False, False, 12) is None  # a reused pid's old answer
    assert tr.state("t", 12).hold == "sleeping"


# ------------------------------------------------------------------ hang detectors stand down
@pytest.mark.parametrize(
    "hold, ended, stands_down",
    [("paused", None, True), ("sleeping", None, True), (None, NOW - 10, True), (None, NOW - 31, False)],
    ids=["paused", "asleep", "resume-grace", "grace-over"],
)
def test_hang_detectors_stand_down_while_on_purpose_and_for_the_resume_grace(hold, ended, stands_down):
    assert held(hold, NOW - 100 if hold else None, ended).state.on_purpose is stands_down


def test_a_frozen_engine_with_pending_work_is_no_stall_while_paused():
    flat = [Sample(T, "", metric, 4242.0, t) for t in seconds(NOW - 40, NOW) for metric in (m.ITERATIONS, m.SUCCESS)]
    v = make_view(flat, gauges(running=0, waiting=3, since=NOW - 40))
    assert engine_stall.evaluate(v, CFG) is not None  # the same numbers, not paused: a stall
    paused = replace(v, state=replace(v.state, hold="paused", hold_since=NOW - 40, lifecycle=LIFE))
    assert engine_stall.evaluate(paused, CFG) is None
    assert busy_loop.evaluate(paused, CFG) is None


# ------------------------------------------------------------------ a hold that does not explain what is seen
def spinning(since: float) -> list[Sample]:
    """The engine's main thread burning a core from ``since`` to NOW, never blocking."""
    subject = Subject(200, 200).key
    return [
        s
        for t in seconds(since, NOW)
        for s in (
            Sample(T, subject, m.THREAD_CPU, 1.0, t),
            Sample(T, subject, m.THREAD_VOL_RATE, 0.0, t),
            Sample(T, subject, m.THREAD_RUNNING, 1.0, t),
        )
    ]


def frozen(since: float) -> list[Sample]:
    return [Sample(T, "", metric, 4242.0, t) for t in seconds(since, NOW) for metric in (m.ITERATIONS, m.SUCCESS)]


def judged(
    held_s: float, spin_s: float | None, pending_s: float | None, hold: str | None = "paused", drained: bool = False
):
    """(busy_loop, engine_stall) findings of a target the server says has been held ``held_s`` seconds,
    one of whose threads has burned a core for the last ``spin_s`` seconds and with requests pending
    for the last ``pending_s``, its counters frozen throughout."""
    series = [frozen(NOW - 600)]
    if spin_s is not None:
        series.append(spinning(NOW - spin_s))
    series.append(gauges(running=3 if pending_s is not None else 0, since=NOW - (pending_s or 600)))
    v = make_view(*series)
    since = NOW - held_s if hold else None
    state = replace(v.state, hold=hold, hold_since=since, held_since=since, lifecycle=LIFE, drained=drained)
    v = replace(v, state=state)
    return busy_loop.evaluate(v, CFG), engine_stall.evaluate(v, CFG)


def test_a_paused_engine_spinning_with_requests_pending_is_a_busy_loop_judged_as_usual():
    """Audit E17: the server says paused (vLLM's API server answers /is_paused from its own state),
    while the engine behind it spins with requests pending; it was never judged a hang, only
    pause_too_long after 600 s."""
    busy, _ = judged(held_s=100, spin_s=100, pending_s=100)
    assert busy is not None and busy.confirmed and busy.signals["reason"] == "counters_frozen"
    assert (busy.signals["hold"], busy.signals["hold_contradicted"]) == ("paused", "spin")
    assert busy.summary.startswith("paused on purpose, the server says, but a thread burns a core")


def test_a_pause_holding_requests_past_its_limit_is_judged_as_usual():
    _, stall = judged(held_s=LIFE.max_pause_pending + 10, spin_s=None, pending_s=LIFE.max_pause_pending + 10)
    assert stall is not None and stall.confirmed and stall.signals["reason"] == "counters_frozen"
    assert stall.signals["hold_contradicted"] == "pending"


HOLD_EXPLAINS = {
    # (held_s, spin_s, pending_s, hold, drained)
    "a weight sync spinning less than max_pause_spin": (20, 20, 20, "paused", False),
    "a spin that began a moment ago in a long pause": (100, 10, 100, "paused", False),
    "a thread hot before the pause, paused a moment ago": (10, 100, 100, "paused", False),
    "requests kept for less than max_pause_pending": (200, None, 200, "paused", False),
    "requests kept, but not all through the limit": (400, None, 100, "paused", False),
    "asleep, idle": (400, None, None, "sleeping", False),
    "drained by the operator, spinning": (100, 100, 100, None, True),
}


@pytest.mark.parametrize("held_s, spin_s, pending_s, hold, drained", HOLD_EXPLAINS.values(), ids=HOLD_EXPLAINS.keys())
def test_a_hold_that_explains_what_is_seen_stands_the_hang_detectors_down(held_s, spin_s, pending_s, hold, drained):
    assert judged(held_s, spin_s, pending_s, hold, drained) == (None, None)


@pytest.mark.parametrize("hold", ["paused", "sleeping"])
def test_the_same_spin_after_the_limit_is_judged_whether_paused_or_asleep(hold):
    busy, _ = judged(held_s=LIFE.max_pause_spin, spin_s=LIFE.max_pause_spin, pending_s=LIFE.max_pause_spin, hold=hold)
    assert busy is not None and busy.signals["hold"] == hold


def test_pausing_and_resuming_within_the_grace_is_one_hold_that_hides_no_spin():
    tr = tracker()
    for t, paused in ((10, True), (25, False), (35, True), (50, False)):  # resumed, paused again in the grace
        tr.server_state("t", API, paused, False, t)
    tr.server_state("t", API, True, True, 60)  # and asleep: still the same run of holds
    assert tr.state("t", 70).held_since == 10
    tr.server_state("t", API, False, False, 80)
    assert tr.state("t", 100).held_since == 10  # in the grace: the run goes on
    assert tr.state("t", 111).held_since is None  # the grace is over: it ended
    tr.server_state("t", API, True, False, 200)
    assert tr.state("t", 201).held_since == 200  # a new one


def test_a_spin_through_a_run_of_pauses_is_judged_in_the_grace_between_them_too():
    series = [frozen(NOW - 600), spinning(NOW - 100), gauges(running=3, since=NOW - 100)]
    v = make_view(*series)
    state = replace(v.state, hold=None, hold_ended=NOW - 10, held_since=NOW - 100, lifecycle=LIFE)
    busy = busy_loop.evaluate(replace(v, state=state), CFG)
    assert busy is not None and busy.confirmed and busy.signals["hold_contradicted"] == "spin"
    assert busy.summary.startswith("just resumed from a pause or sleep, the server says, but")


# ------------------------------------------------------------------ the limit
@pytest.mark.parametrize("held_s, fires", [(599.0, False), (600.0, True)])
def test_a_pause_longer_than_max_pause_is_an_alert(held_s, fires):
    f = pause_too_long.evaluate(held("paused", NOW - held_s), CFG)
    assert (f is not None) is fires
    if f:
        assert f.kind is Kind.PAUSE_TOO_LONG and f.confirmed and f.signals["hold"] == "paused"


def test_pause_too_long_alerts_by_default():
    assert CFG.pause_too_long.mode.value == "alert"


AWAKE = 'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} %s\n'


@pytest.mark.parametrize(
    "paused, sleeping, page, held",
    [
        (True, True, AWAKE % "1.0", (True, False)),  # vLLM 0.32: a pause answers is_sleeping true too
        (True, True, AWAKE % "0.0", (False, True)),  # asleep: the engine's own gauge says so
        (True, True, None, (True, False)),  # no page: a pause (both stand the detectors down)
        (False, True, None, (False, True)),  # an older server without /is_paused
    ],
    ids=["pause", "sleep", "no-metrics", "sleep-only-endpoint"],
)
def test_a_pause_and_a_sleep_are_told_apart_by_the_engines_sleep_state(paused, sleeping, page, held):
    from vllm_guardian.probes.server_state import held_as

    assert held_as(paused, sleeping, page) == held


def test_the_store_keeps_the_request_gauges_over_a_pause_s_pending_limit():
    from vllm_guardian.config.schema import Config
    from vllm_guardian.detectors.kinds import series_store_for

    store = series_store_for(Config(lifecycle=LifecycleConfig(max_pause_pending=900.0)))
    assert store.horizons[m.REQ_RUNNING] >= 900.0 and store.horizons[m.REQ_WAITING] >= 900.0
    assert store.horizon >= 2 * LifecycleConfig().max_pause_spin
