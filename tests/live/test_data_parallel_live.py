"""Live: a data-parallel simulated vLLM (``--data-parallel-size 2``) with one rank hung while the
other serves: a real ``guardian run`` opens the incident naming that rank, and no other.

The simulator spawns ``VLLM::DPCoordinator`` and ``VLLM::EngineCore_DP0`` / ``_DP1`` (the titles a
real vLLM 0.32 sets), labels each engine's metrics ``engine="k"`` and takes a fault for one rank
(``{"fault": ..., "rank": 1}``). The onset → incident times are printed for docs/benchmarks.md; the
deadlines are generous failure bounds, not performance claims.
"""

from __future__ import annotations

import time

import pytest

from vllm_guardian.sim.control import LoadGenerator, SimServer, metric_value, read_cmdline
from tests.support.guardian_process import GuardianProcess

pytestmark = pytest.mark.live

DP = ("--data-parallel-size", "2")
OTHERS_WINDOW_S = 10.0  # after the incident, how long the load goes on before "no other incident" is read


@pytest.fixture
def dp_sim():
    server = SimServer(startup_delay=2.0, extra_args=DP).start()
    try:
        server.wait_ready(60)
        yield server
    finally:
        server.stop()
        assert server.leftovers() == ()


@pytest.fixture
def guardian(tmp_path, dp_sim):
    g = GuardianProcess(tmp_path, dp_sim.port).start("--dry-run")
    try:
        assert g.wait_ready(30), g.log_text()
        yield g
    finally:
        assert g.stop() == 0, g.log_text()


def test_the_simulator_runs_one_titled_engine_per_rank_each_with_its_own_metrics(dp_sim):
    state = dp_sim.state()
    assert read_cmdline(state["coordinator_pid"]).startswith("VLLM::DPCoordinator")
    assert [read_cmdline(e["pid"]).split()[0] for e in state["engines"]] == [
        "VLLM::EngineCore_DP0",
        "VLLM::EngineCore_DP1",
    ]
    for _ in range(4):  # the server spreads work over the ranks
        dp_sim.complete("spread me", max_tokens=2)
    status, _ = dp_sim.request("POST", "/v1/completions", {"prompt": "to one", "max_tokens": 3})
    page = dp_sim.metrics_text()
    done = [metric_value(page, "vllm:request_success_total", engine=str(k), finished_reason="length") for k in (0, 1)]
    assert status == 200 and all(d and d >= 2 for d in done), done


def test_a_fault_for_one_rank_hangs_that_rank_only(dp_sim):
    dp_sim.set_fault("stall", rank=1)
    for _ in range(4):  # one of them trips rank 1 and never answers; the others are served by rank 0
        try:
            dp_sim.complete("after the fault", max_tokens=2, timeout=3)
        except OSError:
            pass
    engines = dp_sim.state()["engines"]
    assert engines[1]["stats"]["faults"] == ["stall"] and engines[0]["stats"]["faults"] == []
    assert dp_sim.complete("still served", max_tokens=2, timeout=10)["choices"]


HANGS = {
    "one rank spinning while the other serves": ("busy_loop", "busy_loop"),
    "one rank stalled while the other serves": ("stall", "engine_stall"),
}


@pytest.mark.parametrize("fault, kind", HANGS.values(), ids=HANGS.keys())
def test_one_rank_hung_while_the_other_serves_opens_the_incident_naming_the_rank(dp_sim, guardian, fault, kind):
    with LoadGenerator(dp_sim.url, dp_sim.model, clients=4, max_duration=120, request_timeout=90) as load:
        time.sleep(3)  # both ranks busy
        dp_sim.set_fault(fault, rank=1)
        onset, served_before = time.time(), load.ok
        inc = guardian.wait_incident(kind, timeout=60)
        served_meanwhile = load.ok - served_before
        time.sleep(OTHERS_WINDOW_S if inc else 0)  # room for a wrong second incident, still under load
        load.stop(timeout=1)  # the clients stuck on the hung rank end when the server stops
    assert inc is not None, guardian.log_text()
    sig = inc["signals"]
    assert (sig["dp_rank"], sig["engine"], sig["process_title"]) == (1, "engine:1", "VLLM::EngineCore_DP1")
    assert sig["pid"] == dp_sim.rank_pid(1)
    assert inc["summary"].startswith("EngineCore_DP1")
    assert served_meanwhile > 0  # the other rank went on serving: the server as a whole progressed
    assert [i["kind"] for i in guardian.incidents()] == [kind]
    print(
        f"\nDP=2 {fault} in rank 1: onset->{kind} {inc['opened_at'] - onset:.1f}s ({sig['reason']}), "
        f"{served_meanwhile} requests served meanwhile"
    )
