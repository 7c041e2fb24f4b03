"""host_memory_leak: the summed RSS of the target's current processes rises steadily after
warm-up with no new load; the finding names the process growing fastest."""

from __future__ import annotations

from typing import Callable, Mapping

import pytest

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors import DETECTORS, host_memory_leak
from vllm_guardian.detectors.view import TargetState, TargetView
from vllm_guardian.model import Finding, Kind, ProcessInfo, ProcKey, Role, Sample, Severity, Target
from vllm_guardian.series import metrics as m
from vllm_guardian.series.store import SeriesStore
from vllm_guardian.testing.curves import curve

READY = 1000.0
T = "llm"
MB = 1e6
API = ProcessInfo(ProcKey(100, 1), 1, Role.API_SERVER, ("vllm", "serve"))
ENGINE = ProcessInfo(ProcKey(150, 2), 100, Role.ENGINE_CORE, ("VLLM::EngineCore",))
WORKER = ProcessInfo(ProcKey(200, 3), 150, Role.WORKER, ("VLLM::Worker_TP0",))
WORKER2 = ProcessInfo(ProcKey(201, 4), 150, Role.WORKER, ("VLLM::Worker_TP1",))
TARGET = Target(T, API.key, (API, ENGINE, WORKER), port=8000)
CFG = DetectorsConfig()
FLAT = {100: 1e9, 150: 3e9, 200: 6e9}
LEAK_8 = {"curve": "linear", "start": 6e9, "rate": 8 * MB}


def run(
    rss: Mapping[int, object],
    until: float,
    *,
    target: Target = TARGET,
    since: float = 1.0,
    running: Callable[[float], float] = lambda r: 2.0,
    starts: Mapping[int, float] | None = None,
    **state_kw,
) -> list[tuple[float, Finding]]:
    """Feed every pid's RSS (a curve spec or f(seconds)) each second from ``since`` and evaluate
    each tick; ``starts`` delays a pid's first sample. Returns (time, finding) of every firing."""
    fns = {pid: (v if callable(v) else curve(v).value) for pid, v in rss.items()}
    starts = starts or {}
    store = SeriesStore(horizon=270.0, horizons=SeriesStore.memory_horizons(CFG))
    out: list[tuple[float, Finding]] = []
    r = since
    while r <= until + 1e-9:
        t = READY + r
        for pid, fn in fns.items():
            if r >= starts.get(pid, 0.0):
                store.add(Sample(T, f"p{pid}", m.PROC_RSS, fn(r), t))
        store.add(Sample(T, "", m.REQ_RUNNING, running(r), t))
        kw = {"ready": True, "ready_since": READY, "api_alive": True, **state_kw}
        st = TargetState(
            target=target,
            now=t,
            ever_ready=True,
            gone_since=None,
            engine_alive=True,
            canary_in_flight_since=None,
            probe_interval=1.0,
            **kw,
        )
        f = host_memory_leak.evaluate(TargetView(st, store), CFG)
        if f is not None:
            out.append((r, f))
        r += 1.0
    return out


def test_registered_in_the_detector_table():
    assert DETECTORS[Kind.HOST_MEMORY_LEAK] is host_memory_leak.evaluate


def test_a_leaking_worker_fires_and_is_named():
    fired = run({**FLAT, 200: LEAK_8}, 500)
    first, f = fired[0]
    assert 365 <= first <= 375  # rising since ready: the longest warm-up, then 80 % of the window
    assert (f.kind, f.severity, f.subject) == (Kind.HOST_MEMORY_LEAK, Severity.WARNING, "p200")
    s = f.signals
    assert (s["pid"], s["role"]) == (200, "worker")
    assert s["slope_bytes_per_s"] == pytest.approx(8 * MB) and s["process_slope_bytes_per_s"] == pytest.approx(8 * MB)
    assert s["current_bytes"] == pytest.approx(1e9 + 3e9 + 6e9 + first * 8 * MB)
    assert s["projected_exhaustion_s"] is None  # no host total in the series
    assert "Worker pid 200" in f.summary


