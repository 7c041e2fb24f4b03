"""The discovery worker's state machine: one pass in flight, a stuck one abandoned on the loop's
clock (a number handed in, never read from the machine), a late result discarded, a cap on
passes left blocked. Passes are real threads held by events, so "blocked" is a read that does
not return."""

from __future__ import annotations

import threading


from vllm_guardian.discovery.worker import Abandoned, DiscoveryWorker, Finished
from tests.support.wait import poll

T0 = 1000.0
DEADLINE = 30.0  # how long a test waits for a thread it released; never reached when all is well


def blocked_pass(gate: threading.Event, result: str = "late"):
    def fn(current):
        gate.wait(DEADLINE)
        return result

    return fn


def finished(w: DiscoveryWorker, now: float):
    assert w.wait(DEADLINE)
    return w.poll(now)


def test_a_pass_that_ends_is_handed_back_once_with_its_result():
    w: DiscoveryWorker[str] = DiscoveryWorker(stuck_after=30)
    assert w.start(lambda current: "targets", T0)
    out = finished(w, T0)
    assert isinstance(out, Finished) and out.result == "targets" and out.error is None
    assert w.poll(T0 + 1) is None and not w.in_flight


def test_a_pass_that_raises_is_handed_back_with_its_error():
    def broken(current):
        raise OSError("proc is gone")

    w: DiscoveryWorker[str] = DiscoveryWorker(stuck_after=30)
    w.start(broken, T0)
    out = finished(w, T0)
    assert isinstance(out, Finished) and isinstance(out.error, OSError) and out.result is None


def test_no_second_pass_starts_while_one_is_in_flight():
    gate = threading.Event()
    w: DiscoveryWorker[str] = DiscoveryWorker(stuck_after=30)
    assert w.start(blocked_pass(gate), T0)
    try:
        assert not w.start(lambda current: "second", T0 + 1)
    finally:
        gate.set()


def test_a_running_pass_is_not_stuck_before_stuck_after_on_the_loops_clock():
    gate = threading.Event()
    w: DiscoveryWorker[str] = DiscoveryWorker(stuck_after=30)
    w.start(blocked_pass(gate), T0)
    try:
        assert w.poll(T0 + 29.9) is None and w.in_flight
    finally:
        gate.set()


def test_a_pass_running_past_stuck_after_is_abandoned_once_and_names_its_thread():
    gate = threading.Event()
    w: DiscoveryWorker[str] = DiscoveryWorker(stuck_after=30)
    w.start(blocked_pass(gate), T0)
    try:
        out = w.poll(T0 + 30)
        assert isinstance(out, Abandoned) and out.running_s == 30 and out.thread_id is not None
        assert out.still_blocked == 1 and not w.in_flight
        assert w.poll(T0 + 60) is None
    finally:
        gate.set()


def test_an_abandoned_pass_knows_it_is_no_longer_current():
    gate, asked = threading.Event(), []

    def fn(current):
        gate.wait(DEADLINE)
        asked.append(current())
        return "late"

    w: DiscoveryWorker[str] = DiscoveryWorker(stuck_after=30)
    w.start(fn, T0)
    w.poll(T0 + 30)
    gate.set()
    w.wait(0)  # nothing in flight: returns at once
    _wait_until(lambda: asked)
    assert asked == [False]


def test_the_late_result_of_an_abandoned_pass_is_never_handed_back():
    gate = threading.Event()
    w: DiscoveryWorker[str] = DiscoveryWorker(stuck_after=30)
    w.start(blocked_pass(gate, "stale"), T0)
    w.poll(T0 + 30)
    assert w.start(lambda current: "fresh", T0 + 30)
    gate.set()
    _wait_until(lambda: w.still_blocked() == 0)
    out = finished(w, T0 + 31)
    assert isinstance(out, Finished) and out.result == "fresh"
    assert w.poll(T0 + 32) is None


def test_a_fresh_pass_may_start_right_after_one_was_abandoned():
    gate = threading.Event()
    w: DiscoveryWorker[str] = DiscoveryWorker(stuck_after=30)
    w.start(blocked_pass(gate), T0)
    w.poll(T0 + 30)
    try:
        assert w.start(lambda current: "fresh", T0 + 30)
    finally:
        gate.set()


def test_passes_stop_starting_once_the_cap_of_blocked_threads_is_reached():
    gates = [threading.Event() for _ in range(2)]
    w: DiscoveryWorker[str] = DiscoveryWorker(stuck_after=30, max_abandoned=2)
    try:
        now = T0
        for gate in gates:
            assert w.start(blocked_pass(gate), now)
            now += 30
            assert isinstance(w.poll(now), Abandoned)
        assert w.exhausted and not w.start(lambda current: "more", now)
    finally:
        for gate in gates:
            gate.set()


def test_a_blocked_thread_that_returns_frees_its_place_under_the_cap():
    gate = threading.Event()
    w: DiscoveryWorker[str] = DiscoveryWorker(stuck_after=30, max_abandoned=1)
    w.start(blocked_pass(gate), T0)
    w.poll(T0 + 30)
    assert w.exhausted
    gate.set()
    _wait_until(lambda: not w.exhausted)
    assert w.start(lambda current: "again", T0 + 31)


def test_a_closed_worker_starts_nothing():
    w: DiscoveryWorker[str] = DiscoveryWorker(stuck_after=30)
    w.close()
    assert not w.start(lambda current: "x", T0) and not w.in_flight


def test_waiting_for_a_pass_returns_false_while_it_still_runs():
    gate = threading.Event()
    w: DiscoveryWorker[str] = DiscoveryWorker(stuck_after=30)
    w.start(blocked_pass(gate), T0)
    try:
        assert w.wait(0) is False
    finally:
        gate.set()


def _wait_until(cond) -> None:
    assert poll(cond, DEADLINE, every=0.01), "the released thread never returned"
