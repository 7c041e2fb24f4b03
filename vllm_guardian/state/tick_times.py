"""The durations of the ticks of the main loop: p50/p99 of the last ones for status, and a
cumulative histogram of all of them for ``/metrics`` (``guardian_tick_duration_seconds``).

A bounded ring (the last ``size`` ticks, 10 minutes at 1 Hz by default): the
guardian's own cost is judged from the same document that shows everything else.
The histogram's buckets (``BUCKETS``, seconds) span a cheap tick (a few ms) to a starved one.
"""

from __future__ import annotations

import bisect
import math
from collections import deque

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class TickTimes:
    def __init__(self, size: int = 600) -> None:
        self._ring: deque[float] = deque(maxlen=size)
        self._counts = [0] * (len(BUCKETS) + 1)  # per bucket, the last one +Inf
        self._sum = 0.0

    def add(self, seconds: float) -> None:
        self._ring.append(seconds)
        self._counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self._sum += seconds

    def histogram(self) -> tuple[list[tuple[str, int]], float]:
        """Every tick since start: cumulative ``(le, count)`` pairs, ``+Inf`` last, and the sum."""
        counts, total = list(self._counts), self._sum  # copied first: the loop thread adds meanwhile
        out, running = [], 0
        for le, n in zip((*(f"{b:g}" for b in BUCKETS), "+Inf"), counts, strict=True):
            running += n
            out.append((le, running))
        return out, total

    def __len__(self) -> int:
        return len(self._ring)

    def quantile(self, q: float) -> float | None:
        """The nearest-rank ``q`` quantile of the ticks kept, None before the first."""
        if not self._ring:
            return None
        ordered = sorted(self._ring)
        rank = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
        return ordered[rank]
