"""The whole pipeline, tick by tick, on a fake /proc tree, a scripted HTTP server and a fake clock.

Discovery → procfs → vllm_http/canary → detectors → incidents, with every seam
faked in a way that behaves like the real thing: counters in clock ticks, the
canary's timeout surfacing as an HttpError("timeout"), a dead engine's /health 503.
"""

from __future__ import annotations

import json
import logging
import time
from functools import partial
from pathlib import Path

import pytest

from vllm_guardian.host.http import HttpError
from vllm_guardian.incidents import IncidentStore
from vllm_guardian.model import Incident, Kind
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_http import ok
from tests.support.daemon_world import API, ENGINE, TRACKER, World

FIX = Path(__file__).parent.parent / "fixtures" / "metrics"


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    yield w
    w.d.runner.shutdown()


def test_an_autodiscovered_server_is_ready_after_its_first_canary(world):
    world.step(4)
    t = world.target()
    assert t["name"] == "vllm-8000" and t["ready"] and t["phase"] == "serving"
    assert {p["role"] for p in t["processes"]} == {"api_server", "engine_core", "other"}
    assert t["model"] == "m"


def test_a_spinning_engine_thread_with_a_hung_canary_opens_busy_loop(world):
    world.step(4)
    world.http.route("POST", "/v1/completions", HttpError("timeout", "no answer within 5s"))
    opened = []
    for _ in range(20):
        opened += [t for t in world.step(spin=True) if t.previous is None]
        if opened:
            break
    assert [t.incident.kind for t in opened] == [Kind.BUSY_LOOP]
    inc = opened[0].incident
    assert inc.signals["tid"] == ENGINE and inc.target.pid == API and inc.target.role == "engine_core"
    assert IncidentStore(world.cfg.state_dir).load(inc.id) is not None
    world.step(2)  # the evidence bundle is captured off the loop, then attached
    stored = IncidentStore(world.cfg.state_dir).load(inc.id)
    assert stored is not None and stored.evidence_dir and (Path(stored.evidence_dir) / "capture.json").exists()
    assert any(argv[0].endswith("py-spy") and argv[1] == "dump" for argv in world.cmd.argvs())


def test_a_busy_loop_ends_with_its_server_dying_and_engine_dead_opens(tmp_path):
    # the tick's /proc read sees the death before a discovery pass does (the server is then
    # marked not ready): the spin is over all the same, its incident must not stay open
    world = World(tmp_path, config={"discovery": {"interval": 60}})
    try:
        world.step(4)
        world.http.route("POST", "/v1/completions", HttpError("timeout", "no answer within 5s"))
        for _ in range(20):
            if any(t.previous is None for t in world.step(spin=True)):
                break
        assert [i.kind for i in world.d.incidents.open_incidents()] == [Kind.BUSY_LOOP]
        for pid in (ENGINE, TRACKER, API):
            world.proc.remove(pid)
        world.http.route("GET", "/health", HttpError("refused", "Connection refused"))
        world.step(6)
        assert [i.kind for i in world.d.incidents.open_incidents()] == [Kind.ENGINE_DEAD]
    finally:
        world.d.runner.shutdown()


def test_a_spinning_engine_that_still_steps_is_healthy_decode(world):
    world.step(4)
    assert not world.step(30, spin=True, progress=True)
    assert world.d.incidents.open_incidents() == []


def test_a_spin_during_model_load_is_covered_by_the_startup_grace(world):
    world.http.route("GET", "/health", HttpError("refused", "Connection refused"))
    assert not world.step(30, spin=True)
    assert not world.target()["ready"]


def test_the_engine_process_vanishing_opens_engine_dead_within_three_ticks(world):
    world.step(4)
    world.proc.remove(ENGINE)
    world.http.route("GET", "/health", ok(status=503))
    opened = [t for t in world.step(3) if t.previous is None]
    assert [t.incident.kind for t in opened] == [Kind.ENGINE_DEAD]


def test_html_metrics_is_logged_once_visible_in_status_and_opens_nothing(world, caplog):
    world.step(4)
    world.http.route("GET", "/metrics", ok("<html>proxy login</html>\n"))
    with caplog.at_level(logging.WARNING, logger="test-daemon"):
        assert not world.step(20)
    assert sum("HTML" in r.getMessage() for r in caplog.records) == 1
    assert "HTML" in world.target()["errors"]["vllm-8000:metrics"]


def test_a_canary_500_is_counted_shown_and_is_not_a_hang(world, caplog):
    world.step(4)
    world.http.route("POST", "/v1/completions", ok('{"error":"boom"}', status=500))
    with caplog.at_level(logging.WARNING, logger="test-daemon"):
        assert not world.step(40)
    assert sum("HTTP 500" in r.getMessage() for r in caplog.records) == 1
    assert world.d.status().probes["canary"].failures >= 3
    assert "vllm-8000:canary" in world.target()["errors"]


