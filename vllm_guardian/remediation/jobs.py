"""The off-loop jobs of restart sequences (lease, systemctl, the Kubernetes API) and their typed
results, picked up on a later tick. A job is keyed ``<target>:<name>``; at most one of a key runs."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar, cast

from vllm_guardian.remediation.methods.base import JobResult
from vllm_guardian.remediation.sequence import RestartSequence
from vllm_guardian.state.async_runner import Done, OnDone

T = TypeVar("T")


class Submitter(Protocol):
    """The part of ``AsyncRunner`` remediation uses."""

    def submit(self, key: Hashable, fn: Callable[[], Any], deadline: float, on_done: OnDone | None = None) -> bool: ...


class SequenceJobs:
    def __init__(self, runner: Submitter) -> None:
        self.runner = runner
        self._results: dict[str, JobResult[object]] = {}

    def job(
        self, seq: RestartSequence, name: str, fn: Callable[[], T], now: float, retry_every: float | None = None
    ) -> JobResult[T] | None:
        """Run ``fn`` off the loop once per phase (or every ``retry_every`` s); None until it ends."""
        key = f"{seq.target}:{name}"
        if key in self._results:
            res = self._results.pop(key)
            seq.pending_job = None
            seq.progress.job_at = now
            return cast("JobResult[T]", res)
        last = seq.progress.job_at
        due = last is None or (retry_every is not None and now - last >= retry_every)
        if seq.pending_job != key and due and self._submit(key, fn, now + 90):
            seq.pending_job = key
        return None

    def submit(self, seq: RestartSequence, name: str, fn: Callable[[], object], deadline: float) -> None:
        self._submit(f"{seq.target}:{name}", fn, deadline)

    def take(self, seq: RestartSequence, name: str) -> JobResult[object] | None:
        return self._results.pop(f"{seq.target}:{name}", None)

    def _submit(self, key: str, fn: Callable[[], Any], deadline: float) -> bool:
        return self.runner.submit(("remediation", key), fn, deadline=deadline, on_done=self._done)

    def _done(self, done: Done, now: float) -> None:
        key = str(cast("tuple[str, str]", done.key)[1])
        self._results[key] = JobResult(None, done.error) if done.error is not None else JobResult(done.result)
