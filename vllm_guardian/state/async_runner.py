"""Runs slow jobs (probes, evidence, remediation steps) off the loop thread, at most one per key.

The loop submits a job with what to do with its result (``on_done``) and collects finished
results on later ticks; it never waits. A job still running past its deadline is reported once as an overrun and
keeps its key busy until it ends (its own deadline ends it), so a hung
server can never pile up threads.

Each kind of job (the first item of a tuple key: ``http``, ``canary``, ``evidence``,
``remediation``, ``accel``) has its own bounded set of workers, so slow probes of
hostile or hung servers can never starve evidence capture or a remediation. Workers
are daemon threads: a wedged job never keeps the guardian from exiting on SIGTERM.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Hashable


@dataclass(frozen=True)
class Done:
    key: Hashable
    result: Any = None
    error: BaseException | None = None
    duration: float = 0.0  # seconds the job itself ran (not its wait for a worker)
    on_done: OnDone | None = None  # what the loop does with it (the submitter's fold)


OnDone = Callable[[Done, float], None]  # (the finished job, the collecting tick's time)


@dataclass
class _Job:
    future: Future
    deadline: float
    on_done: OnDone | None = None
    overrun_reported: bool = False


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, BaseException | None]:
    start = time.perf_counter()
    try:
        return fn(), time.perf_counter() - start, None
    except Exception as e:  # noqa: BLE001 - handed back to the loop as Done.error
        return None, time.perf_counter() - start, e


class _DaemonPool:
    """A bounded pool of daemon worker threads (started on demand) feeding Futures."""

    def __init__(self, max_workers: int, name: str) -> None:
        self._max = max(1, int(max_workers))
        self._name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("pool is shut down")
            self._queue.put((future, fn, args))
            if self._idle == 0 and len(self._workers) < self._max:
                t = threading.Thread(target=self._work, name=f"guardian-{self._name}-{len(self._workers)}", daemon=True)
                self._workers.append(t)
                t.start()
            else:
                self._idle -= 1 if self._idle else 0
        return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as e:  # noqa: BLE001 - handed back through the future
                    future.set_exception(e)
            with self._lock:
                self._idle += 1

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
        while True:  # queued jobs never run
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in self._workers:
            self._queue.put(None)


def _kind(key: Hashable) -> str:
    return str(key[0]) if isinstance(key, tuple) and key else "default"


class AsyncRunner:
    def __init__(self, max_workers: int = 8) -> None:
        self._max_workers = max_workers
        self._pools: dict[str, _DaemonPool] = {}
        self._closed = False
        self._jobs: dict[Hashable, _Job] = {}

    def busy(self, key: Hashable) -> bool:
        return key in self._jobs

    def submit(self, key: Hashable, fn: Callable[[], Any], deadline: float, on_done: OnDone | None = None) -> bool:
        """Start ``fn`` unless a job with ``key`` is still running. Returns True if started.
        ``on_done`` travels with the result: ``collect`` hands it back on the ``Done``."""
        if key in self._jobs:
            return False
        if self._closed:
            return False
        kind = _kind(key)
        pool = self._pools.get(kind)
        if pool is None:
            pool = self._pools[kind] = _DaemonPool(self._max_workers, kind)
        try:
            future = pool.submit(_timed, fn)
        except RuntimeError:  # the pool is shut down (the daemon is stopping): nothing runs
            return False
        self._jobs[key] = _Job(future, deadline, on_done)
        return True

    def collect(self) -> list[Done]:
        done = []
        for key, job in list(self._jobs.items()):
            if job.future.done():
                del self._jobs[key]
                err = job.future.exception()
                if err is not None:
                    done.append(Done(key, None, err, on_done=job.on_done))
                else:
                    outcome, seconds, raised = job.future.result()
                    done.append(Done(key, None if raised else outcome, raised, seconds, job.on_done))
        return done

    def overruns(self, now: float) -> list[Hashable]:
        """Keys whose job passed its deadline since the last call (each reported once)."""
        out = []
        for key, job in self._jobs.items():
            if not job.overrun_reported and now > job.deadline:
                job.overrun_reported = True
                out.append(key)
        return out

    def in_flight(self) -> list[Hashable]:
        return list(self._jobs)

    def wait_idle(self, timeout: float) -> None:
        """For one-shot CLI use: block until every job ended or ``timeout`` passed."""
        import concurrent.futures as cf

        futures = [j.future for j in self._jobs.values()]
        if futures:
            cf.wait(futures, timeout=timeout)

    def shutdown(self) -> None:
        """Queued jobs are cancelled; running ones are abandoned (daemon threads end with the process)."""
        self._closed = True
        for pool in self._pools.values():
            pool.shutdown()
