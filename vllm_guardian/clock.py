"""Time, behind a seam: monotonic for windows/rates/timeouts, wall only to stamp events."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...
    def wall(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock. ``sleep`` can be cut short by ``wake()`` (used for shutdown)."""

    def __init__(self) -> None:
        self._wake = threading.Event()

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._wake.wait(seconds)
        self._wake.clear()

    def wake(self) -> None:
        self._wake.set()
