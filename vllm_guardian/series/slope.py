"""Robust trend math over ``(t, value)`` points: Theil–Sen slope, Spearman rank correlation.

Pure and stdlib only. The Theil–Sen slope is the median of the slopes of every
pair of points with distinct times: up to ~29% of the points can be wild
outliers without moving it, unlike a least-squares fit or a two-point
difference. It costs O(n²) pairs, so long series are first reduced to at most
``max_points`` bucket medians (``downsample``), which keeps a trend intact.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

Point = tuple[float, float]

DEFAULT_MAX_POINTS = 48


@dataclass(frozen=True)
class Fit:
    slope: float  # value units per second
    intercept: float  # value at t = 0 on the fitted line
    n: int  # points used (after downsampling)
    rising_share: float  # share of pairwise slopes > 0 (1.0 = every later point is higher)

    def at(self, t: float) -> float:
        return self.intercept + self.slope * t


def downsample(points: Sequence[Point], max_points: int = DEFAULT_MAX_POINTS) -> list[Point]:
    """At most ``max_points`` points: consecutive buckets replaced by (median t, median value).
    Points must be sorted by time."""
    n = len(points)
    if max_points < 2:
        raise ValueError("max_points must be >= 2")
    if n <= max_points:
        return list(points)
    out: list[Point] = []
    for b in range(max_points):
        lo, hi = b * n // max_points, (b + 1) * n // max_points
        chunk = points[lo:hi]  # sorted by time: the middle time is the median time
        mid = len(chunk) // 2
        t = chunk[mid][0] if len(chunk) % 2 else (chunk[mid - 1][0] + chunk[mid][0]) / 2
        out.append((t, statistics.median([p[1] for p in chunk])))
    return out


def pairwise_slopes(points: Sequence[Point]) -> list[float]:
    """Slope of every pair of points with distinct times."""
    out = []
    for i, (t0, v0) in enumerate(points):
        for t1, v1 in points[i + 1 :]:
            if t1 != t0:
                out.append((v1 - v0) / (t1 - t0))
    return out


def theil_sen(points: Sequence[Point], max_points: int = DEFAULT_MAX_POINTS) -> Fit | None:
    """Median-of-pairwise-slopes line through the points; None with fewer than two distinct times."""
    pts = downsample(points, max_points)
    slopes = pairwise_slopes(pts)
    if not slopes:
        return None
    slope = statistics.median(slopes)
    intercept = statistics.median(v - slope * t for t, v in pts)
    rising = sum(1 for s in slopes if s > 0) / len(slopes)
    return Fit(slope, intercept, len(pts), rising)


def _ranks(xs: Sequence[float]) -> list[float]:
    """1-based ranks, ties get their average rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        avg = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = avg
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation; None when fewer than 3 pairs or either side is constant."""
    if len(xs) != len(ys):
        raise ValueError("xs and ys differ in length")
    if len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)
