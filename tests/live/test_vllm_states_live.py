"""Live: the guardian beside a simulated vLLM 0.33 / 0.34 follows vLLM's own states, never fights them.

Each test holds a state longer than engine_stall's 20 s window plus a canary (the normal stall
threshold) with requests pending and the engine stepping no more: without the stand-down a hang
detector would have fired.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.support.guardian_process import GuardianProcess
from tests.support.wait import poll
from vllm_guardian.sim.control import SimServer

pytestmark = pytest.mark.live

HELD_S = 35.0  # > engine_stall's 20 s window + a canary: a hang detector would have fired


def serve(version: str, *flags: str) -> SimServer:
    server = SimServer(startup_delay=1.0, extra_args=("--vllm-version", version, *flags)).start()
    server.wait_ready(60)
    return server


def post(sim: SimServer, path: str, body: dict | None = None, timeout: float = 60.0) -> tuple[int, dict]:
    code, raw = sim.request("POST", path, body, timeout=timeout)
    return code, json.loads(raw or b"null")


def queue_requests(sim: SimServer, n: int = 3) -> tuple[list, list[threading.Thread]]:
    """``n`` completions sent now, answered once the engine steps again."""
    answers: list = []

    def one() -> None:
        answers.append(sim.complete("queued while vLLM holds its engine", max_tokens=4, timeout=240))

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return answers, threads


def warm(sim: SimServer, g: GuardianProcess) -> None:
    assert g.wait_ready(30), g.log_text()
    for _ in range(3):
        sim.complete("warm traffic", max_tokens=2, timeout=30)


def phase_is(g: GuardianProcess, phase: str, timeout: float = 20.0) -> dict | None:
    return poll(lambda: (t := g.target()) and t["phase"] == phase and t, timeout)


def test_a_checkpoint_cycle_prepare_prepared_restore_is_checkpointing_never_an_incident(tmp_path):
    with serve("0.34.0", "--enable-sleep-mode") as sim:
        g = GuardianProcess(tmp_path, sim.port).start()
        try:
            warm(sim, g)
            assert g.require_target()["vllm"]["version"] == "0.34.0"
            assert post(sim, "/checkpoint/prepare?mode=wait") == (200, {"state": "prepared"})
            answers, threads = queue_requests(sim)
            held = phase_is(g, "checkpointing")
            assert held and held["vllm"]["checkpoint"] == "prepared" and not held["serving"], g.log_text()
            poll(lambda: False, HELD_S)  # prepared, requests pending, the engine still: nothing may open
            assert g.incidents() == [], g.log_text()
            assert post(sim, "/checkpoint/restore") == (200, {"state": "running"})
            for t in threads:
                t.join(60)
            assert len(answers) == 3, answers
            assert phase_is(g, "serving", 40), g.target()
            assert g.incidents() == [], g.log_text()
            assert "checkpointing on purpose" in g.log_text()
        finally:
            assert g.stop() == 0, g.log_text()


def test_a_fault_tolerance_round_that_ends_healthy_is_recovering_never_an_incident_nor_a_restart(tmp_path):
    with serve("0.34.0", "--enable-fault-tolerance") as sim:
        pid = sim.pid
        g = GuardianProcess(tmp_path, sim.port).start()
        try:
            warm(sim, g)
            assert post(sim, "/sim/vllm_state", {"engine_status": {"0": "diagnosing"}})[0] == 200
            answers, threads = queue_requests(sim)
            t = phase_is(g, "recovering")
            assert t and "0" in t["vllm"]["recovering"], g.log_text()
            poll(lambda: False, HELD_S)  # vLLM's own round: the engine waits, requests pend
            assert g.incidents() == [], g.log_text()
            assert post(sim, "/sim/vllm_state", {"engine_status": {"0": "healthy"}})[0] == 200
            for th in threads:
                th.join(60)
            assert len(answers) == 3, answers
            assert phase_is(g, "serving", 40), g.target()
            assert g.incidents() == [] and sim.pid == pid and sim.poll() is None, g.log_text()
        finally:
            assert g.stop() == 0, g.log_text()


def test_a_fault_tolerance_round_that_ends_dead_is_engine_dead(tmp_path):
    with serve("0.33.0", "--enable-fault-tolerance") as sim:
        g = GuardianProcess(tmp_path, sim.port, extra={"policy": {"dry_run": True}}).start()
        try:
            warm(sim, g)
            assert post(sim, "/sim/vllm_state", {"engine_status": {"0": "diagnosing"}})[0] == 200
            assert phase_is(g, "recovering"), g.log_text()
            assert post(sim, "/sim/vllm_state", {"engine_status": {"0": "dead"}})[0] == 200
            inc = g.wait_incident("engine_dead", timeout=30)
            assert inc is not None, g.log_text()
            assert inc["signals"]["reason"] == "fault_tolerance_dead" and inc["signals"]["dp_rank"] == 0
            assert "DEAD after its round" in inc["summary"]
            assert [i["kind"] for i in g.incidents()] == ["engine_dead"], g.log_text()
        finally:
            assert g.stop() == 0, g.log_text()


def test_an_elastic_ep_rank_retired_on_purpose_is_retired_never_an_incident(tmp_path):
    with serve("0.33.0") as sim:
        g = GuardianProcess(tmp_path, sim.port).start()
        try:
            warm(sim, g)
            assert post(sim, "/sim/vllm_state", {"retired": True}) == (
                200,
                {"checkpoint": "running", "engine_status": {"0": "healthy"}, "retired": True},
            )
            assert sim.health() == 200  # by design: the retired rank's API server lives
            t = phase_is(g, "retired")
            assert t and not t["serving"], g.log_text()
            started = time.time()
            # every path but /health refuses: a canary or /metrics read would fail each second, and
            # probe_failure opens after 30 failures in a row
            poll(lambda: False, HELD_S + 10)
            assert g.incidents() == [], g.log_text()
            assert g.require_target()["phase"] == "retired", time.time() - started
        finally:
            assert g.stop() == 0, g.log_text()


def test_a_failed_checkpoint_is_a_checkpoint_failed_incident_never_a_restart(tmp_path):
    with serve("0.34.0", "--enable-sleep-mode") as sim:
        pid = sim.pid
        g = GuardianProcess(tmp_path, sim.port).start()
        try:
            warm(sim, g)
            assert post(sim, "/sim/vllm_state", {"checkpoint": "failed"})[0] == 200
            inc = g.wait_incident("checkpoint_failed", timeout=30)
            assert inc is not None, g.log_text()
            assert inc["severity"] == "warning" and "checkpoint failed" in inc["summary"]
            assert g.require_target()["phase"] == "checkpoint_failed"
            assert not any(a.get("kind") == "restart" for a in inc.get("actions", []))
            assert sim.pid == pid and sim.poll() is None
        finally:
            assert g.stop() == 0, g.log_text()
