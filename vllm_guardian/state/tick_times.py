"""The durations of the last ticks of the main loop, for p50/p99 in status and metrics.

A bounded ring (the last ``size`` ticks, 10 minutes at 1 Hz by default): the
guardian's own cost is judged from the same document that shows everything else.
"""

from __future__ import annotations

import math
from collections import deque


class TickTimes:
    def __init__(self, size: int = 600) -> None:
        self._ring: deque[float] = deque(maxlen=size)

    def add(self, seconds: float) -> None:
        self._ring.append(seconds)

    def __len__(self) -> int:
        return len(self._ring)

    def quantile(self, q: float) -> float | None:
        """The nearest-rank ``q`` quantile of the ticks kept, None before the first."""
        if not self._ring:
            return None
        ordered = sorted(self._ring)
        rank = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
        return ordered[rank]
