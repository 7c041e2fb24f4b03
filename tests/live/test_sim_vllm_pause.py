"""The simulated vLLM's dev-mode pause and sleep behave like vLLM 0.32's (VLLM_SERVER_DEV_MODE=1)."""

from __future__ import annotations

import os
import threading

import pytest

from vllm_guardian.sim.control import SimRequestError, SimServer
from tests.support.wait import poll

pytestmark = pytest.mark.live


def dev_server(dev: bool = True) -> SimServer:
    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1" if dev else "0")
    return SimServer(startup_delay=0.5, env=env).start()


@pytest.fixture(scope="module")
def sim():
    with dev_server() as server:
        server.wait_ready(30)
        yield server


def queue_requests(sim: SimServer, n: int) -> tuple[list[threading.Thread], list]:
    answers: list = []

    def one():
        try:
            answers.append(sim.complete("queued while paused", max_tokens=4, timeout=120))
        except Exception as e:  # noqa: BLE001 - recorded, the test reads it
            answers.append(e)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads, answers


def test_pause_keep_freezes_queued_requests_until_resume(sim):
    assert sim.pause("keep") == {"status": "paused"}
    try:
        assert sim.is_paused() and sim.is_sleeping()  # vLLM 0.32: a pause is its level-0 sleep
        assert 'sleep_state="awake"} 1.0' in sim.metrics_text()
        threads, answers = queue_requests(sim, 3)
        assert poll(lambda: sim.state()["stats"]["waiting"] == 3, timeout=10)
        assert answers == []  # frozen, not refused
    finally:
        sim.resume()
    for t in threads:
        t.join(30)
    assert len(answers) == 3 and all(isinstance(a, dict) for a in answers)
    assert not sim.is_paused()


@pytest.mark.parametrize("mode", ["abort", "wait"])
def test_pause_abort_or_wait_refuses_new_requests_with_503_until_resume(sim, mode):
    sim.pause(mode)
    try:
        with pytest.raises(SimRequestError) as err:
            sim.complete("refused", max_tokens=2, timeout=10)
        assert err.value.status == 503
    finally:
        sim.resume()
    assert sim.complete("served again", max_tokens=2, timeout=30)["choices"]


def test_sleep_is_a_pause_that_says_it_is_asleep(sim):
    assert sim.sleep(level=1, mode="keep")["status"] == "sleeping"
    try:
        assert sim.is_sleeping() and sim.is_paused()
        assert poll(lambda: 'sleep_state="awake"} 0.0' in sim.metrics_text(), 10)
    finally:
        sim.wake_up()
    assert not sim.is_sleeping()


def test_a_hung_engine_answers_no_is_paused():
    with dev_server() as server:
        server.wait_ready(30)
        server.set_fault("stall")
        threading.Thread(target=lambda: _quiet(server), daemon=True).start()
        assert poll(lambda: _no_answer(server), timeout=30)  # vLLM asks the engine, which never answers


def _no_answer(server: SimServer) -> bool:
    try:
        server.is_paused(timeout=2)
    except OSError:  # timed out
        return True
    return False


def _quiet(server: SimServer) -> None:
    try:
        server.complete("trip", max_tokens=2, timeout=30)
    except Exception:  # noqa: BLE001 - the engine hangs: the request fails, which is the point
        pass


def test_without_dev_mode_the_endpoints_are_404():
    with dev_server(dev=False) as server:
        server.wait_ready(30)
        assert server.request("GET", "/is_paused")[0] == 404
        assert server.request("POST", "/pause?mode=keep")[0] == 404