def test_a_target_exiting_mid_tick_opens_engine_dead_and_never_crashes(world):
    world.step(4)
    world.proc.vanish_on_read(API)  # gone between listing /proc and reading its stat
    world.proc.remove(ENGINE)
    world.proc.remove(TRACKER)
    world.http.route("GET", "/health", HttpError("refused", "Connection refused"))
    opened = [t for t in world.step(4) if t.previous is None]
    assert [t.incident.kind for t in opened] == [Kind.ENGINE_DEAD]
    assert world.target()["phase"] == "gone"


def test_unreadable_thread_files_are_reported_once_and_detection_degrades(world, caplog):
    world.step(4)
    world.proc.deny(f"{ENGINE}/task/{ENGINE}/syscall")
    world.http.route("POST", "/v1/completions", HttpError("timeout", "no answer within 5s"))
    with caplog.at_level(logging.WARNING, logger="test-daemon"):
        opened = [t for t in world.step(20, spin=True) if t.previous is None]
    assert [t.incident.kind for t in opened] == [Kind.BUSY_LOOP]  # syscall is optional evidence
    assert sum("CAP_SYS_PTRACE" in r.getMessage() for r in caplog.records) == 1


def test_an_open_incident_survives_a_guardian_restart_without_a_duplicate(world, tmp_path):
    world.step(4)
    world.proc.remove(ENGINE)  # and the server says so, as vLLM does once its engine is dead
    world.http.route("GET", "/health", ok(status=503))
    world.http.route("POST", "/v1/completions", ok('{"error": "EngineDeadError"}', status=500))
    world.step(3)
    first = world.d.incidents.open_incidents()
    assert [i.kind for i in first] == [Kind.ENGINE_DEAD]
    again = world.new_daemon()
    try:
        world.d.runner.shutdown()
        world.d = again
        assert not [t for t in world.step(5) if t.previous is None]
        assert [i.id for i in again.incidents.open_incidents()] == [first[0].id]
    finally:
        again.runner.shutdown()


@pytest.mark.parametrize(
    "engine_memory, expect",
    [
        ({"curve": "linear", "start": 2e10, "rate": 8e6, "after": 150}, [Kind.ACCEL_MEMORY_LEAK]),  # 8 MB/s
        ({"curve": "warmup", "start": 1e9, "value": 2e10, "duration": 120}, []),  # grows, then levels off
        ({"curve": "step", "before": 2e10, "after": 2.2e10, "at": 400}, []),  # one allocation
        ({"curve": "noisy", "value": 2e10, "noise": 2e8, "seed": 3}, []),  # flat with noise
    ],
)
def test_a_fake_gpu_curve_through_the_whole_daemon(tmp_path, engine_memory, expect):
    """The real NVML backend over a scripted NVML: per-process GPU memory of the engine pid."""
    from vllm_guardian.testing.fake_nvml import FakeNvmlBackend

    scenario = {
        "devices": [{"memory_total": 8e10, "utilization": 0, "processes": [{"pid": ENGINE, "memory": engine_memory}]}]
    }
    clock = FakeClock()
    w = World(tmp_path, accel_backends=[FakeNvmlBackend(scenario, clock=clock)], clock=clock)
    opened = []
    for _ in range(600):  # ten minutes of ticks: warm-up (300 s) + windows
        opened += [t.incident.kind for t in w.step(progress=True) if t.previous is None]
    assert opened == expect
    if expect:
        inc = w.d.incidents.open_incidents()[0]
        assert 6e6 < inc.signals["slope_bytes_per_s"] < 1e7
        assert 6000 < inc.signals["projected_exhaustion_s"] < 8000  # (80 - 20.5) GB at 8 MB/s


def test_a_probe_failing_for_long_opens_probe_failure_and_never_a_restart(tmp_path):
    world = World(tmp_path, {"detectors": {"probe_failure": {"after": 10}}})
    world.step(4)
    world.http.route("GET", "/metrics", ok("<html>proxy login</html>\n"))
    opened = [t.incident.kind for t in world.step(15) if t.previous is None]
    assert opened == [Kind.PROBE_FAILURE]
    world.http.route("GET", "/metrics", world.page)
    resolved = [t.incident.kind for t in world.step(3) if t.previous is not None]
    assert resolved == [Kind.PROBE_FAILURE]
    world.d.runner.shutdown()


def test_the_status_table_reads_at_a_glance(world):
    from vllm_guardian.surface.status_render import render_status

    world.step(4)
    text = render_status(world.d.status())
    assert "TARGET vllm-8000  [SERVING]" in text
    assert "engine_core" in text and "api_server" in text
    assert "serving: yes, restart budget left: 3" in text


def test_the_status_table_shows_maintenance_mode(world):
    from vllm_guardian.remediation.policy import Maintenance
    from vllm_guardian.surface.status_render import render_status

    world.step(2)
    assert "MAINTENANCE" not in render_status(world.d.status())
    Maintenance(world.d.cfg.state_dir).turn_on(time.time(), 3600)
    world.step(1)
    assert "MAINTENANCE until" in render_status(world.d.status())


