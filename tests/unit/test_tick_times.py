"""The ring of recent tick durations behind status's tick_p50_s / tick_p99_s."""

import pytest

from vllm_guardian.state.tick_times import TickTimes


def test_no_tick_yet_has_no_quantile():
    assert TickTimes().quantile(0.5) is None


@pytest.mark.parametrize(
    "values, q, expected",
    [
        ([0.004], 0.5, 0.004),
        ([0.004], 0.99, 0.004),
        ([0.001, 0.002, 0.003], 0.5, 0.002),
        ([0.001] * 99 + [0.5], 0.5, 0.001),
        ([0.001] * 98 + [0.5, 0.6], 0.99, 0.5),
        ([0.003, 0.001, 0.002], 1.0, 0.003),
    ],
)
def test_nearest_rank_quantiles(values, q, expected):
    times = TickTimes()
    for v in values:
        times.add(v)
    assert times.quantile(q) == expected


def test_only_the_last_ticks_count():
    times = TickTimes(size=3)
    for v in (9.0, 9.0, 0.1, 0.2, 0.3):
        times.add(v)
    assert len(times) == 3 and times.quantile(1.0) == 0.3
