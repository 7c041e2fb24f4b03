"""Shared builders for the detector tables: one target (API server + EngineCore) at NOW, and
series of samples one second apart. Each test file keeps only what is particular to it."""

from __future__ import annotations

from vllm_guardian.detectors.view import TargetState, TargetView
from vllm_guardian.model import ProcessInfo, ProcKey, Role, Sample, Target
from vllm_guardian.series import metrics as m
from vllm_guardian.series.store import SeriesStore

NOW = 1000.0
T = "llm"
API = ProcessInfo(ProcKey(100, 11), 1, Role.API_SERVER, ("vllm", "serve", "tiny"))
ENGINE = ProcessInfo(ProcKey(200, 22), 100, Role.ENGINE_CORE, ("VLLM::EngineCore",))
TARGET = Target(T, API.key, (API, ENGINE), port=8000)


def seconds(t0: float, t1: float) -> list[float]:
    return [t0 + i for i in range(int(round(t1 - t0)) + 1)]


def gauges(running: float, waiting: float = 0.0, since: float = NOW - 30, until: float = NOW) -> list[Sample]:
    return [
        s
        for t in seconds(since, until)
        for s in (Sample(T, "", m.REQ_RUNNING, running, t), Sample(T, "", m.REQ_WAITING, waiting, t))
    ]


def canary(start: float, end: float, answered: bool, rank: int | None = None) -> list[Sample]:
    """One finished canary; ``rank``: the data-parallel rank it was sent to (None: the server chose)."""
    return [
        Sample(T, "", m.CANARY_OK, 1.0 if answered else 0.0, end),
        Sample(T, "", m.CANARY_TIMEOUT, 0.0 if answered else 1.0, end),
        Sample(T, "", m.CANARY_LATENCY, end - start, end),
        Sample(T, "", m.CANARY_STARTED, start, end),
    ] + ([Sample(T, "", m.CANARY_RANK, float(rank), end)] if rank is not None else [])


def make_view(
    *series,
    target: Target = TARGET,
    ready: bool = True,
    ever_ready: bool = True,
    api_alive: bool = True,
    engine_alive: bool | None = True,
    in_flight: float | None = None,
    gone_for: float = 1.0,
) -> TargetView:
    store = SeriesStore()
    for samples in series:
        store.extend(samples)
    state = TargetState(
        target=target,
        now=NOW,
        ready=ready,
        ever_ready=ever_ready,
        api_alive=api_alive,
        gone_since=None if api_alive else NOW - gone_for,
        engine_alive=engine_alive,
        canary_in_flight_since=in_flight,
        probe_interval=1.0,
    )
    return TargetView(state, store)
