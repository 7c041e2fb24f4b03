"""Live: the guardian's own lifecycle beside a real (simulated) vLLM server.

A guardian started beside an engine that hung while no guardian watched (a rollout, an
upgrade, a crash of the guardian) judges it at once: the server answers ``/health`` 200
and ``/v1/models``, so it is warm, whether or not this guardian saw it start.
"""

from __future__ import annotations

import time

import pytest

from vllm_guardian.sim.control import SimServer
from guardian_harness import GuardianProcess
from test_guardian_live import fire

pytestmark = pytest.mark.live

HUNG_BEFORE_GUARDIAN_S = 20.0


@pytest.fixture
def sim():
    server = SimServer(startup_delay=1.0).start()
    try:
        server.wait_ready(60)
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("fault, kind", [("busy_loop", "busy_loop"), ("stall", "engine_stall")])
def test_a_guardian_started_beside_an_engine_that_already_hangs_opens_the_hang(tmp_path, sim, fault, kind):
    for _ in range(3):
        sim.complete("warm traffic", max_tokens=2, timeout=30)
    fire(sim, fault)
    time.sleep(HUNG_BEFORE_GUARDIAN_S)  # the setup of the scenario, not an assertion: hung 20 s unwatched
    g = GuardianProcess(tmp_path, sim.port)
    started = time.time()
    g.start()
    try:
        inc = g.wait_incident(kind, timeout=60)
        assert inc is not None, g.log_text()
        assert inc["target"]["pid"] == sim.pid
        assert "is ready (/health 200, /v1/models serves" in g.log_text()
        print(f"\n{kind}: guardian start -> incident {inc['opened_at'] - started:.1f}s")
        assert inc["opened_at"] - started <= 45.0  # a failure bound on a loaded 2-core CI box (measured: see README)
    finally:
        assert g.stop() == 0, g.log_text()
