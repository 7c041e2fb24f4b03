"""Window math over sample points: pure helpers the detectors share.

Reads lists of ``(t, value)`` points (oldest first, as ``SeriesStore`` returns
them) and answers small questions: which points fall in ``[t0, t1]``, the last
value at or before a time, how much of a window the points cover, median/mean.
No I/O, no clock: callers pass the times.
"""

from __future__ import annotations

import bisect
import statistics
from typing import Sequence

from vllm_guardian.series.store import Point, SeriesStore

_ALL = float("-inf")


def _time(p: Point) -> float:
    return p[0]


def all_points(series: SeriesStore, target: str, subject: str, metric: str) -> list[Point]:
    """Every stored point of one series, oldest first."""
    return series.window(target, subject, metric, _ALL)


def points_between(series: SeriesStore, target: str, subject: str, metric: str, t0: float, t1: float) -> list[Point]:
    """Points with ``t0 <= t <= t1``, oldest first."""
    return [p for p in series.window(target, subject, metric, t0) if p[0] <= t1]


def clip(points: Sequence[Point], t0: float, t1: float) -> list[Point]:
    """The points of an already fetched list that lie in ``[t0, t1]``."""
    return [p for p in points if t0 <= p[0] <= t1]


def last_at_or_before(points: Sequence[Point], t: float) -> Point | None:
    """The latest point with time ``<= t`` (points sorted by time), or None."""
    i = bisect.bisect_right(points, t, key=_time)  # O(log n): no list of times per call
    return points[i - 1] if i else None


def first_in(points: Sequence[Point], t0: float, t1: float) -> Point | None:
    """The earliest point with ``t0 <= t <= t1``, or None."""
    for p in points:
        if p[0] > t1:
            return None
        if p[0] >= t0:
            return p
    return None


def value_at(points: Sequence[Point], t: float) -> float | None:
    """The value of the latest point at or before ``t`` (a step function), or None."""
    p = last_at_or_before(points, t)
    return None if p is None else p[1]


def span(points: Sequence[Point], probe_interval: float = 0.0) -> float:
    """Time the points stand for: ``last.t - first.t + probe_interval`` (each sample
    covers the interval before it); 0 with no points."""
    if not points:
        return 0.0
    return points[-1][0] - points[0][0] + probe_interval


def coverage(points: Sequence[Point], window: float, probe_interval: float = 0.0) -> float:
    """Share of ``window`` the points cover (see ``span``), capped at 1."""
    if window <= 0:
        return 0.0
    return min(1.0, span(points, probe_interval) / window)


def values(points: Sequence[Point]) -> list[float]:
    return [p[1] for p in points]


def median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None
