"""Live: ``guardian run`` against the simulated vLLM server opens the right incident — and no other.

Each fault test measures onset → incident (onset = the first request after the
trigger, as the real-vLLM fault plugin does) and prints it; the numbers go in
docs/benchmarks.md. The deadlines are generous failure bounds, not performance claims.
"""

from __future__ import annotations

import time

import pytest

from vllm_guardian.sim.control import LoadGenerator, SimServer
from tests.support.guardian_process import GuardianProcess, fire
from tests.support.wait import poll

pytestmark = pytest.mark.live


@pytest.fixture
def sim():
    server = SimServer(startup_delay=2.0).start()
    try:
        server.wait_ready(60)
        yield server
    finally:
        server.stop()


@pytest.fixture
def guardian(tmp_path, sim):
    g = GuardianProcess(tmp_path, sim.port).start()
    try:
        assert g.wait_ready(30), g.log_text()
        yield g
    finally:
        assert g.stop() == 0, g.log_text()  # a clean shutdown on SIGTERM


def test_busy_loop_in_the_engine_opens_busy_loop_naming_the_engine_thread(sim, guardian):
    engine = poll(sim.engine_pid, timeout=10)  # named while the tree is calm, before the fault
    assert engine is not None
    onset = fire(sim, "busy_loop")
    inc = guardian.wait_incident("busy_loop", timeout=40)
    assert inc is not None, guardian.log_text()
    assert inc["target"]["pid"] == sim.pid
    assert inc["target"]["role"] == "engine_core"
    assert inc["signals"]["pid"] == engine and inc["signals"]["tid"] == engine
    assert inc["signals"]["cpu_demand"] >= 0.9  # on a CPU or waiting for one: it never blocks
    assert sim.health() == 200  # the blind spot: vLLM's /health still answers
    assert [i["kind"] for i in guardian.incidents()] == ["busy_loop"]
    print(f"\nbusy_loop onset->incident {inc['opened_at'] - onset:.1f}s")


def test_engine_blocked_on_a_lock_opens_engine_stall(sim, guardian):
    onset = fire(sim, "stall")
    inc = guardian.wait_incident("engine_stall", timeout=60)
    assert inc is not None, guardian.log_text()
    assert inc["target"]["pid"] == sim.pid
    assert sim.health() == 200
    assert [i["kind"] for i in guardian.incidents()] == ["engine_stall"]
    print(f"\nengine_stall onset->incident {inc['opened_at'] - onset:.1f}s")


def test_engine_death_opens_engine_dead(sim, guardian):
    onset = fire(sim, "die")
    inc = guardian.wait_incident("engine_dead", timeout=30)
    assert inc is not None, guardian.log_text()
    assert inc["target"]["pid"] == sim.pid
    assert inc["signals"]["reason"] in ("engine_core_gone", "health_failed")
    assert [i["kind"] for i in guardian.incidents()] == ["engine_dead"]
    print(f"\nengine_dead onset->incident {inc['opened_at'] - onset:.1f}s")


def test_status_shows_the_tree_with_roles_and_the_open_incident(sim, guardian):
    engine_pid = poll(sim.engine_pid, timeout=10)  # named while the tree is calm, before the fault
    assert engine_pid is not None
    fire(sim, "busy_loop")
    assert guardian.wait_incident("busy_loop", timeout=40)
    t = poll(lambda: (t := guardian.target()) and t["incidents"] and t, timeout=10)
    assert t is not None, guardian.log_text()
    roles = {p["pid"]: p["role"] for p in t["processes"]}
    assert (roles.get(sim.pid), roles.get(engine_pid)) == ("api_server", "engine_core"), roles
    # a configured target drains while the evidence is captured (nothing is stopped before the bundle):
    # on a loaded machine the status may come once the capture is done and the stop has begun
    assert t["phase"] in ("incident", "draining", "stopping") and t["incidents"] == ["busy_loop"], t["phase"]
    if t["phase"] == "stopping":
        inc = guardian.wait_incident("busy_loop", timeout=1)
        assert inc is not None
        assert list((guardian.state_dir / "incidents" / inc["id"]).glob("pyspy-*.json")), "stopped before the bundle"
    engine = next(p for p in t["processes"] if p["role"] == "engine_core")
    assert engine["hottest_thread"]["syscall"] == "running"


def test_no_incident_during_warm_up_sustained_load_or_idle(tmp_path):
    """Warm-up (a hot engine before the first canary), 60 s of concurrent load, 60 s idle: nothing."""
    server = SimServer(startup_delay=8.0).start()
    g = GuardianProcess(tmp_path, server.port).start()
    try:
        server.wait_ready(60)
        assert g.wait_ready(30), g.log_text()
        model = server.model
        with LoadGenerator(server.url, model, clients=4, max_duration=60) as load:
            time.sleep(60)  # the scenario *is* a duration: 60 s of steady load
        stats = load.stats()
        assert stats.ok > 100 and stats.errors == 0
        time.sleep(60)  # and 60 s idle
        st = g.status()
        assert st is not None
        assert g.incidents() == [], g.log_text()
        assert st["targets"][0]["ready"] is True
    finally:
        server.stop()
        assert g.stop() == 0
