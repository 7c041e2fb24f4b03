"""What a listener on a Redis channel did with each message it was handed: counted by outcome,
each drop reason logged once per episode. Pure bookkeeping, thread-safe.

The report intake (``gates.intake``) and the control-channel check (``gates.control``) keep their
counts here, so every message anyone publishes is a counter (status, Prometheus) and a flood of
one kind is one log line: an episode of a reason ends after ``EPISODE_QUIET_S`` without it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

EPISODE_QUIET_S = 300.0


class Outcomes:
    def __init__(self, outcomes: Iterable[str], what: str, log: logging.Logger) -> None:
        self.counts: dict[str, int] = {o: 0 for o in outcomes}  # outcome -> messages (read by status)
        self.what, self.log = what, log
        self._episodes: dict[str, float] = {}  # reason -> wall time of its last drop
        self._lock = threading.Lock()

    def count(self, outcome: str) -> str:
        """One more message with this outcome (not logged)."""
        with self._lock:
            self.counts[outcome] = self.counts.get(outcome, 0) + 1
        return outcome

    def drop(self, reason: str, wall: float, detail: str) -> str:
        """One more message dropped for ``reason``; the first of an episode is logged."""
        with self._lock:
            self.counts[reason] = self.counts.get(reason, 0) + 1
            last = self._episodes.get(reason)
            first = last is None or wall - last > EPISODE_QUIET_S
            self._episodes[reason] = wall
        if first:
            self.log.warning("%s %s: %s (dropped; further ones counted, not logged)", self.what, reason, detail)
        return reason

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)
