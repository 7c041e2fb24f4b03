"""The alerts the spool refused, held in memory until the spool or Redis takes them.

When the disk refuses a spool write (ENOSPC, EIO) the sink still delivers the event: it is held
here, in order, behind everything spooled, bounded like the spool (the oldest dropped first, and
counted). Decides when the spool takes the held events back (``respool``, oldest first, while it
accepts them) and says once per episode that the spool refuses writes and once that it takes them
again. Shares the sink's lock: the sink's counters and these events change together.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any, Mapping

from vllm_guardian.sinks.spool import Spool

log = logging.getLogger("vllm_guardian.sinks.redis_sink")  # the sink's log: operators filter on it


class HeldEvents:
    """Events the spool refused, oldest first; ``error`` is the spool's last refusal (None: it writes)."""

    def __init__(self, spool: Spool, lock: threading.Lock) -> None:
        self.spool = spool
        self._lock = lock
        self.events: deque[dict[str, Any]] = deque()
        self.dropped = 0
        self.error: str | None = None

    def any(self) -> bool:
        with self._lock:
            return bool(self.events)

    def hold(self, event: Mapping[str, Any]) -> None:
        with self._lock:
            self.events.append(dict(event))
            while len(self.events) > self.spool.max_events:
                self.events.popleft()
                self.dropped += 1

    def first(self) -> dict[str, Any] | None:
        with self._lock:
            return self.events[0] if self.events else None

    def drop_first(self, event: dict[str, Any]) -> None:
        """Forget ``event`` once taken (by the spool or Redis); the caller holds the lock."""
        if self.events and self.events[0] is event:
            self.events.popleft()

    def spool_failed(self, e: OSError) -> None:
        with self._lock:
            first = self.error is None
            self.error = f"{type(e).__name__}: {e}"
        if first:
            log.error(
                "alerts: the spool refuses writes (%s); holding alerts in memory and delivering "
                "them from there until it takes them again",
                e,
            )

    def spool_ok(self) -> None:
        with self._lock:
            was, self.error = self.error, None
        if was is not None:
            log.warning("alerts: the spool takes writes again")

    def respool(self) -> None:
        """Move held events back into the spool, oldest first, while it takes them."""
        while True:
            event = self.first()
            if event is None:
                return
            try:
                self.spool.append(event)
            except OSError as e:
                self.spool_failed(e)
                return
            self.spool_ok()
            with self._lock:
                self.drop_first(event)
