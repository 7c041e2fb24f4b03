"""startup_timeout: a server not ready within lifecycle.startup_limit is reported, once ready it is not."""

from dataclasses import replace

import pytest

from tests.support.detector_world import NOW, make_view
from vllm_guardian.config.schema import LifecycleConfig
from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors import startup_timeout
from vllm_guardian.model import Kind

CFG = DetectorsConfig()
LIMIT = LifecycleConfig(startup_limit=600.0)


def view(waited: float, ready: bool = False, api_alive: bool = True):
    v = make_view(ready=ready, ever_ready=ready, api_alive=api_alive)
    state = replace(v.state, starting_since=NOW - waited, lifecycle=LIMIT)
    return replace(v, state=state)


@pytest.mark.parametrize(
    "waited, ready, api_alive, fires",
    [
        (599.0, False, True, False),  # still within the limit: loading, compiling
        (600.0, False, True, True),  # the limit reached, still not ready
        (5000.0, True, True, False),  # ready: whatever it took is over
        (5000.0, False, False, False),  # the API server is gone: engine_dead's or nobody's case
    ],
    ids=["within-limit", "past-limit", "ready", "gone"],
)
def test_a_server_that_never_becomes_ready_is_reported_after_the_startup_limit(waited, ready, api_alive, fires):
    f = startup_timeout.evaluate(view(waited, ready, api_alive), CFG)
    assert (f is not None) is fires
    if f is not None:
        assert f.kind is Kind.STARTUP_TIMEOUT and f.confirmed
        assert f.signals["startup_limit"] == 600.0 and f.signals["waited_s"] == waited


def test_startup_timeout_alerts_and_never_remediates_by_default():
    assert CFG.startup_timeout.mode.value == "alert"
