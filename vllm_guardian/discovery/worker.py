"""Discovery passes off the loop thread: one at a time, a stuck one abandoned, never joined.

A pass reads ``/proc/<pid>/cmdline`` of new processes, cgroups, the Kubernetes API and, through
the discovery hooks, ``environ``; a read of a process wedged in a driver with its memory map
locked does not return. So each pass runs on its own daemon thread, and this module decides, on
the loop thread, with the times the loop hands it (the injected clock):

- whether a pass may start: none is in flight, and fewer than ``max_abandoned`` abandoned passes
  are still blocked (past that, discovery stops instead of leaking threads: ``exhausted``);
- what ``poll(now)`` hands back, each at most once: the pass in flight's result or error when it
  has finished (``Finished``), or, once it has run ``stuck_after`` seconds, that it was abandoned
  (``Abandoned``, with the thread id, for the caller to ask what it is blocked on);
- that an abandoned pass's late result is discarded: the worker's generation has moved on, its
  ``current()`` answers False (so it skips its side effects) and nothing it returns is handed back.

It reads nothing itself; ``wait`` is the only call that blocks the loop, for at most its timeout.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

R = TypeVar("R")


@dataclass(frozen=True)
class Finished(Generic[R]):
    generation: int
    result: R | None
    error: BaseException | None
    seconds: float  # the pass's own run time (perf counter, on its thread)


@dataclass(frozen=True)
class Abandoned:
    generation: int
    thread_id: int | None
    running_s: float  # on the injected clock
    still_blocked: int  # abandoned passes that have not returned, this one included


Outcome = Finished[R] | Abandoned


class _Pass(Generic[R]):
    def __init__(self, generation: int, started: float) -> None:
        self.generation = generation
        self.started = started
        self.done = threading.Event()
        self.result: R | None = None
        self.error: BaseException | None = None
        self.seconds = 0.0
        self.thread: threading.Thread | None = None


class DiscoveryWorker(Generic[R]):
    def __init__(self, stuck_after: float, max_abandoned: int = 4, name: str = "discovery") -> None:
        self.stuck_after = stuck_after
        self.max_abandoned = max_abandoned
        self.name = name
        self.generation = 0
        self._current: _Pass[R] | None = None
        self._abandoned: list[_Pass[R]] = []
        self._closed = False

    @property
    def in_flight(self) -> bool:
        return self._current is not None

    def still_blocked(self) -> int:
        """Abandoned passes whose thread has not returned yet."""
        self._abandoned = [p for p in self._abandoned if not p.done.is_set()]
        return len(self._abandoned)

    @property
    def exhausted(self) -> bool:
        return self.still_blocked() >= self.max_abandoned

    def start(self, fn: Callable[[Callable[[], bool]], R], now: float) -> bool:
        """Run ``fn(current)`` on a new daemon thread; ``current()`` is False once the pass was
        abandoned. False (nothing started) while a pass is in flight, when exhausted or closed."""
        if self._closed or self._current is not None or self.exhausted:
            return False
        self.generation += 1
        p: _Pass[R] = _Pass(self.generation, now)

        def current() -> bool:
            return self._current is p

        def run() -> None:
            t0 = time.perf_counter()
            try:
                p.result = fn(current)
            except BaseException as e:  # noqa: BLE001 - handed to the loop, which counts it
                p.error = e
            finally:
                p.seconds = time.perf_counter() - t0
                p.done.set()

        p.thread = threading.Thread(target=run, name=f"{self.name}-{p.generation}", daemon=True)
        self._current = p
        p.thread.start()
        return True

    def wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the pass in flight; True when none is running."""
        p = self._current
        return p is None or p.done.wait(timeout)

    def poll(self, now: float) -> Outcome[R] | None:
        p = self._current
        if p is None:
            return None
        if p.done.is_set():
            self._current = None
            return Finished(p.generation, p.result, p.error, p.seconds)
        if now - p.started < self.stuck_after:
            return None
        self._current = None  # from here on its result is nobody's
        self._abandoned.append(p)
        thread_id = p.thread.ident if p.thread is not None else None
        return Abandoned(p.generation, thread_id, now - p.started, self.still_blocked())

    def close(self) -> None:
        """No new pass; a pass in flight is left to end on its own (daemon thread, never joined)."""
        self._closed = True
