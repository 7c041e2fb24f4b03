"""Live: a --grpc server (no /health, no /metrics, no HTTP canary) still has its busy loop caught, from
/proc alone: the spinning thread and its process make no syscall while the thread burns a core.

The simulated server with ``--grpc`` answers none of the HTTP paths a gRPC server lacks; it still takes
completions over HTTP so the test can load it and trip its fault (the guardian never calls them).
"""

from __future__ import annotations

import pytest

from tests.support.guardian_process import GuardianProcess, fire
from tests.support.wait import poll
from vllm_guardian.sim.control import SimServer

pytestmark = pytest.mark.live


def _answers(sim: SimServer) -> bool:
    try:
        return sim.request("GET", "/sim/state")[0] == 200
    except OSError:
        return False  # not listening yet: its engine loads first


def test_a_grpc_only_servers_busy_loop_is_caught_from_proc_without_metrics(tmp_path):
    sim = SimServer(startup_delay=1.0, extra_args=("--vllm-version", "0.34.0", "--grpc")).start()
    try:
        assert poll(lambda: sim.poll() is None and _answers(sim), 60), "the simulated server never listened"
        assert sim.health() == 404 and sim.request("GET", "/metrics")[0] == 404
        g = GuardianProcess(tmp_path, sim.port, extra={"policy": {"dry_run": True}}).start()
        try:
            t = g.wait_ready(30)  # ready by its verified listening socket: no /health to ask
            assert t, g.log_text()
            assert "/metrics (a --grpc server has none)" in t["vllm"]["blind"]
            assert t["canary"] is None and t["health"] is None  # never asked over HTTP
            for _ in range(3):
                sim.complete("warm traffic", max_tokens=2, timeout=30)
            poll(lambda: False, 12)  # serving: a busy loop's window of normal traffic opens nothing
            assert g.incidents() == [], g.log_text()
            onset = fire(sim, "busy_loop")
            inc = g.wait_incident("busy_loop", timeout=60)
            assert inc is not None, g.log_text()
            took = inc["opened_at"] - onset
            print(f"\n--grpc busy_loop (no /metrics, no canary): onset -> incident {took:.1f}s")
            assert inc["signals"]["reason"] == "syscalls_frozen" and inc["signals"]["grpc"] is True
            assert inc["target"]["pid"] == sim.pid and "judged from /proc" in inc["summary"]
            assert [i["kind"] for i in g.incidents()] == ["busy_loop"], g.log_text()
        finally:
            assert g.stop() == 0, g.log_text()
    finally:
        sim.stop()
