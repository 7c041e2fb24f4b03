"""busy_loop in one API-server process of ``--api-server-count N``: its event loop's own syscall
count, frozen while hot, proves no progress though the engine advances; the engine is judged as
before (a healthy engine may spin without syscalls)."""

from __future__ import annotations

import pytest

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors import busy_loop
from vllm_guardian.model import Kind, ProcessInfo, ProcKey, Role, Sample, Subject, Target
from vllm_guardian.series import metrics as m
from tests.support.detector_world import API, ENGINE, NOW, T, gauges, seconds
from tests.support.detector_world import make_view as view

CFG = DetectorsConfig()
APIS = tuple(ProcessInfo(ProcKey(300 + i, 30 + i), 100, Role.API_SERVER, (f"VLLM::APIServer_{i}",)) for i in range(2))
MULTI = Target(T, API.key, (API, *APIS, ENGINE), port=8000)


def hot(pid: int, tid: int | None = None, since: float = NOW - 10) -> list[Sample]:
    """A spinning thread: a whole core, no voluntary switch, always ``running``."""
    subj = Subject(pid, pid if tid is None else tid).key
    return [
        Sample(T, subj, metric, value, t)
        for t in seconds(since, NOW)
        for metric, value in ((m.THREAD_CPU, 1.0), (m.THREAD_VOL_RATE, 0.0), (m.THREAD_RUNNING, 1.0))
    ]


def syscalls(pid: int, per_s: float, tid: int | None = None, since: float = NOW - 10) -> list[Sample]:
    subj = Subject(pid, pid if tid is None else tid).key
    return [Sample(T, subj, m.THREAD_SYSCALLS, 5000.0 + per_s * (t - since), t) for t in seconds(since, NOW)]


def engine_advancing() -> list[Sample]:
    return [Sample(T, "", m.ITERATIONS, t * 7, t) for t in seconds(NOW - 30, NOW)] + gauges(running=4)


def engine_frozen() -> list[Sample]:
    return [Sample(T, "", m.ITERATIONS, 4242.0, t) for t in seconds(NOW - 30, NOW)] + gauges(running=2)


def test_a_hot_api_server_event_loop_with_frozen_syscalls_is_a_busy_loop_naming_its_process():
    f = busy_loop.evaluate(view(hot(301), syscalls(301, 0.0), engine_advancing(), target=MULTI), CFG)
    assert f is not None and f.kind is Kind.BUSY_LOOP and f.confirmed
    assert f.signals["reason"] == "syscalls_frozen"
    assert (f.signals["pid"], f.signals["process_title"], f.subject) == (301, "VLLM::APIServer_1", "p301/t301")
    assert f.summary.startswith(
        "APIServer_1 (pid 301) event loop thread 301 spins at 100% CPU with no syscall for 5.0s"
    )


QUIET = {
    "saturated but serving: syscalls move": [hot(301), syscalls(301, 800.0), engine_advancing()],
    "io unreadable: syscall count absent": [hot(301), engine_advancing()],
    "syscalls sampled only for the last 2 s: not covered": [
        hot(301),
        syscalls(301, 0.0, since=NOW - 2),
        engine_advancing(),
    ],
    "syscall samples stale (the last one 5 s ago)": [
        hot(301),
        [s for s in syscalls(301, 0.0) if s.t <= NOW - 5],
        engine_advancing(),
    ],
    "a worker thread, not the event loop, hot without syscalls": [
        hot(301, tid=305),
        syscalls(301, 0.0, tid=305),
        engine_advancing(),
    ],
}


@pytest.mark.parametrize("series", QUIET.values(), ids=QUIET.keys())
def test_no_busy_loop(series):
    assert busy_loop.evaluate(view(*series, target=MULTI), CFG) is None


def test_an_api_server_that_is_the_only_process_may_be_the_engine_and_is_not_judged_by_syscalls():
    alone = Target(T, API.key, (API,), port=8000)
    assert busy_loop.evaluate(view(hot(100), syscalls(100, 0.0), engine_advancing(), target=alone), CFG) is None


def test_an_engine_thread_without_syscalls_is_judged_on_the_engine_counters_as_before():
    series = [hot(200), syscalls(200, 0.0)]
    assert busy_loop.evaluate(view(*series, engine_advancing(), target=MULTI), CFG) is None
    f = busy_loop.evaluate(view(*series, engine_frozen(), target=MULTI), CFG)
    assert f is not None and f.signals["reason"] == "counters_frozen" and f.subject == "p200/t200"


def test_a_spinning_api_server_is_named_though_a_busy_engine_is_hotter():
    series = [hot(200), hot(301), syscalls(301, 0.0), engine_advancing()]
    f = busy_loop.evaluate(view(*series, target=MULTI), CFG)
    assert f is not None and f.subject == "p301/t301"


def test_a_spin_hot_for_under_half_the_window_is_not_yet_concluded_from_syscalls():
    series = [hot(301, since=NOW - 3), syscalls(301, 0.0, since=NOW - 3), engine_advancing()]
    assert busy_loop.evaluate(view(*series, target=MULTI), CFG) is None
