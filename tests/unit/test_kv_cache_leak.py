"""kv_cache_leak: KV-cache usage stays above the idle baseline while nothing runs or waits,
or the idle floor climbs across idle periods."""

from __future__ import annotations

import pytest

from vllm_guardian.config.schema_detectors import DetectorsConfig, KvCacheLeakConfig
from vllm_guardian.detectors import DETECTORS, kv_cache_leak
from vllm_guardian.detectors.view import TargetState, TargetView
from vllm_guardian.model import Kind, ProcessInfo, ProcKey, Role, Sample, Severity, Target
from vllm_guardian.series import metrics as m
from vllm_guardian.series.store import SeriesStore

T = "llm"
START = 1000.0
API = ProcessInfo(ProcKey(100, 1), 1, Role.API_SERVER, ("vllm", "serve"))
TARGET = Target(T, API.key, (API,), port=8000)
CFG = DetectorsConfig()

# segments: (seconds, running, waiting, kv usage)
IDLE_CLEAN = (40, 0, 0, 0.0)
BUSY = (30, 4, 1, 0.6)


def timeline(*segments, kv_every: int = 1) -> tuple[SeriesStore, float]:
    """One gauge scrape per second through the segments; returns the store and the last time."""
    store = SeriesStore(horizon=600.0)
    t = START
    for seconds, running, waiting, kv in segments:
        for _ in range(seconds):
            store.add(Sample(T, "", m.REQ_RUNNING, running, t))
            store.add(Sample(T, "", m.REQ_WAITING, waiting, t))
            if int(t - START) % kv_every == 0:
                store.add(Sample(T, "", m.KV_USAGE, kv, t))
            t += 1.0
    return store, t - 1.0


def evaluate(store: SeriesStore, now: float, cfg: DetectorsConfig = CFG, **kw):
    args = {"ready": True, "api_alive": True, "ready_since": START, **kw}
    st = TargetState(
        target=TARGET,
        now=now,
        ever_ready=True,
        gone_since=None,
        engine_alive=True,
        canary_in_flight_since=None,
        probe_interval=1.0,
        **args,
    )
    return kv_cache_leak.evaluate(TargetView(st, store), cfg)


def test_registered_in_the_detector_table():
    assert DETECTORS[Kind.KV_CACHE_LEAK] is kv_cache_leak.evaluate


# ------------------------------------------------------------------ stuck above the baseline
def test_usage_held_while_idle_for_a_window_fires_against_a_clean_earlier_idle():
    f = evaluate(*timeline(IDLE_CLEAN, BUSY, (61, 0, 0, 0.3)))
    assert (f.kind, f.severity, f.confirmed, f.signals["reason"]) == (
        Kind.KV_CACHE_LEAK,
        Severity.WARNING,
        True,
        "stuck_above_baseline",
    )
    assert (f.signals["usage"], f.signals["baseline"], f.signals["idle_for_s"]) == (0.3, 0.0, 60.0)
    assert "30%" in f.summary


def test_first_idle_period_is_judged_against_zero():
    f = evaluate(*timeline(BUSY, (61, 0, 0, 0.25)))
    assert (f.signals["baseline"], f.signals["earlier_idle_periods"]) == (0.0, 0)


def test_fires_once_the_window_of_idleness_is_complete():
    store, now = timeline(BUSY, (90, 0, 0, 0.3))
    first_idle = START + 30
    fired = [t for t in range(int(first_idle), int(now) + 1) if evaluate(store, float(t)) is not None]
    assert fired[0] == first_idle + CFG.kv_cache_leak.window


