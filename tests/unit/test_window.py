"""Window math and the progress helpers: counters moved / frozen / unknown, pending work."""

from __future__ import annotations

import pytest

from vllm_guardian.detectors.progress import (
    canaries,
    counter_moved,
    pending_samples,
    pending_throughout,
    progress_between,
)
from vllm_guardian.model import Sample
from vllm_guardian.series import metrics as m
from vllm_guardian.series.store import SeriesStore
from vllm_guardian.series.window import coverage, first_in, last_at_or_before, median, points_between, span

T = "llm"


def store(*series: list[Sample]) -> SeriesStore:
    s = SeriesStore()
    for samples in series:
        s.extend(samples)
    return s


def points(metric: str, pairs: list[tuple[float, float]], subject: str = "") -> list[Sample]:
    return [Sample(T, subject, metric, v, t) for t, v in pairs]


def every_second(metric: str, t0: float, t1: float, value) -> list[Sample]:
    n = int(round(t1 - t0))
    return [Sample(T, "", metric, value(t0 + i) if callable(value) else value, t0 + i) for i in range(n + 1)]


# ------------------------------------------------------------------ window helpers
PTS = [(1.0, 10.0), (2.0, 20.0), (3.0, 30.0)]


@pytest.mark.parametrize(
    "t, expected",
    [(0.5, None), (1.0, (1.0, 10.0)), (2.5, (2.0, 20.0)), (9.0, (3.0, 30.0))],
)
def test_last_at_or_before(t, expected):
    assert last_at_or_before(PTS, t) == expected


@pytest.mark.parametrize(
    "t0, t1, expected",
    [(0.0, 0.5, None), (1.5, 3.0, (2.0, 20.0)), (3.5, 9.0, None), (1.0, 1.0, (1.0, 10.0))],
)
def test_first_in(t0, t1, expected):
    assert first_in(PTS, t0, t1) == expected


def test_span_counts_the_interval_each_sample_stands_for():
    assert span(PTS, probe_interval=1.0) == 3.0
    assert span([], probe_interval=1.0) == 0.0


@pytest.mark.parametrize("window, expected", [(6.0, 0.5), (3.0, 1.0), (1.0, 1.0), (0.0, 0.0)])
def test_coverage_is_a_capped_share_of_the_window(window, expected):
    assert coverage(PTS, window, probe_interval=1.0) == expected


def test_points_between_is_inclusive_on_both_ends():
    s = store(points(m.ITERATIONS, PTS))
    assert points_between(s, T, "", m.ITERATIONS, 2.0, 3.0) == [(2.0, 20.0), (3.0, 30.0)]


def test_median_of_nothing_is_none():
    assert median([]) is None
    assert median([1.0, 3.0, 2.0]) == 2.0


# ------------------------------------------------------------------ counters
@pytest.mark.parametrize(
    "pairs, t0, t1, expected",
    [
        ([(0, 5), (1, 6), (2, 7)], 0.5, 2.0, True),  # advanced
        ([(0, 5), (1, 5), (2, 5)], 0.5, 2.0, False),  # sampled across, frozen
        ([(0, 5), (1, 9), (2, 0)], 1.5, 2.0, True),  # decreased: a restart, not a hang
        ([(0, 5), (1, 6), (2, 5)], 0.0, 2.0, True),  # moved and came back
        ([(0, 5)], 0.5, 2.0, None),  # one sample: nothing known about the interval
        ([(5, 5), (6, 5)], 0.0, 2.0, None),  # samples only after the interval
        ([(1, 5), (2, 5)], 0.0, 3.0, False),  # first value inside the interval is the baseline
        ([(0, 5), (1, 6)], 2.0, 1.0, None),  # empty interval
    ],
)
def test_counter_moved(pairs, t0, t1, expected):
    assert counter_moved([(float(t), float(v)) for t, v in pairs], t0, t1) is expected


def test_progress_true_when_any_counter_advances():
    s = store(every_second(m.ITERATIONS, 0, 10, 7.0), every_second(m.GEN_TOKENS, 0, 10, lambda t: t * 3))
    assert progress_between(s, T, 2.0, 10.0) is True


def test_progress_false_when_every_sampled_counter_is_frozen():
    s = store(every_second(m.ITERATIONS, 0, 10, 7.0), every_second(m.SUCCESS, 0, 10, 2.0))
    assert progress_between(s, T, 2.0, 10.0) is False


def test_progress_unknown_without_counter_samples():
    s = store(every_second(m.REQ_RUNNING, 0, 10, 1.0))
    assert progress_between(s, T, 2.0, 10.0) is None


def test_progress_true_when_a_counter_decreased_after_a_server_restart():
    s = store(points(m.ITERATIONS, [(0, 900), (1, 905), (2, 0), (3, 0)]))
    assert progress_between(s, T, 1.5, 3.0) is True


