"""A real data-parallel vLLM 0.32 (``--data-parallel-size 2``, CPU build) watched by the real guardian.

One DP=2 server serves the module: its tree is a ``VLLM::DPCoordinator`` and one
``VLLM::EngineCore_DP<k>`` per rank, and its ``/metrics`` labels each engine. Then, for a busy
loop and for a stall, the fault plugin hangs rank 1 only (``dp_rank=1`` in the trigger) while 4
clients load both ranks (``benchmarks.dp_runs``): the other rank goes on serving, and the guardian
must open the incident naming rank 1 and its engine process, and no other. Deadlines are failure
bounds for a shared 2-core machine; the measured times go to the terminal summary (``results``)
and, three runs each, to ``make bench``.
"""

from __future__ import annotations

import pytest

from benchmarks.dp_runs import DP_ARGS, DP_FAULTS, named_right, rank_hang_run
from vllm_guardian.sim.control import descendant_pids, metric_value, read_cmdline
from tests.e2e import harness
from tests.e2e.harness import E2E_PYTHON, VllmServer, ensure_model

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

SERVER_READY_TIMEOUT = 900.0  # a DP=2 start took 155-242 s on the shared 2-core machine
DETECT_TIMEOUT = 120.0


@pytest.fixture(scope="module")
def dp_server(tmp_path_factory, results):
    assert E2E_PYTHON.exists(), f"{E2E_PYTHON} is missing: run `make e2e-vllm`"
    d = tmp_path_factory.mktemp("vllm-dp2")
    s = VllmServer(ensure_model(), d / "faults", d / "vllm.log", extra_args=DP_ARGS).start()
    try:
        results["dp2_server_start_s"] = s.wait_ready(SERVER_READY_TIMEOUT)
        yield s
    finally:
        s.stop()
        assert s.leftovers() == (), s.leftovers()


def test_the_server_runs_a_coordinator_and_one_titled_engine_per_rank_each_with_its_own_metrics(dp_server):
    titles = {read_cmdline(pid).split(" ")[0] for pid in descendant_pids(dp_server.pid)}
    assert {"VLLM::DPCoordinator", "VLLM::EngineCore_DP0", "VLLM::EngineCore_DP1"} <= titles, titles
    for _ in range(4):
        dp_server.complete("count the ranks", max_tokens=2, timeout=60)
    page = dp_server.request("GET", "/metrics", timeout=10)[1].decode()
    assert all(metric_value(page, "vllm:num_requests_running", engine=str(k)) is not None for k in (0, 1))


@pytest.mark.parametrize("fault, kind", DP_FAULTS, ids=[f for f, _ in DP_FAULTS])
def test_a_hang_in_one_rank_while_the_other_serves_opens_the_incident_naming_that_rank(
    dp_server, tmp_path, results, fault, kind
):
    run = rank_hang_run(harness, dp_server, tmp_path / "guardian", fault, kind, 1, DETECT_TIMEOUT)
    assert run.onset_to_incident_s is not None, run
    assert named_right(run) and run.signals["process_title"] == "VLLM::EngineCore_DP1", run
    assert read_cmdline(run.fault_pid or 0).startswith("VLLM::EngineCore_DP1")
    assert run.served_meanwhile > 0  # the other rank went on serving
    assert run.incidents == (kind,), run
    results[f"dp2_{fault}_in_rank1_onset_to_incident_s"] = run.onset_to_incident_s
