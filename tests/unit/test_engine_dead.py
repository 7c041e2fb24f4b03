"""engine_dead: server gone, engine gone, /health failing after ready; never in a first warm-up."""

from __future__ import annotations

import pytest

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors import engine_dead
from vllm_guardian.detectors.view import TargetView
from vllm_guardian.model import Kind, Sample, Severity
from vllm_guardian.series import metrics as m
from tests.support.detector_world import NOW, T, make_view

CFG = DetectorsConfig()


def health(*pairs: tuple[float, int]) -> list[Sample]:
    return [Sample(T, "", m.HEALTH_OK, float(v), t) for t, v in pairs]


def view(health_samples=(), *, ready=True, ever_ready=True, api_alive=True, engine_alive=True) -> TargetView:
    return make_view(
        list(health_samples),
        ready=ready,
        ever_ready=ever_ready,
        api_alive=api_alive,
        engine_alive=engine_alive,
        gone_for=4.0,
    )


CONFIRMED = {
    "API server gone after having been ready": (
        dict(api_alive=False, ready=False, engine_alive=False),
        "api_server_gone",
        "api_server",
    ),
    "EngineCore gone while the API server lives": (dict(engine_alive=False), "engine_core_gone", "engine_core"),
    "EngineCore gone during a first warm-up": (
        dict(engine_alive=False, ready=False, ever_ready=False),
        "engine_core_gone",
        "engine_core",
    ),
    "/health 503 (or refused) after ready": (
        dict(health_samples=health((NOW - 2, 1), (NOW - 1, 0))),
        "health_failed",
        "api_server",
    ),
    "/health refused while a restarted server warms up": (
        dict(health_samples=health((NOW - 1, 0)), ready=False),
        "health_failed",
        "api_server",
    ),
}


@pytest.mark.parametrize("kw, reason, role", CONFIRMED.values(), ids=CONFIRMED.keys())
def test_confirmed(kw, reason, role):
    f = engine_dead.evaluate(view(**kw), CFG)
    assert f is not None and f.confirmed
    assert f.kind is Kind.ENGINE_DEAD and f.severity is Severity.CRITICAL
    assert f.signals["reason"] == reason
    assert f.signals["role"] == role
    assert f.signals["api_pid"] == 100 and f.signals["engine_pids"] == [200]


def test_api_gone_reports_for_how_long():
    f = engine_dead.evaluate(view(api_alive=False), CFG)
    assert f is not None
    assert f.signals["gone_for_s"] == 4.0


QUIET = {
    "first warm-up: /health refused before ever ready": dict(
        health_samples=health((NOW - 1, 0)), ready=False, ever_ready=False
    ),
    "first warm-up: engine not yet seen": dict(ready=False, ever_ready=False, engine_alive=None),
    "API server gone before it was ever ready": dict(api_alive=False, ever_ready=False, ready=False),
    "stale /health failure (older than 3 probe intervals)": dict(health_samples=health((NOW - 10, 0))),
    "latest /health is 200": dict(health_samples=health((NOW - 2, 0), (NOW - 1, 1))),
    "no /health sample (timeouts leave none)": dict(),
}


@pytest.mark.parametrize("kw", QUIET.values(), ids=QUIET.keys())
def test_quiet(kw):
    assert engine_dead.evaluate(view(**kw), CFG) is None