def test_a_configured_target_that_is_not_found_is_shown_with_the_reason(tmp_path):
    from vllm_guardian.surface.status_render import render_status

    w = World(tmp_path, {"targets": [{"name": "llama", "match": {"pid_file": str(tmp_path / "none.pid")}}]})
    w.step(2)
    assert "configured target llama not found" in render_status(w.d.status())
    w.d.runner.shutdown()


def test_a_probe_added_to_the_table_runs_and_annotates_an_incident_without_touching_the_daemon(tmp_path, monkeypatch):
    """A diagnosis step as the next capabilities will add it: one class, one table line."""
    from vllm_guardian.model import Action
    from vllm_guardian.probes import table
    from vllm_guardian.probes.base import Folded, Job

    class Diagnosis:
        name, inline = "diagnosis", False

        def __init__(self, parts):
            self.clock, self.done = parts.seams.clock, set()

        def jobs(self, now, seen):
            new = [i for i in seen.incidents if i.id not in self.done]
            self.done.update(i.id for i in new)
            return [Job(i.target.name, partial(self.look_at, i), 5.0) for i in new]

        def look_at(self, incident):
            return incident.id, f"{incident.kind.value}: looked at it"

        def fold(self, result, now):
            incident_id, text = result
            return Folded(actions=[(incident_id, Action("diagnosis", "ok", self.clock.wall(), text))])

        def close(self):
            pass

    monkeypatch.setattr(table, "PROBE_TABLE", (*table.PROBE_TABLE, ("diagnosis", Diagnosis)))
    updated: list[Incident] = []
    w = World(tmp_path, on_update=[updated.append])
    w.step(4)
    w.proc.remove(ENGINE)
    w.http.route("GET", "/health", ok(status=503))
    w.step(5)
    inc = w.d.incidents.open_incidents()[0]
    assert [(a.name, a.detail) for a in inc.actions if a.name == "diagnosis"] == [
        ("diagnosis", "engine_dead: looked at it")
    ]
    assert any(any(a.name == "diagnosis" for a in u.actions) for u in updated)
    assert w.d.status().probes["diagnosis"].runs == 1
    w.d.runner.shutdown()


def test_an_xid_79_during_a_busy_loop_opens_accel_fault_and_the_busy_loop_names_it_first(tmp_path):
    """The real NVML backend over the fake NVML: the GPU the engine holds memory on reports Xid 79
    while its thread spins; the device gets its own incident, the busy loop's diagnosis names the
    device first, and the evidence holds the device's faults."""
    from vllm_guardian.testing.fake_nvml import FakeNvmlBackend

    scenario = {
        "devices": [{"memory_total": 8e10, "processes": [{"pid": ENGINE, "memory": 2e10}]}, {"memory_total": 8e10}],
        "xid": [{"at": 6, "device": 0, "code": 79}],
    }
    clock = FakeClock()
    w = World(tmp_path, accel_backends=[FakeNvmlBackend(scenario, clock=clock)], clock=clock)
    try:
        w.step(4)
        w.http.route("POST", "/v1/completions", HttpError("timeout", "no answer within 5s"))
        opened: list = []
        for _ in range(25):
            opened += [t.incident for t in w.step(spin=True) if t.previous is None]
            if any(i.kind is Kind.BUSY_LOOP for i in opened):
                break
        by_kind = {i.kind: i for i in opened}
        assert set(by_kind) == {Kind.ACCEL_FAULT, Kind.BUSY_LOOP}
        dev = by_kind[Kind.ACCEL_FAULT]
        assert dev.target.name == "nvml:0" and dev.signals["code"] == "xid:79" and dev.signals["blocks_restart"]
        w.step(2)  # the evidence is captured (and diagnosed) off the loop
        busy = w.d.incidents.get(by_kind[Kind.BUSY_LOOP].id)
        assert busy.diagnosis[0]["id"] == "device-fault:xid:79"
        assert "nvml:0 reported Xid 79 (GPU has fallen off the bus)" in busy.summary
        assert "a restart will not help" in busy.summary
        devices = json.loads((Path(busy.evidence_dir) / "accelerators.json").read_text())
        assert devices["nvml:0"]["faults"][0]["code"] == "xid:79"
        snapshot = w.d.status()
        status = snapshot.to_dict()
        assert status["device_faults"]["nvml:0"]["health"] == 2
        from vllm_guardian.surface.status_render import render_status
        from vllm_guardian.surface.exporter import build_registry
        from prometheus_client import generate_latest

        assert "FAULT: Xid 79 (GPU has fallen off the bus); a restart will not help" in render_status(snapshot)
        page = generate_latest(build_registry(lambda: snapshot)).decode()
        assert 'guardian_accelerator_health{backend="nvml",device="nvml:0"} 2.0' in page
        assert 'guardian_accelerator_health{backend="nvml",device="nvml:1"} 0.0' in page
    finally:
        w.d.runner.shutdown()
