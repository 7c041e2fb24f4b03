"""The series' status sections: the engine's latest gauges and progress rate, and a memory trend
summed over the process tree with its Theil–Sen slope (absent before any sample)."""

from __future__ import annotations

from vllm_guardian.model import Sample
from vllm_guardian.series import SeriesStore
from vllm_guardian.series import metrics as m
from vllm_guardian.series.status import EngineStatus, MemoryTrend, engine_section, memory_section


def store(*samples: tuple[str, str, float, float]) -> SeriesStore:
    s = SeriesStore()
    s.extend(Sample("llama", subject, metric, value, t) for subject, metric, value, t in samples)
    return s


def test_the_engine_section_holds_the_latest_gauges_and_steps_per_second_over_ten_seconds():
    s = store(
        ("", m.REQ_RUNNING, 3.0, 9.0),
        ("", m.REQ_WAITING, 1.0, 9.0),
        ("", m.KV_USAGE, 0.123456, 9.0),
        ("", m.ITERATIONS, 100.0, 0.0),
        ("", m.ITERATIONS, 150.0, 5.0),
    )
    assert engine_section(s, "llama", now=9.0) == EngineStatus(3.0, 1.0, 0.123, 10.0)


def test_an_engine_without_samples_has_every_gauge_absent():
    assert engine_section(SeriesStore(), "llama", now=9.0) == EngineStatus(None, None, None, None)


def test_the_rss_trend_sums_the_tree_and_fits_its_slope():
    s = store(
        *[("p1", m.PROC_RSS, 1000.0 + 10 * t, float(t)) for t in range(5)],
        *[("p2", m.PROC_RSS, 500.0, float(t)) for t in range(5)],
    )
    mem = memory_section(s, "llama", ["p1", "p2"], now=4.0, accel_window=60.0, rss_window=60.0)
    assert (mem.accelerator, mem.rss) == (None, MemoryTrend(1540, 10.0, 60.0))
