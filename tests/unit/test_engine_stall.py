"""engine_stall: no progress with no hot thread fires; load, idle, grace and spins do not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vllm_guardian.config.schema_detectors import DetectorsConfig, EngineStallConfig
from vllm_guardian.detectors import engine_stall
from vllm_guardian.model import Kind, Sample, Severity, Subject
from vllm_guardian.series import metrics as m
from tests.support.detector_world import NOW, T, canary, gauges, seconds
from tests.support.detector_world import make_view as view

CFG = DetectorsConfig()  # engine_stall window 20 s


def counters(advancing: bool, since=NOW - 40, until=NOW):
    return [
        Sample(T, "", metric, (t * 7 if advancing else 4242.0), t)
        for t in seconds(since, until)
        for metric in (m.ITERATIONS, m.GEN_TOKENS, m.SUCCESS)
    ]


def thread(cpu: float, pid=200, tid=200, since=NOW - 10, until=NOW):
    subj = Subject(pid, tid).key
    return [
        s
        for t in seconds(since, until)
        for s in (
            Sample(T, subj, m.THREAD_CPU, cpu, t),
            Sample(T, subj, m.THREAD_VOL_RATE, 0.0, t),
            Sample(T, subj, m.THREAD_RUNNING, 1.0 if cpu > 0.5 else 0.0, t),
        )
    ]


# ------------------------------------------------------------------ confirmed
CONFIRMED = {
    "frozen with work pending for the window, threads blocked": (
        [counters(False), gauges(running=3), thread(cpu=0.0)],
        "counters_frozen",
    ),
    "frozen with work pending, no thread samples at all": (
        [counters(False), gauges(running=0, waiting=5)],
        "counters_frozen",
    ),
    "canary timed out with frozen counters, gauges frozen at 0": (
        [counters(False), gauges(running=0), canary(NOW - 8, NOW - 3, answered=False)],
        "canary_timeout",
    ),
}


@pytest.mark.parametrize("series, reason", CONFIRMED.values(), ids=CONFIRMED.keys())
def test_confirmed(series, reason):
    f = engine_stall.evaluate(view(*series), CFG)
    assert f is not None and f.confirmed
    assert f.kind is Kind.ENGINE_STALL and f.severity is Severity.CRITICAL
    assert f.signals["reason"] == reason
    assert f.subject == "p200"
    assert (f.signals["pid"], f.signals["role"]) == (200, "engine_core")


def test_canary_timeout_signals_its_latency():
    f = engine_stall.evaluate(view(counters(False), canary(NOW - 8, NOW - 3, answered=False)), CFG)
    assert f is not None
    assert f.signals["canary_latency_s"] == 5.0
    assert "canary timed out after 5.0s" in f.summary


# ------------------------------------------------------------------ must not fire
QUIET = {
    "a hot thread is present (busy_loop's case)": dict(series=[counters(False), gauges(running=3), thread(cpu=1.0)]),
    "canary timed out but counters advanced during its flight (heavy load)": dict(
        series=[counters(True), gauges(running=64, waiting=200), canary(NOW - 8, NOW - 3, answered=False)]
    ),
    "idle: nothing pending, canary answered": dict(
        series=[counters(False), gauges(running=0), canary(NOW - 5, NOW - 4.9, answered=True)]
    ),
    "idle: nothing pending, no canary": dict(series=[counters(False), gauges(running=0)]),
    "startup grace": dict(series=[counters(False), gauges(running=3)], ready=False),
    "API server gone (engine_dead's case)": dict(series=[counters(False), gauges(running=3)], api_alive=False),
    "work pending and progressing": dict(series=[counters(True), gauges(running=3)]),
    "a timed-out canary followed by an answered one": dict(
        series=[
            counters(False),
            gauges(running=0),
            canary(NOW - 15, NOW - 10, answered=False),
            canary(NOW - 6, NOW - 5.5, answered=True),
        ]
    ),
    "a canary that timed out before the window": dict(
        series=[counters(False), gauges(running=0), canary(NOW - 30, NOW - 25, answered=False)]
    ),
}


@pytest.mark.parametrize("case", QUIET.values(), ids=QUIET.keys())
def test_quiet(case):
    kw = dict(case)
    series = kw.pop("series")
    assert engine_stall.evaluate(view(*series, **kw), CFG) is None


# ------------------------------------------------------------------ suspect (unconfirmed)
def test_suspect_when_work_is_pending_and_frozen_for_a_few_seconds_only():
    series = [counters(False), gauges(running=0, until=NOW - 6), gauges(running=2, since=NOW - 5)]
    f = engine_stall.evaluate(view(*series), CFG)
    assert f is not None and f.confirmed is False
    assert f.signals["reason"] == "suspect"


def test_suspect_when_pending_samples_do_not_span_the_window():
    series = [counters(False), gauges(running=2, since=NOW - 10)]  # 11 s of a 20 s window
    f = engine_stall.evaluate(view(*series), CFG)
    assert f is not None and f.confirmed is False


def test_window_comes_from_the_config():
    cfg = replace(CFG, engine_stall=EngineStallConfig(window=10.0))
    series = [counters(False), gauges(running=2, since=NOW - 10)]
    f = engine_stall.evaluate(view(*series), cfg)
    assert f is not None and f.confirmed and f.signals["window"] == 10.0


def test_a_hot_process_whose_threads_are_not_read_yet_is_not_a_stall():
    """The first tick of a spin: process CPU is known, per-thread rates are not (they need two
    readings). A canary that times out then must not be blamed on a stall."""
    hot_process = [Sample(T, Subject(200).key, m.PROC_CPU, 1.0, t) for t in (NOW - 1, NOW)]
    v = view(counters(False), canary(NOW - 1, NOW, answered=False), hot_process)
    assert engine_stall.evaluate(v, CFG) is None


def test_a_hot_process_whose_threads_are_read_and_cool_can_still_stall():
    """Several lukewarm threads summing to a hot process are not a spin: the stall stands."""
    hot_process = [Sample(T, Subject(200).key, m.PROC_CPU, 1.0, t) for t in (NOW - 1, NOW)]
    v = view(counters(False), canary(NOW - 6, NOW - 1, answered=False), hot_process, thread(cpu=0.3))
    f = engine_stall.evaluate(v, CFG)
    assert f is not None and f.confirmed


def test_an_old_timeout_does_not_outlive_a_recovery():
    """A canary timed out during a busy loop; the spin ended and the engine works through its
    backlog: the counters moving since the timeout clear it (no stall right after a recovery)."""
    frozen_then_moving = [
        Sample(T, "", m.ITERATIONS, 100.0 if t < NOW - 3 else 100.0 + (t - NOW + 3) * 5, t)
        for t in seconds(NOW - 30, NOW)
    ]
    v = view(frozen_then_moving, canary(NOW - 12, NOW - 7, answered=False), gauges(running=0))
    assert engine_stall.evaluate(v, CFG) is None


def test_a_canary_timeout_while_a_thread_has_been_hot_only_a_few_seconds_is_busy_loops_case():
    # a guardian started beside a spinning engine: its first canary times out before the hot
    # thread covers busy_loop's window; that is a spin being confirmed, not a stall
    series = [counters(False), canary(NOW - 6, NOW - 1, answered=False), thread(cpu=1.0, since=NOW - 4)]
    assert engine_stall.evaluate(view(*series), CFG) is None
    from vllm_guardian.detectors import busy_loop

    assert busy_loop.evaluate(view(*series), CFG) is not None  # ...a busy_loop suspect


# ------------------------------------------------------------------ data parallel: each rank on its own
def dp_world(*series, rank1_moving=False, rank1_pending=2.0, rank1_pending_since=NOW - 30, server_moving=True):
    """A DP=2 server (API server, coordinator, EngineCore_DP0 pid 200, EngineCore_DP1 pid 201):
    rank 0 serves (its and the server's counters advance), rank 1 as told."""
    from tests.support.detector_world import API, TARGET
    from vllm_guardian.model import ProcessInfo, ProcKey, Role

    coordinator = ProcessInfo(ProcKey(300, 33), 100, Role.OTHER, ("VLLM::DPCoordinator",))
    dp0 = ProcessInfo(ProcKey(200, 22), 100, Role.ENGINE_CORE, ("VLLM::EngineCore_DP0",))
    dp1 = ProcessInfo(ProcKey(201, 23), 100, Role.ENGINE_CORE, ("VLLM::EngineCore_DP1",))
    per_engine = []
    for e, moving, pending, since in (
        ("engine:0", True, 2.0, NOW - 40),
        ("engine:1", rank1_moving, rank1_pending, rank1_pending_since),
    ):
        per_engine += [Sample(T, e, m.ITERATIONS, (t * 7 if moving else 4242.0), t) for t in seconds(NOW - 40, NOW)]
        per_engine += [
            s
            for t in seconds(NOW - 40, NOW)
            for s in (
                Sample(T, e, m.REQ_RUNNING, pending if t >= since else 0.0, t),
                Sample(T, e, m.REQ_WAITING, 0.0, t),
            )
        ]
    world = [counters(server_moving), gauges(running=2 + rank1_pending), per_engine, *series]
    return view(*world, target=replace(TARGET, processes=(API, coordinator, dp0, dp1)))


COOL_DP1 = thread(cpu=0.0, pid=201, tid=201)  # rank 1's threads read, and none is hot

RANK_STALLS = {
    "rank 1 frozen with work pending while rank 0 serves": (dp_world(), "counters_frozen"),
    "...while rank 0's decode thread is hot (the other rank's load is not rank 1's excuse)": (
        dp_world(thread(cpu=1.0, pid=200, tid=200)),
        "counters_frozen",
    ),
    "rank 1 frozen, its work pending for less than the window, a canary timed out meanwhile": (
        dp_world(canary(NOW - 7, NOW - 2, answered=False), COOL_DP1, rank1_pending_since=NOW - 8),
        "canary_timeout",
    ),
    "rank 1 frozen showing nothing pending (it hung before reporting), a canary sent to it timed out": (
        dp_world(canary(NOW - 7, NOW - 2, answered=False, rank=1), COOL_DP1, rank1_pending=0.0),
        "canary_timeout",
    ),
}


@pytest.mark.parametrize("v, reason", RANK_STALLS.values(), ids=RANK_STALLS.keys())
def test_one_rank_stalled_while_the_other_serves_is_a_stall_of_that_rank(v, reason):
    f = engine_stall.evaluate(v, CFG)
    assert f is not None and f.confirmed and f.signals["reason"] == reason
    assert (f.signals["engine"], f.signals["dp_rank"], f.signals["pid"], f.subject) == ("engine:1", 1, 201, "p201")
    assert f.signals["process_title"] == "VLLM::EngineCore_DP1"


def test_a_stalled_rank_is_named_in_the_summary():
    f = engine_stall.evaluate(dp_world(), CFG)
    assert f is not None
    assert f.summary.startswith(
        "EngineCore_DP1 makes no progress and no thread is hot: counters frozen with 2 requests"
    )


RANK_QUIET = {
    "both ranks serve": dp_world(rank1_moving=True),
    "rank 1 idle (nothing pending) while rank 0 serves": dp_world(rank1_pending=0.0),
    "rank 1 idle and a canary timed out (it reached rank 0, which serves)": dp_world(
        canary(NOW - 7, NOW - 2, answered=False), rank1_pending=0.0
    ),
    "rank 1 frozen with a hot thread of its own (busy_loop's case)": dp_world(thread(cpu=1.0, pid=201, tid=201)),
    "rank 1 frozen while the API server spins (shared by every rank: busy_loop's case)": dp_world(
        thread(cpu=1.0, pid=100, tid=100)
    ),
    "rank 1 frozen while the coordinator spins (shared by every rank)": dp_world(thread(cpu=1.0, pid=300, tid=300)),
    "rank 1 idle, a canary sent to rank 0 timed out (rank 0's business, and rank 0 moves)": dp_world(
        canary(NOW - 7, NOW - 2, answered=False, rank=0), rank1_pending=0.0
    ),
}


@pytest.mark.parametrize("v", RANK_QUIET.values(), ids=RANK_QUIET.keys())
def test_a_rank_is_not_a_stall(v):
    assert engine_stall.evaluate(v, CFG) is None


def test_a_rank_frozen_with_work_for_a_few_seconds_only_is_a_suspect_of_that_rank():
    f = engine_stall.evaluate(dp_world(rank1_pending_since=NOW - 4), CFG)
    assert f is not None and not f.confirmed
    assert (f.signals["reason"], f.signals["dp_rank"]) == ("suspect", 1)


def test_a_canary_sent_to_another_rank_does_not_confirm_a_frozen_rank():
    v = dp_world(canary(NOW - 7, NOW - 2, answered=False, rank=0), rank1_pending_since=NOW - 8)
    f = engine_stall.evaluate(v, CFG)
    assert f is not None and not f.confirmed and f.signals["dp_rank"] == 1


def test_a_canary_timeout_on_a_rank_whose_threads_are_not_read_yet_is_only_a_suspect():
    """A spinner starved of CPU on a busy node reads cool as a process, so its threads are read
    only once the target is suspected: until they are, the timeout may be busy_loop's case."""
    f = engine_stall.evaluate(dp_world(canary(NOW - 7, NOW - 2, answered=False, rank=1), rank1_pending=0.0), CFG)
    assert f is not None and not f.confirmed and f.signals["dp_rank"] == 1


def test_a_whole_server_frozen_behind_one_rank_in_trouble_is_named_after_that_rank():
    """Every client stuck behind the hung rank: the server's canary verdict comes before the rank's
    own (its threads not read yet); the finding names the rank that is a suspect, not rank 0."""
    v = dp_world(canary(NOW - 7, NOW - 2, answered=False, rank=1), rank1_pending_since=NOW - 8, server_moving=False)
    f = engine_stall.evaluate(v, CFG)
    assert f is not None and f.confirmed and "engine" not in f.signals  # the server's own verdict
    assert (f.signals["dp_rank"], f.signals["pid"], f.subject) == (1, 201, "p201")
    assert f.summary.startswith("EngineCore_DP1 makes no progress")
