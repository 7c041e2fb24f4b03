"""The one way a test waits for something another thread or process does: poll a predicate.

``poll`` hands back the first truthy value, or None when the time is up (the caller asserts and
says what it waited for); ``wait_for`` is the same wait failing the test itself with ``what``.
The timeouts are failure bounds, never performance claims.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll(pred: Callable[[], T | None], timeout: float, every: float = 0.2) -> T | None:
    """The first truthy value of ``pred()`` within ``timeout`` seconds (asked at least once), else None."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() >= deadline:
            return None
        time.sleep(every)


def wait_for(pred: Callable[[], T | None], timeout: float = 15.0, what: str = "condition", every: float = 0.02) -> T:
    """The first truthy value of ``pred()``; fails the test, naming ``what``, after ``timeout`` seconds."""
    got = poll(pred, timeout, every)
    if not got:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")
    return got