def test_the_sum_over_processes_is_judged():
    slow = {"curve": "linear", "start": 6e9, "rate": 3 * MB}  # each below the 5 MB/s threshold
    target = Target(T, API.key, (API, ENGINE, WORKER, WORKER2))
    fired = run({100: 1e9, 150: 3e9, 200: slow, 201: slow}, 500, target=target)
    assert fired and fired[-1][1].signals["slope_bytes_per_s"] == pytest.approx(6 * MB)


def test_a_process_appearing_mid_window_is_not_a_jump():
    target = Target(T, API.key, (API, ENGINE, WORKER, WORKER2))
    assert run({**FLAT, 201: 4e9}, 900, target=target, starts={201: 600}) == []


def test_a_process_no_longer_in_the_tree_is_ignored():
    assert run({**FLAT, 999: {"curve": "linear", "start": 1e9, "rate": 50 * MB}}, 600) == []


NEGATIVES = {
    "warm-up growth that levels off": {200: {"curve": "warmup", "start": 1e9, "value": 9e9, "duration": 280}},
    "single allocation step": {200: {"curve": "step", "before": 6e9, "after": 8e9, "at": 700}},
    "noisy flat": {200: {"curve": "noisy", "value": 6e9, "noise": 150 * MB, "seed": 9}},
    "flat": {},
    "warm-up that decelerates": {200: {"curve": "approach", "start": 1e9, "value": 9e9, "tau": 60}},
    "noisy warm-up that decelerates": {
        200: {"curve": "approach", "start": 1e9, "value": 9e9, "tau": 40, "noise": 100 * MB, "seed": 2}
    },
}


@pytest.mark.parametrize("name", sorted(NEGATIVES))
def test_no_false_positive_on_any_tick(name):
    assert run({**FLAT, **NEGATIVES[name]}, 1200) == []


@pytest.mark.parametrize("onset, within", [(20, 180), (1000, 90)], ids=["20 s after ready", "steady state"])
def test_a_leak_after_the_curve_levelled_off_is_reported_within(onset, within):
    fired = run({**FLAT, 200: dict(LEAK_8, after=onset)}, onset + within)
    assert fired and 30 <= fired[0][0] - onset <= within


def test_growth_that_tracks_load_is_not_a_leak():
    def running(r):
        return 2 + max(0.0, r - 500) / 10

    rss = {**FLAT, 200: lambda r: 6e9 + 80 * MB * (running(r) - 2)}
    assert run(rss, 1000, running=running) == []


@pytest.mark.parametrize(
    "kw",
    [{"ready": False}, {"ready_since": None}, {"api_alive": False}],
    ids=["not ready", "ready_since unknown", "api server gone"],
)
def test_not_judged_without_a_ready_target(kw):
    assert run({**FLAT, 200: LEAK_8}, 500, since=300, **kw) == []


@pytest.mark.parametrize(
    "per, same",
    [
        ([[(1.0, 10.0), (2.0, 11.0)], [(1.0, 5.0), (2.0, 7.0)]], True),
        ([[(1.0, 10.0), (2.0, 11.0)], [(2.0, 7.0)]], False),  # a process first read at 2
        ([[(1.0, 10.0), (2.5, 11.0)], [(1.0, 5.0), (2.0, 7.0)]], False),  # read at other times
    ],
    ids=["read together", "one appears later", "read apart"],
)
def test_series_read_together_sum_column_by_column_as_the_general_merge_does(per, same):
    assert host_memory_leak._same_times(per) is same
    if same:
        columns = [(col[0][0], float(sum(v for _, v in col))) for col in zip(*per, strict=True)]
        assert columns == host_memory_leak._merged(per)


def test_the_sum_of_processes_read_apart_holds_each_at_its_latest_value():
    per = [[(1.0, 10.0), (2.0, 11.0), (3.0, 12.0)], [(2.0, 7.0), (3.5, 8.0)]]
    assert host_memory_leak._merged(per) == [(2.0, 18.0), (3.0, 19.0), (3.5, 20.0)]
