"""Live: a simulated vLLM with ``--api-server-count 2`` (a launcher, ``VLLM::APIServer_0`` and
``_1`` sharing one listening port, one ``VLLM::EngineCore``, as ``sim.vllm.multi_api`` describes
vLLM 0.32's tree), watched by a real ``guardian run``: a busy loop in the engine opens busy_loop
naming the engine; a busy loop in one API-server process, while the other serves the shared port
(canaries answered, the engine progressing), opens busy_loop naming that process: its event loop's
own syscall count stands still.

The onset → incident times are printed for docs/benchmarks.md; the deadlines are generous failure bounds,
not performance claims.
"""

from __future__ import annotations

import time

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.discovery.scan import discover
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.model import Role
from vllm_guardian.sim.control import LoadGenerator, SimServer, read_cmdline
from tests.support.guardian_process import GuardianProcess

pytestmark = pytest.mark.live


@pytest.fixture
def apis_sim():
    server = SimServer(startup_delay=2.0, extra_args=("--api-server-count", "2")).start()
    try:
        server.wait_ready(60)
        _wait_for_titles(server, 30)  # ready = one API server answers; the other may still be spawning
        yield server
    finally:
        server.stop()
        assert server.leftovers() == ()


def _wait_for_titles(server: SimServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = server.state()["api_server_pids"]
        if pids and all(pid and read_cmdline(pid).startswith("VLLM::APIServer_") for pid in pids):
            return
        time.sleep(0.2)


@pytest.fixture
def guardian(tmp_path, apis_sim):
    g = GuardianProcess(tmp_path, apis_sim.port).start("--dry-run")
    try:
        assert g.wait_ready(30), g.log_text()
        yield g
    finally:
        assert g.stop() == 0, g.log_text()


def test_the_simulator_runs_two_titled_api_servers_beside_one_engine_under_the_launcher(apis_sim):
    state = apis_sim.state()
    titles = [read_cmdline(pid).split()[0] for pid in state["api_server_pids"]]
    assert titles == ["VLLM::APIServer_0", "VLLM::APIServer_1"]
    assert read_cmdline(state["engine_pid"]).startswith("VLLM::EngineCore")
    assert "--api-server-count" in read_cmdline(state["api_pid"])  # the launcher keeps its command line


def test_discovery_roots_the_target_at_the_launcher_with_every_api_server_and_the_engine_by_title(apis_sim):
    state = apis_sim.state()
    cfg = parse_config({"targets": [{"name": "sim", "match": {"port": apis_sim.port}}]})
    (target,) = [t for t in discover(ProcFS(), cfg).targets if t.name == "sim"]
    roles = {p.key.pid: p.role for p in target.processes}
    assert target.key.pid == state["api_pid"]
    assert [roles.get(pid) for pid in state["api_server_pids"]] == [Role.API_SERVER, Role.API_SERVER]
    assert roles.get(state["engine_pid"]) == Role.ENGINE_CORE


def test_a_busy_loop_in_one_api_server_leaves_the_other_serving_the_shared_port(apis_sim):
    apis_sim.set_fault("busy_loop", api_server=1)
    assert all(apis_sim.complete("still served", max_tokens=2, timeout=10)["choices"] for _ in range(4))


def test_a_busy_loop_in_the_engine_opens_busy_loop_naming_the_engine(apis_sim, guardian):
    with LoadGenerator(apis_sim.url, apis_sim.model, clients=4, max_duration=120, request_timeout=90) as load:
        time.sleep(3)
        apis_sim.set_fault("busy_loop")
        onset = time.time()
        inc = guardian.wait_incident("busy_loop", timeout=60)
        load.stop(timeout=1)  # the clients stuck on the spinning engine end when the server stops
    assert inc is not None, guardian.log_text()
    assert inc["signals"]["pid"] == apis_sim.state()["engine_pid"]
    assert inc["summary"].startswith("EngineCore")
    print(f"\napi-server-count=2, engine busy_loop: onset->busy_loop {inc['opened_at'] - onset:.1f}s")


ONE_API_SERVER_HUNG = {
    # the other API server answers every canary and the engine progresses: the incident rests on the
    # hung one's own event loop — spinning, it makes no syscall; blocked on a lock, it does not run
    "spinning": ("busy_loop", "busy_loop", "syscalls_frozen", "APIServer_1 (pid "),
    "blocked on a lock": ("stall", "engine_stall", "event_loop_frozen", "APIServer_1 serves nothing"),
}


@pytest.mark.parametrize("fault, kind, reason, summary", ONE_API_SERVER_HUNG.values(), ids=ONE_API_SERVER_HUNG.keys())
def test_one_api_server_hung_while_the_other_serves_the_port_opens_the_incident_naming_it(
    apis_sim, guardian, fault, kind, reason, summary
):
    with LoadGenerator(apis_sim.url, apis_sim.model, clients=4, max_duration=120, request_timeout=90) as load:
        time.sleep(3)
        apis_sim.set_fault(fault, api_server=1)
        onset, served_before = time.time(), load.ok
        inc = guardian.wait_incident(kind, timeout=60)
        served_meanwhile = load.ok - served_before
        load.stop(timeout=1)
    assert inc is not None, guardian.log_text()
    assert served_meanwhile > 0
    assert inc["signals"]["pid"] == apis_sim.state()["api_server_pids"][1]
    assert (inc["signals"]["reason"], inc["signals"]["process_title"]) == (reason, "VLLM::APIServer_1")
    assert inc["summary"].startswith(summary)
    assert [i["kind"] for i in guardian.incidents()] == [kind]
    print(
        f"\napi-server-count=2, APIServer_1 {fault}: onset->{kind} {inc['opened_at'] - onset:.1f}s, "
        f"{served_meanwhile} requests served meanwhile"
    )
