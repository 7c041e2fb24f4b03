"""engine_stall in one API-server process of vLLM's: its event loop (the main thread) has not run
at all for half the stall window, though the other API servers serve the port, canaries are
answered and the engine progresses. A serving event loop runs ~10 times a second even idle
(uvicorn's tick); a spinning one runs all the time (busy_loop's case); only a blocked one stands
still."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors import engine_stall
from vllm_guardian.model import Kind, ProcessInfo, ProcKey, Role, Sample, Subject, Target
from vllm_guardian.series import metrics as m
from tests.support.detector_world import API, ENGINE, NOW, T, canary, gauges, seconds
from tests.support.detector_world import make_view as view

CFG = DetectorsConfig()
APIS = tuple(ProcessInfo(ProcKey(300 + i, 30 + i), 100, Role.API_SERVER, (f"VLLM::APIServer_{i}",)) for i in range(2))
MULTI = Target(T, API.key, (API, *APIS, ENGINE), port=8000)


def main_thread_runs(pid: int, cpu_per_s: float, since: float = NOW - 20, until: float = NOW) -> list[Sample]:
    """The main thread's time on a CPU, sampled every second (``cpu_per_s`` = 0: it never ran)."""
    return [
        Sample(T, Subject(pid).key, m.PROC_MAIN_RUN_S, 3.5 + cpu_per_s * (t - since), t) for t in seconds(since, until)
    ]


def serving(*pids: int) -> list[Sample]:
    return [s for pid in pids for s in main_thread_runs(pid, 0.002)]


def engine_advancing() -> list[Sample]:
    return [Sample(T, "", m.ITERATIONS, t * 7, t) for t in seconds(NOW - 30, NOW)] + gauges(running=4)


def test_an_api_server_whose_event_loop_never_runs_is_a_stall_naming_its_process():
    series = [main_thread_runs(301, 0.0), serving(300), engine_advancing(), canary(NOW - 8, NOW - 7.9, True)]
    f = engine_stall.evaluate(view(*series, target=MULTI), CFG)
    assert f is not None and f.kind is Kind.ENGINE_STALL and f.confirmed
    assert f.signals["reason"] == "event_loop_frozen"
    assert (f.signals["pid"], f.signals["role"], f.signals["process_title"]) == (301, "api_server", "VLLM::APIServer_1")
    assert f.subject == "p301"
    assert (
        f.summary
        == "APIServer_1 serves nothing: its event loop (pid 301) has not run for 10s (it accepts and answers nothing)"
    )


def test_one_api_server_titled_by_vllm_beside_its_engine_is_judged_the_same():
    titled = replace(API, cmdline=("VLLM::APIServer",))
    single = Target(T, titled.key, (titled, ENGINE), port=8000)
    f = engine_stall.evaluate(view(main_thread_runs(100, 0.0), engine_advancing(), target=single), CFG)
    assert f is not None and f.signals["reason"] == "event_loop_frozen" and f.signals["pid"] == 100


QUIET = {
    "every event loop runs": [serving(300, 301), engine_advancing()],
    "main thread unreadable: no samples": [serving(300), engine_advancing()],
    "frozen, but sampled only for the last 5 s": [
        serving(300),
        main_thread_runs(301, 0.0, since=NOW - 5),
        engine_advancing(),
    ],
    "frozen samples stale (the last one 5 s ago)": [
        serving(300),
        main_thread_runs(301, 0.0, until=NOW - 5),
        engine_advancing(),
    ],
    "ran once in the last 10 s": [
        serving(300),
        [Sample(T, "p301", m.PROC_MAIN_RUN_S, 3.5 if t <= NOW - 4 else 3.6, t) for t in seconds(NOW - 20, NOW)],
        engine_advancing(),
    ],
}


@pytest.mark.parametrize("series", QUIET.values(), ids=QUIET.keys())
def test_no_stall(series):
    assert engine_stall.evaluate(view(*series, target=MULTI), CFG) is None


def test_the_launcher_that_serves_no_http_is_not_judged_by_its_main_thread():
    """vLLM's launcher (``vllm serve`` holding the socket) waits on its children: it may sleep for long."""
    assert (
        engine_stall.evaluate(
            view(main_thread_runs(100, 0.0), serving(300, 301), engine_advancing(), target=MULTI), CFG
        )
        is None
    )


def test_an_api_server_without_a_separate_engine_is_not_judged_by_its_main_thread():
    titled = replace(API, cmdline=("VLLM::APIServer",))
    alone = Target(T, titled.key, (titled,), port=8000)
    assert engine_stall.evaluate(view(main_thread_runs(100, 0.0), engine_advancing(), target=alone), CFG) is None


@pytest.mark.parametrize(
    "state",
    [
        {"ready": False},
        {"api_alive": False},
    ],
    ids=["during startup", "once the API server is gone"],
)
def test_never_judged(state):
    series = [main_thread_runs(301, 0.0), serving(300), engine_advancing()]
    assert engine_stall.evaluate(view(*series, target=MULTI, **state), CFG) is None


def test_never_while_paused_on_purpose():
    v = view(main_thread_runs(301, 0.0), serving(300), engine_advancing(), target=MULTI)
    paused = replace(v, state=replace(v.state, hold="paused", hold_since=NOW - 30))
    assert engine_stall.evaluate(paused, CFG) is None


def test_the_frozen_span_is_half_the_configured_stall_window():
    cfg = replace(CFG, engine_stall=replace(CFG.engine_stall, window=40.0))
    fifteen = [main_thread_runs(301, 0.0, since=NOW - 15), serving(300), engine_advancing()]
    assert engine_stall.evaluate(view(*fifteen, target=MULTI), cfg) is None
    twenty = [main_thread_runs(301, 0.0, since=NOW - 20), serving(300), engine_advancing()]
    f = engine_stall.evaluate(view(*twenty, target=MULTI), cfg)
    assert f is not None and f.signals["event_loop_frozen_s"] == 20.0
