"""busy_loop: a spinning thread with no engine progress fires; busy-but-healthy does not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vllm_guardian.config.schema_detectors import BusyLoopConfig, DetectorsConfig
from vllm_guardian.detectors import busy_loop
from vllm_guardian.detectors.hot_threads import hot_threads_for
from vllm_guardian.model import Kind, Role, Sample, Severity, Subject
from vllm_guardian.series import metrics as m
from tests.support.detector_world import NOW, T, canary, gauges, seconds
from tests.support.detector_world import make_view as view

CFG = DetectorsConfig()


# ------------------------------------------------------------------ series builders
def thread(
    pid=200,
    tid=200,
    cpu=1.0,
    vol=0.0,
    running: float | None = 1.0,
    since=NOW - 10,
    until=NOW,
    demand: float | None = None,
):
    subj = Subject(pid, tid).key
    out = []
    for t in seconds(since, until):
        out.append(Sample(T, subj, m.THREAD_CPU, cpu, t))
        if demand is not None:
            out.append(Sample(T, subj, m.THREAD_DEMAND, demand, t))
        out.append(Sample(T, subj, m.THREAD_VOL_RATE, vol, t))
        if running is not None:
            out.append(Sample(T, subj, m.THREAD_RUNNING, running, t))
    return out


def counters(advancing: bool, since=NOW - 30, until=NOW):
    return [
        Sample(T, "", metric, (t * 7 if advancing else 4242.0), t)
        for t in seconds(since, until)
        for metric in (m.ITERATIONS, m.GEN_TOKENS)
    ]


# ------------------------------------------------------------------ confirmed
CONFIRMED = {
    "spin, counters frozen, work pending": (
        [thread(), counters(False), gauges(running=2)],
        "counters_frozen",
    ),
    "spin, nothing pending (gauges frozen at 0), canary timed out": (
        [thread(), counters(False), gauges(running=0), canary(NOW - 7, NOW - 2, answered=False)],
        "canary_timeout",
    ),
    "spin with a waking sibling: 40 voluntary switches/s at 100% CPU": (
        [thread(vol=40.0), counters(False), gauges(running=1, waiting=3)],
        "counters_frozen",
    ),
    "spin, syscall file unreadable": (
        [thread(running=None), counters(False), gauges(running=1)],
        "counters_frozen",
    ),
}


@pytest.mark.parametrize("series, reason", CONFIRMED.values(), ids=CONFIRMED.keys())
def test_confirmed(series, reason):
    f = busy_loop.evaluate(view(*series), CFG)
    assert f is not None and f.confirmed
    assert f.kind is Kind.BUSY_LOOP and f.severity is Severity.CRITICAL
    assert f.signals["reason"] == reason
    assert f.subject == "p200/t200"


def test_canary_timeout_summary_names_the_thread_and_the_canary():
    f = busy_loop.evaluate(view(thread(), counters(False), canary(NOW - 7, NOW - 2, answered=False)), CFG)
    assert f is not None
    assert f.summary == "EngineCore thread 200 spins at 100% CPU with no engine progress (canary timed out after 5.0s)"
    assert f.signals["canary_latency_s"] == 5.0


def test_signals_carry_the_numbers_and_thresholds_that_fired():
    f = busy_loop.evaluate(view(thread(vol=20.0), counters(False), gauges(running=2)), CFG)
    assert f is not None
    s = f.signals
    assert (s["pid"], s["tid"], s["role"]) == (200, 200, "engine_core")
    assert s["cpu_ratio"] == 1.0
    assert s["voluntary_per_cpu_s"] == 20.0
    assert s["syscall_running_fraction"] == 1.0
    assert (s["progress"], s["pending"], s["window"]) == (False, True, 10.0)
    assert s["threshold_cpu_ratio"] == 0.9
    assert s["threshold_max_voluntary_per_cpu_second"] == 100.0
    assert s["threshold_running_fraction"] == 0.8


def test_the_hottest_thread_is_reported():
    f = busy_loop.evaluate(
        view(thread(tid=201, cpu=0.93), thread(tid=202, cpu=0.99), counters(False), gauges(running=1)), CFG
    )
    assert f is not None
    assert f.subject == "p200/t202"


# ------------------------------------------------------------------ must not fire
QUIET = {
    "healthy decode under load: hot thread, counters advance": dict(
        series=[thread(), counters(True), gauges(running=8)]
    ),
    "model load / warm-up: startup grace while hot": dict(
        series=[thread(), counters(False), gauges(running=1)], ready=False
    ),
    "benign busy-poll that answered the canary": dict(
        series=[thread(), counters(False), gauges(running=0), canary(NOW - 4, NOW - 3.9, answered=True)]
    ),
    "sleep(0) loop: 2000 voluntary switches/s": dict(series=[thread(vol=2000.0), counters(False), gauges(running=1)]),
    "API server gone (engine_dead's case)": dict(
        series=[thread(), counters(False), gauges(running=1)], api_alive=False
    ),
    "below the CPU ratio": dict(series=[thread(cpu=0.6), counters(False), gauges(running=1)]),
    "mostly in syscalls, not running": dict(series=[thread(running=0.0), counters(False), gauges(running=1)]),
    "thread of a process no longer in the tree": dict(
        series=[thread(pid=999, tid=999), counters(False), gauges(running=1)]
    ),
    "thread stopped being sampled (exited) a while ago": dict(
        series=[thread(since=NOW - 10, until=NOW - 5), counters(False), gauges(running=1)]
    ),
    "CPU-heavy tokenisation in the API server with progress": dict(
        series=[thread(pid=100, tid=100), counters(True), gauges(running=0, waiting=4)]
    ),
}


@pytest.mark.parametrize("case", QUIET.values(), ids=QUIET.keys())
def test_quiet(case):
    kw = dict(case)
    series = kw.pop("series")
    assert busy_loop.evaluate(view(*series, **kw), CFG) is None


# ------------------------------------------------------------------ suspect (unconfirmed)
def test_hot_for_less_than_min_coverage_is_only_a_suspect_even_with_frozen_pending_work():
    # the confirming canary starts early; the conclusion waits for coverage
    f = busy_loop.evaluate(view(thread(since=NOW - 3), counters(False), gauges(running=1)), CFG)
    assert f is not None and f.confirmed is False and f.signals["reason"] == "suspect"


def test_a_thread_hot_for_its_last_3_s_after_7_s_idle_is_a_suspect_at_once():
    # the cold samples from before the onset must not hold back the confirming canary
    series = [thread(cpu=0.05, since=NOW - 10, until=NOW - 4), thread(since=NOW - 3), counters(False)]
    f = busy_loop.evaluate(view(*series, gauges(running=0)), CFG)
    assert f is not None and f.confirmed is False and f.signals["reason"] == "suspect"


def test_a_thread_hot_for_one_sample_only_is_not_yet_a_suspect():
    series = [thread(cpu=0.05, since=NOW - 10, until=NOW - 1), thread(since=NOW, until=NOW), counters(False)]
    assert busy_loop.evaluate(view(*series, gauges(running=0)), CFG) is None


def test_a_suspect_confirms_once_the_window_is_covered_and_its_canary_timed_out():
    # onset at NOW-7: the canary sent at NOW-5 (suspect) timed out at NOW; 8 of 11 samples hot
    series = [thread(cpu=0.05, since=NOW - 10, until=NOW - 8), thread(since=NOW - 7), counters(False)]
    f = busy_loop.evaluate(view(*series, gauges(running=0), canary(NOW - 5, NOW, answered=False)), CFG)
    assert f is not None and f.confirmed and f.signals["reason"] == "canary_timeout"


def test_hot_for_less_than_min_coverage_with_progress_is_nothing():
    assert busy_loop.evaluate(view(thread(since=NOW - 3), counters(True), gauges(running=1)), CFG) is None


def test_suspect_when_nothing_pending_and_no_canary_yet():
    f = busy_loop.evaluate(view(thread(), counters(False), gauges(running=0)), CFG)
    assert f is not None and f.confirmed is False
    assert f.signals["reason"] == "suspect"
    assert "confirming with a canary" in f.summary


def test_suspect_when_progress_is_unknown_even_with_work_pending():
    f = busy_loop.evaluate(view(thread(), gauges(running=2)), CFG)
    assert f is not None and f.confirmed is False
    assert f.signals["progress"] is None


def test_a_canary_answered_before_the_thread_got_hot_does_not_clear_it():
    series = [thread(since=NOW - 6), counters(False), gauges(running=0), canary(NOW - 9, NOW - 8.9, answered=True)]
    f = busy_loop.evaluate(view(*series), CFG)
    assert f is not None and f.confirmed is False


def test_a_canary_timed_out_before_the_thread_got_hot_does_not_confirm():
    series = [thread(since=NOW - 6), counters(False), gauges(running=0), canary(NOW - 9.5, NOW - 7, answered=False)]
    f = busy_loop.evaluate(view(*series), CFG)
    assert f is not None and f.confirmed is False


def test_without_counters_a_timed_out_canary_alone_confirms():
    series = [thread(), gauges(running=0), canary(NOW - 6, NOW - 1, answered=False)]
    f = busy_loop.evaluate(view(*series), CFG)
    assert f is not None
    assert f.confirmed and f.signals["reason"] == "canary_timeout" and f.signals["progress"] is None


def test_the_latest_canary_decides_when_several_ran():
    series = [
        thread(),
        counters(False),
        gauges(running=0),
        canary(NOW - 9, NOW - 4, answered=False),
        canary(NOW - 3, NOW - 2.5, answered=True),
    ]
    assert busy_loop.evaluate(view(*series), CFG) is None


def test_in_flight_canary_is_reported_on_the_suspect():
    f = busy_loop.evaluate(view(thread(), counters(False), gauges(running=0), in_flight=NOW - 2), CFG)
    assert f is not None
    assert f.confirmed is False and f.signals["canary_in_flight_s"] == 2.0


# ------------------------------------------------------------------ hot threads
@pytest.mark.parametrize(
    "vol, hot",
    [(0.0, True), (40.0, True), (100.0, True), (101.0, False), (2000.0, False)],
)
def test_voluntary_rate_is_judged_per_cpu_second_not_against_zero(vol, hot):
    assert bool(hot_threads_for(view(thread(vol=vol)), BusyLoopConfig())) is hot


def test_hot_thread_carries_role_and_start_of_the_hot_span():
    series = [thread(cpu=0.2, since=NOW - 10, until=NOW - 7), thread(cpu=1.0, since=NOW - 6, until=NOW)]
    (h,) = hot_threads_for(view(*series), BusyLoopConfig())
    assert (h.pid, h.tid, h.role) == (200, 200, Role.ENGINE_CORE)
    assert h.first_t == NOW - 6
    assert h.cpu_ratio == 1.0


def test_thresholds_come_from_the_config():
    cfg = replace(CFG, busy_loop=BusyLoopConfig(cpu_ratio=0.5))
    f = busy_loop.evaluate(view(thread(cpu=0.6), counters(False), gauges(running=1)), cfg)
    assert f is not None and f.confirmed and f.signals["threshold_cpu_ratio"] == 0.5


def test_a_spinner_starved_by_a_busy_node_is_still_hot_by_its_cpu_demand():
    """On a saturated node a spinning thread gets 60% of a core but waits on the runqueue for the rest."""
    f = busy_loop.evaluate(view(thread(cpu=0.6, demand=1.0), counters(False), gauges(running=1)), CFG)
    assert f is not None and f.confirmed
    assert f.signals["cpu_ratio"] == 0.6 and f.signals["cpu_demand"] == 1.0


def test_a_thread_that_neither_runs_nor_waits_to_run_is_not_hot():
    assert busy_loop.evaluate(view(thread(cpu=0.6, demand=0.6), counters(False), gauges(running=1)), CFG) is None


def test_a_spin_in_one_engine_of_a_data_parallel_server_names_the_process_and_its_rank():
    from tests.support.detector_world import API, TARGET
    from vllm_guardian.model import ProcessInfo, ProcKey

    dp0 = ProcessInfo(ProcKey(200, 22), 100, Role.ENGINE_CORE, ("VLLM::EngineCore_DP0",))
    dp1 = ProcessInfo(ProcKey(201, 23), 100, Role.ENGINE_CORE, ("VLLM::EngineCore_DP1",))
    dp_server = replace(TARGET, processes=(API, dp0, dp1))
    series = [thread(pid=201, tid=201), counters(False), canary(NOW - 7, NOW - 2, answered=False)]
    f = busy_loop.evaluate(view(*series, target=dp_server), CFG)
    assert f is not None
    assert (f.signals["process_title"], f.signals["dp_rank"]) == ("VLLM::EngineCore_DP1", 1)
    assert f.summary.startswith("EngineCore_DP1 thread 201 spins")


def dp_world(dp1_progress: bool, canary_answered: bool | None, canary_rank: int | None = None, dp1_pending=2.0):
    """A DP=2 server: DP0 serves (the server's counters advance), DP1's main thread spins."""
    from tests.support.detector_world import API, TARGET
    from vllm_guardian.model import ProcessInfo, ProcKey

    dp0 = ProcessInfo(ProcKey(200, 22), 100, Role.ENGINE_CORE, ("VLLM::EngineCore_DP0",))
    dp1 = ProcessInfo(ProcKey(201, 23), 100, Role.ENGINE_CORE, ("VLLM::EngineCore_DP1",))
    series = [thread(pid=201, tid=201), counters(True)]  # the whole server makes progress
    for e, moving in (("engine:0", True), ("engine:1", dp1_progress)):
        series.append(
            [Sample(T, e, m.ITERATIONS, (t * 7 if moving else 4242.0), t) for t in seconds(NOW - 30, NOW)]
            + [Sample(T, e, m.REQ_RUNNING, 2.0 if e == "engine:0" else dp1_pending, t) for t in seconds(NOW - 30, NOW)]
        )
    if canary_answered is not None:
        series.append(canary(NOW - 7, NOW - 2, answered=canary_answered, rank=canary_rank))  # reached DP0, maybe
    return view(*series, target=replace(TARGET, processes=(API, dp0, dp1)))


@pytest.mark.parametrize("canary_answered", [None, True], ids=["no-canary", "canary-answered-by-the-other-rank"])
def test_one_rank_spinning_while_the_other_serves_is_judged_on_its_own_counters(canary_answered):
    f = busy_loop.evaluate(dp_world(dp1_progress=False, canary_answered=canary_answered), CFG)
    assert f is not None and f.confirmed and f.signals["reason"] == "counters_frozen"
    assert (f.signals["engine"], f.signals["dp_rank"], f.signals["pid"]) == ("engine:1", 1, 201)


def test_a_hot_rank_whose_own_counters_advance_is_healthy_decode():
    assert busy_loop.evaluate(dp_world(dp1_progress=True, canary_answered=None), CFG) is None


RANK_CANARIES = {
    "sent to the hot rank and answered: a busy-poll that still serves": (1, True, None),
    "sent to the hot rank and timed out: confirmed": (1, False, "canary_timeout"),
    "sent to the other rank and timed out: says nothing of this one": (0, False, "suspect"),
    "routed by the server and timed out: it reached no serving rank": (None, False, "canary_timeout"),
    "routed by the server and answered: maybe by the other rank": (None, True, "suspect"),
}


@pytest.mark.parametrize("rank, answered, reason", RANK_CANARIES.values(), ids=RANK_CANARIES.keys())
def test_a_hot_rank_showing_nothing_pending_is_decided_by_the_canary_sent_to_it(rank, answered, reason):
    v = dp_world(dp1_progress=False, canary_answered=answered, canary_rank=rank, dp1_pending=0.0)
    f = busy_loop.evaluate(v, CFG)
    assert (f.signals["reason"] if f is not None else None) == reason
    if f is not None:
        assert f.confirmed == (reason == "canary_timeout") and f.signals["dp_rank"] == 1


OVERLAPPING = {
    "the thread seen hot for the last 3 s of the canary's flight: this spin's timeout": ((NOW - 8, NOW - 3), True),
    "the thread seen hot for only 1.5 s of it: says nothing yet": ((NOW - 9, NOW - 4.5), False),
}


@pytest.mark.parametrize("flight, confirms", OVERLAPPING.values(), ids=OVERLAPPING.keys())
def test_a_canary_timed_out_that_started_just_before_the_thread_was_seen_hot(flight, confirms):
    # a spinner starved of CPU is read only once seen runnable twice: the canary in flight then is its
    series = [thread(since=NOW - 6), counters(False), gauges(running=0), canary(flight[0], flight[1], answered=False)]
    f = busy_loop.evaluate(view(*series), CFG)
    assert f is not None and f.confirmed is confirms


def test_a_last_step_reported_late_does_not_hold_the_verdict_off_for_a_whole_window():
    """The server reports an engine's last steps a moment after they ran: counters moved 2 s after
    the thread was seen hot, then froze. Frozen for the last half window with work pending is enough."""
    late = [Sample(T, "", m.ITERATIONS, 100.0 if t < NOW - 7 else 107.0, t) for t in seconds(NOW - 30, NOW)]
    f = busy_loop.evaluate(view(thread(since=NOW - 9), late, gauges(running=2)), CFG)
    assert f is not None and f.confirmed and f.signals["reason"] == "counters_frozen"


def test_counters_that_moved_within_the_last_half_window_are_progress():
    moving = [Sample(T, "", m.ITERATIONS, 100.0 if t < NOW - 3 else 107.0, t) for t in seconds(NOW - 30, NOW)]
    assert busy_loop.evaluate(view(thread(since=NOW - 9), moving, gauges(running=2)), CFG) is None
