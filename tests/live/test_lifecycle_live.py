"""Live: the guardian's own lifecycle beside a real (simulated) vLLM server.

A guardian started beside an engine that hung while no guardian watched (a rollout, an
upgrade, a crash of the guardian) judges it at once: the server answers ``/health`` 200
and ``/v1/models``, so it is warm, whether or not this guardian saw it start.
"""

from __future__ import annotations

import time

import pytest

from vllm_guardian.sim.control import SimServer
from tests.support.guardian_process import GuardianProcess
from tests.support.guardian_process import fire

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
        assert inc["opened_at"] - started <= 45.0  # a failure bound on a loaded 2-core CI box (time printed above)
    finally:
        assert g.stop() == 0, g.log_text()


PAUSE_S = 35.0  # longer than engine_stall's 20 s window plus a canary: a hang detector would have fired
MAX_PAUSE_S = 15.0


def test_a_server_paused_on_purpose_is_shown_paused_never_a_hang_and_its_requests_complete(tmp_path):
    import os
    import threading

    from tests.support.wait import poll

    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1")
    with SimServer(startup_delay=1.0, env=env) as sim:
        sim.wait_ready(60)
        g = GuardianProcess(tmp_path, sim.port, extra={"lifecycle": {"max_pause": MAX_PAUSE_S}}).start()
        try:
            assert g.wait_ready(30), g.log_text()
            for _ in range(3):
                sim.complete("warm traffic", max_tokens=2, timeout=30)
            sim.pause("keep")
            answers: list = []

            def queued():
                answers.append(sim.complete("queued during the weight sync", max_tokens=4, timeout=180))

            threads = [threading.Thread(target=queued, daemon=True) for _ in range(3)]
            for t in threads:
                t.start()
            paused = g.wait_ready(10) and poll(lambda: (t := g.target()) and t["phase"] == "paused" and t, 15)
            assert paused and not paused["serving"], g.log_text()
            assert g.wait_incident("pause_too_long", timeout=MAX_PAUSE_S + 20), g.log_text()
            poll(lambda: False, PAUSE_S - MAX_PAUSE_S)  # the rest of the pause: nothing may open
            sim.resume()
            for t in threads:
                t.join(60)
            assert len(answers) == 3, answers
            assert poll(lambda: (t := g.target()) and t["phase"] == "serving", 30), g.target()
            kinds = [i["kind"] for i in g.incidents()]
            assert kinds == ["pause_too_long"], g.log_text()
            assert poll(lambda: g.incidents()[0]["status"] == "resolved", 15), g.incidents()
            inc = g.incidents()[0]
            assert not any(a.get("kind") == "restart" for a in inc.get("actions", []))
        finally:
            assert g.stop() == 0, g.log_text()


def test_a_guardian_restarted_while_a_hang_incident_is_open_keeps_it_once_and_judges_at_once(tmp_path, sim):
    for _ in range(3):
        sim.complete("warm traffic", max_tokens=2, timeout=30)
    fire(sim, "busy_loop")
    dry = {"policy": {"dry_run": True}}  # nothing restarted: the server must still hang for the second guardian
    first = GuardianProcess(tmp_path, sim.port, extra=dry).start()
    try:
        inc = first.wait_incident("busy_loop", timeout=60)
        assert inc is not None, first.log_text()
    finally:
        assert first.stop() == 0, first.log_text()
    second = GuardianProcess(tmp_path, sim.port, extra=dry).start()  # same state dir: an upgrade, a crash
    try:
        # ready by the server's word, at once: the still-open incident is judged again, neither
        # resolved nor opened a second time
        assert second.wait_ready(30), second.log_text()
        time.sleep(15)  # the scenario: longer than busy_loop's window, so a new judgement happened
        got = [(i["id"], i["kind"], i["status"]) for i in second.incidents()]
        assert got == [(inc["id"], "busy_loop", "firing")], second.log_text()
    finally:
        assert second.stop() == 0, second.log_text()


SPIN_LIMIT_S = 10.0  # lifecycle.max_pause_spin, shorter than the 30 s default to keep the test short


def test_a_server_that_says_paused_while_its_engine_spins_with_requests_pending_is_judged_a_busy_loop(tmp_path):
    """Audit E17: vLLM's API server answers /is_paused from its own state, so an engine that hangs
    while paused is still "paused" to the guardian; it was never judged a hang, only
    pause_too_long after 600 s. A thread burning a core all through lifecycle.max_pause_spin of the
    pause is a busy_loop judged as usual."""
    import os

    from tests.support.wait import poll
    from vllm_guardian.sim.control import LoadGenerator

    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", VLLM_SIM_PAUSE_ANSWERS="api")
    with SimServer(startup_delay=1.0, env=env) as sim:
        sim.wait_ready(60)
        g = GuardianProcess(tmp_path, sim.port, extra={"lifecycle": {"max_pause_spin": SPIN_LIMIT_S}}).start()
        try:
            assert g.wait_ready(30), g.log_text()
            for _ in range(3):
                sim.complete("warm traffic", max_tokens=2, timeout=30)
            with LoadGenerator(sim.url, sim.model, clients=4, max_duration=120, request_timeout=90) as load:
                time.sleep(3)  # the setup, not an assertion: the engine busy with requests
                sim.set_fault("busy_loop")  # fires at its next step: it spins, its requests pending for ever
                time.sleep(2.0)
                sim.pause("keep")  # the API server says paused from now on; the engine never hears it
                held = poll(lambda: (t := g.target()) and t["phase"] == "paused" and time.time(), 15)
                assert held and sim.is_paused(), g.log_text()
                inc = g.wait_incident("busy_loop", timeout=SPIN_LIMIT_S + 45)
                load.stop(timeout=1)
            assert inc is not None, g.log_text()
            assert inc["opened_at"] >= held  # judged during the pause, not before it
            assert inc["signals"]["hold"] == "paused" and inc["signals"]["hold_contradicted"] == "spin"
        finally:
            assert g.stop() == 0, g.log_text()
