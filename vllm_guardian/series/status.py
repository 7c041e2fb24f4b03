"""What the series say about one target, as typed status sections (pure reads of a
``SeriesStore``): the engine's latest gauges and progress (``engine_section``) and the memory
level and trend of its accelerator memory and process tree (``memory_section``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vllm_guardian.series import metrics as m
from vllm_guardian.series.slope import theil_sen
from vllm_guardian.series.store import SeriesStore


@dataclass(frozen=True)
class EngineStatus:
    requests_running: float | None
    requests_waiting: float | None
    kv_cache_usage: float | None
    steps_per_s: float | None  # engine steps per second over the last 10 s


@dataclass(frozen=True)
class MemoryTrend:
    bytes: int
    slope_bytes_per_s: float | None  # Theil–Sen over the window
    window_s: float


@dataclass(frozen=True)
class MemoryStatus:
    accelerator: MemoryTrend | None
    rss: MemoryTrend | None


def rounded(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def latest(series: SeriesStore, target: str, metric: str) -> float | None:
    point = series.latest(target, "", metric)
    return None if point is None else point[1]


def progress_rate(series: SeriesStore, target: str, now: float, window: float = 10.0) -> float | None:
    pts = series.window(target, "", m.ITERATIONS, now - window)
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return max(0.0, pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def engine_section(series: SeriesStore, target: str, now: float) -> EngineStatus:
    return EngineStatus(
        latest(series, target, m.REQ_RUNNING),
        latest(series, target, m.REQ_WAITING),
        rounded(latest(series, target, m.KV_USAGE)),
        rounded(progress_rate(series, target, now), 2),
    )


def trend(
    series: SeriesStore, target: str, subjects: Sequence[str], metric: str, now: float, window: float
) -> MemoryTrend | None:
    """The current level and Theil–Sen slope (bytes/s) of a memory series summed over subjects."""
    totals: dict[float, float] = {}
    for subject in subjects:
        for t, v in series.window(target, subject, metric, now - window):
            totals[round(t, 1)] = totals.get(round(t, 1), 0.0) + v
    pts = sorted(totals.items())
    if not pts:
        return None
    fit = theil_sen(pts) if len(pts) >= 2 else None
    return MemoryTrend(int(pts[-1][1]), None if fit is None else round(fit.slope, 1), window)


def memory_section(
    series: SeriesStore, target: str, rss_subjects: Sequence[str], now: float, accel_window: float, rss_window: float
) -> MemoryStatus:
    """The target's accelerator memory (all its processes) and the RSS of its process tree."""
    return MemoryStatus(
        trend(series, target, [""], m.ACCEL_MEM, now, accel_window),
        trend(series, target, rss_subjects, m.PROC_RSS, now, rss_window),
    )