@pytest.mark.parametrize(
    "segments",
    [
        (BUSY, (61, 0, 0, 0.05)),
        (BUSY, (30, 0, 0, 0.3)),
        (IDLE_CLEAN, BUSY, (61, 4, 0, 0.9)),
        (IDLE_CLEAN, BUSY, (61, 0, 3, 0.9)),
        (IDLE_CLEAN, BUSY, (30, 0, 0, 0.3), (1, 0, 0, 0.0), (30, 0, 0, 0.3)),
        ((40, 0, 0, 0.3), BUSY, (61, 0, 0, 0.3)),
        (IDLE_CLEAN, BUSY, (61, 0, 0, 0.0)),
    ],
    ids=[
        "below the margin",
        "idle less than a window",
        "requests running",
        "requests waiting",
        "dipped to the baseline within the window",
        "same level as an earlier idle period",
        "back to the baseline",
    ],
)
def test_no_finding(segments):
    assert evaluate(*timeline(*segments)) is None


def test_margin_comes_from_config():
    cfg = DetectorsConfig(kv_cache_leak=KvCacheLeakConfig(margin=0.5))
    assert evaluate(*timeline(BUSY, (61, 0, 0, 0.3)), cfg=cfg) is None


def test_baseline_is_the_lowest_earlier_idle_usage():
    f = evaluate(*timeline((40, 0, 0, 0.05), BUSY, (40, 0, 0, 0.1), BUSY, (61, 0, 0, 0.4)))
    assert (f.signals["baseline"], f.signals["earlier_idle_periods"]) == (0.05, 2)


def test_idle_periods_before_ready_since_are_forgotten():
    store, now = timeline((40, 0, 0, 0.4), BUSY, (61, 0, 0, 0.4))
    assert evaluate(store, now) is None  # the earlier idle period at 0.4 is the baseline
    assert evaluate(store, now, ready_since=START + 40) is not None  # a restart: judged against 0


# ------------------------------------------------------------------ idle floor climbing
def test_idle_floor_climbing_across_three_idle_periods_fires():
    f = evaluate(*timeline((20, 0, 0, 0.02), BUSY, (20, 0, 0, 0.05), BUSY, (20, 0, 0, 0.08)))
    assert f.signals["reason"] == "idle_floor_climbing"
    assert f.signals["idle_floors"] == [0.02, 0.05, 0.08]
    assert "2% -> 5% -> 8%" in f.summary


@pytest.mark.parametrize(
    "floors",
    [(0.02, 0.05, 0.05), (0.05, 0.02, 0.08), (0.0, 0.0, 0.0), (0.02, 0.03, 0.04)],
    ids=["flat step", "not monotonic", "clean", "rise below half the margin"],
)
def test_idle_floor_that_does_not_climb_enough(floors):
    segments = []
    for fl in floors:
        segments += [(20, 0, 0, fl), BUSY]
    assert evaluate(*timeline(*segments[:-1])) is None


def test_climbing_needs_the_current_idle_period_to_settle():
    store, now = timeline((20, 0, 0, 0.02), BUSY, (20, 0, 0, 0.05), BUSY, (5, 0, 0, 0.08))
    assert evaluate(store, now) is None


def test_one_idle_scrape_between_requests_is_not_an_idle_period():
    segments = [(20, 0, 0, 0.02), BUSY, (1, 0, 0, 0.05), BUSY, (20, 0, 0, 0.05), BUSY, (20, 0, 0, 0.08)]
    f = evaluate(*timeline(*segments))
    assert f.signals["idle_floors"] == [0.02, 0.05, 0.08]


# ------------------------------------------------------------------ when it does not judge
@pytest.mark.parametrize("kw", [{"ready": False}, {"api_alive": False}], ids=["not ready", "api server gone"])
def test_not_judged_without_a_ready_target(kw):
    assert evaluate(*timeline(BUSY, (61, 0, 0, 0.3)), **kw) is None


def test_stale_gauges_are_not_judged():
    store, now = timeline(BUSY, (61, 0, 0, 0.3))
    assert evaluate(store, now + 10) is None


def test_no_kv_series_no_finding():
    store = SeriesStore()
    for i in range(100):
        store.add(Sample(T, "", m.REQ_RUNNING, 0, START + i))
        store.add(Sample(T, "", m.REQ_WAITING, 0, START + i))
    assert evaluate(store, START + 99) is None