def test_progress_ignores_a_counter_that_only_moved_before_the_baseline():
    s = store(points(m.ITERATIONS, [(0, 1), (1, 2), (2, 3), (3, 3), (4, 3)]))
    assert progress_between(s, T, 2.0, 4.0) is False


def test_progress_of_another_target_is_not_seen():
    s = SeriesStore()
    s.extend(Sample("other", "", m.ITERATIONS, float(t), float(t)) for t in range(10))
    assert progress_between(s, T, 2.0, 9.0) is None


# ------------------------------------------------------------------ pending work
@pytest.mark.parametrize(
    "running, waiting, expected",
    [
        ([1, 1, 1], [0, 0, 0], True),
        ([0, 0, 0], [2, 3, 1], True),  # queued only
        ([1, 0, 1], [0, 0, 0], False),  # drained once in the interval
        ([0, 0, 0], [0, 0, 0], False),  # idle
    ],
)
def test_pending_throughout(running, waiting, expected):
    s = store(
        points(m.REQ_RUNNING, [(float(t), float(v)) for t, v in enumerate(running)]),
        points(m.REQ_WAITING, [(float(t), float(v)) for t, v in enumerate(waiting)]),
    )
    assert pending_throughout(s, T, 0.0, 2.0) is expected


def test_pending_needs_at_least_one_sample():
    s = store(points(m.REQ_RUNNING, [(0.0, 3.0)]))
    assert pending_throughout(s, T, 1.0, 5.0) is False


def test_pending_with_only_one_gauge_exported():
    s = store(points(m.REQ_RUNNING, [(0.0, 2.0), (1.0, 2.0)]))
    assert pending_samples(s, T, 0.0, 1.0) == [(0.0, 2.0), (1.0, 2.0)]
    assert pending_throughout(s, T, 0.0, 1.0) is True


@pytest.mark.parametrize(
    "running, waiting, expected",
    [
        (
            [(0.0, 1.0), (1.0, 2.0), (2.0, 0.0)],
            [(0.0, 3.0), (1.0, 0.0), (2.0, 4.0)],
            [(0.0, 4.0), (1.0, 2.0), (2.0, 4.0)],
        ),
        # read apart: each time of either, each gauge at its latest value at or before it
        ([(0.0, 1.0), (2.0, 2.0)], [(1.0, 3.0), (2.0, 5.0)], [(0.0, 1.0), (1.0, 4.0), (2.0, 7.0)]),
        # a time stamped twice counts once, with the gauges' latest values
        ([(0.0, 1.0), (1.0, 2.0), (1.0, 6.0)], [(0.0, 0.0), (1.0, 1.0), (1.0, 1.0)], [(0.0, 1.0), (1.0, 7.0)]),
        # the window starts after a gauge's last point before it: that point still holds at t0's first time
        ([(-1.0, 5.0), (1.0, 5.0)], [(0.0, 1.0), (1.0, 1.0)], [(0.0, 6.0), (1.0, 6.0)]),
    ],
    ids=["read together", "read apart", "a time stamped twice", "a value from before the window"],
)
def test_pending_sums_each_gauges_latest_value_at_every_sample_time(running, waiting, expected):
    s = store(points(m.REQ_RUNNING, running), points(m.REQ_WAITING, waiting))
    assert pending_samples(s, T, 0.0, 2.0) == expected


# ------------------------------------------------------------------ canaries
def canary_samples(start: float, end: float, ok: int, timed_out: int, with_start: bool = True) -> list[Sample]:
    out = [
        Sample(T, "", m.CANARY_OK, ok, end),
        Sample(T, "", m.CANARY_TIMEOUT, timed_out, end),
        Sample(T, "", m.CANARY_LATENCY, end - start, end),
    ]
    if with_start:
        out.append(Sample(T, "", m.CANARY_STARTED, start, end))
    return out


def test_canaries_are_read_back_oldest_first():
    s = store(canary_samples(1.0, 1.2, 1, 0), canary_samples(5.0, 10.0, 0, 1))
    got = canaries(s, T, 0.0, 20.0)
    assert [(c.started, c.ended, c.ok, c.timed_out) for c in got] == [(1.0, 1.2, True, False), (5.0, 10.0, False, True)]


def test_canary_start_falls_back_to_end_minus_latency():
    s = store(canary_samples(4.0, 9.0, 0, 1, with_start=False))
    (c,) = canaries(s, T, 0.0, 20.0)
    assert c.started == pytest.approx(4.0)


def test_canaries_outside_the_interval_are_left_out():
    s = store(canary_samples(1.0, 1.2, 1, 0))
    assert canaries(s, T, 2.0, 20.0) == []
