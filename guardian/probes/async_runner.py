"""Runs slow jobs (probes, evidence, remediation steps) off the loop thread, at most one per key.

The loop submits a job with what to do with its result (``on_done``) and collects finished
results on later ticks; it never waits. A job still running past its deadline is reported once as an overrun and
keeps its key busy until it ends (its own socket timeout ends it), so a hung
server can never pile up threads.
"""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
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


class AsyncRunner:
    def __init__(self, max_workers: int = 8) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="guardian-probe")
        self._jobs: dict[Hashable, _Job] = {}

    def busy(self, key: Hashable) -> bool:
        return key in self._jobs

    def submit(self, key: Hashable, fn: Callable[[], Any], deadline: float,
               on_done: OnDone | None = None) -> bool:
        """Start ``fn`` unless a job with ``key`` is still running. Returns True if started.
        ``on_done`` travels with the result: ``collect`` hands it back on the ``Done``."""
        if key in self._jobs:
            return False
        try:
            future = self._pool.submit(_timed, fn)
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
        self._pool.shutdown(wait=False, cancel_futures=True)
