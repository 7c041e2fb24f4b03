"""The exporter over the status the real builder makes, from a daemon ticking on fakes: every
field the exporter reads is there, with the value the daemon saw."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.daemon_world import ENGINE, World

from vllm_guardian.surface.exporter import build_registry
from vllm_guardian.host.http import HttpError
from vllm_guardian.probes.table import probe_names


def metrics(world: World) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    d = world.d
    text = generate_latest(build_registry(d.status, lambda: d.stats)).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    yield w
    w.d.runner.shutdown()


def test_a_serving_target_is_up_ready_and_its_processes_and_engine_are_exported(world):
    world.step(4, progress=True)
    got = metrics(world)
    t = (("target", "vllm-8000"),)
    assert got[("guardian_target_up", t)] == 1 and got[("guardian_target_ready", t)] == 1
    assert got[("guardian_target_health_ok", t)] == 1 and got[("guardian_canary_ok", t)] == 1
    assert got[("guardian_engine_requests_running", t)] == 0
    assert got[("guardian_engine_steps_per_second", t)] > 0
    engine = (("index", "0"), ("role", "engine_core"), ("target", "vllm-8000"))  # no pid label
    assert ("guardian_process_cpu_ratio", engine) in got and ("guardian_process_threads", engine) in got
    assert (
        "guardian_process_resident_memory_bytes",
        (("index", "0"), ("role", "api_server"), ("target", "vllm-8000")),
    ) in got


def test_every_probe_of_the_table_and_discovery_is_counted(world):
    world.step(4)
    got = metrics(world)
    for probe in ("discovery", *probe_names()):
        assert ("guardian_probe_runs_total", (("probe", probe),)) in got
    assert got[("guardian_probe_runs_total", (("probe", "procfs"),))] == 4


def test_an_open_incident_is_counted_by_kind(world):
    world.step(4)
    world.proc.remove(ENGINE)
    world.http.route("GET", "/health", HttpError("refused", "Connection refused"))
    world.step(3)
    got = metrics(world)
    assert got[("guardian_incidents_open", (("kind", "engine_dead"),))] == 1
    assert got[("guardian_target_incidents_open", (("kind", "engine_dead"), ("target", "vllm-8000")))] == 1
    assert got[("guardian_incidents_opened_total", (("kind", "engine_dead"),))] == 1
