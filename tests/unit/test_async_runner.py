"""Slow probe jobs run off the loop, one per key, and overruns are reported once."""

import threading
import time

from vllm_guardian.state.async_runner import AsyncRunner, Done
from tests.support.wait import poll


def collected(r: AsyncRunner, done: list[Done]) -> list[Done]:
    """What has finished so far, gathered across calls."""
    done.extend(r.collect())
    return done


def test_a_second_job_for_a_busy_key_is_refused_until_the_first_is_collected():
    r = AsyncRunner(2)
    gate = threading.Event()
    assert r.submit("k", gate.wait, deadline=10)
    assert not r.submit("k", lambda: 1, deadline=10)
    gate.set()
    done: list[Done] = []
    assert poll(lambda: collected(r, done), 5.0, every=0.005)
    assert done[0].key == "k" and done[0].result is True
    assert r.submit("k", lambda: 2, deadline=10)
    r.shutdown()


def test_a_job_that_raises_comes_back_as_an_error():
    r = AsyncRunner(1)
    r.submit("k", lambda: 1 / 0, deadline=10)
    done: list[Done] = []
    assert poll(lambda: collected(r, done), 5.0, every=0.005)
    assert isinstance(done[0].error, ZeroDivisionError)
    r.shutdown()


def test_an_overrun_is_reported_once_and_keeps_the_key_busy():
    r = AsyncRunner(1)
    gate = threading.Event()
    r.submit("k", gate.wait, deadline=5.0)
    assert r.overruns(now=4.0) == []
    assert r.overruns(now=6.0) == ["k"]
    assert r.overruns(now=7.0) == []
    assert r.busy("k")
    gate.set()
    r.shutdown()


def test_a_finished_job_reports_how_long_it_ran():
    r = AsyncRunner(1)

    def slow_x() -> str:
        time.sleep(0.05)
        return "x"

    r.submit("k", slow_x, deadline=10)
    done: list[Done] = []
    assert poll(lambda: collected(r, done), 5.0, every=0.005)
    assert done[0].result == "x" and done[0].duration >= 0.04
    r.shutdown()


def test_a_job_submitted_while_stopping_is_refused_not_raised():
    r = AsyncRunner(1)
    r.shutdown()
    assert r.submit("k", lambda: 1, deadline=10) is False
