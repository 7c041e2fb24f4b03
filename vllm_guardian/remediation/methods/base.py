"""The one protocol every restart method follows, the results it hands back, and what the machine
lends it (``MethodContext``).

A method decides only what differs between ways of restarting: whether it can run here at all, how
the first stop is sent, whether the target's owner may bring it back itself, and how the start is
issued. The phases, timers, SIGKILL escalation, records and persistence stay in the machine.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Generic, Protocol, TypeVar

from vllm_guardian.config.schema import RestartConfig
from vllm_guardian.host.process_control import ProcessControl
from vllm_guardian.host.runner import CommandRunner
from vllm_guardian.remediation.decide import Refusal
from vllm_guardian.remediation.sequence import RestartSequence
from vllm_guardian.remediation.settings import RemediationSettings

if TYPE_CHECKING:
    from vllm_guardian.host.kube import KubeClient
    from vllm_guardian.host.procfs import ProcFS

T = TypeVar("T")


@dataclass(frozen=True)
class JobResult(Generic[T]):
    """What an off-loop job of a sequence ended with: its value, or the error it raised."""

    value: T | None
    error: BaseException | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


@dataclass(frozen=True)
class StopSent:
    """The first stop of a tree: recorded as the ``stop`` action with ``status`` and ``detail``."""

    status: str  # ok | skipped
    detail: str
    found_gone: bool = False  # the API server was already gone (someone else stopped it)


@dataclass(frozen=True)
class StartStep:
    """What a start attempt came to: ``wait`` (ask again next tick), ``verify`` (the start is issued
    or left to someone else: watch for a new server), or ``fail`` (a human must start it)."""

    outcome: str  # wait | verify | fail
    detail: str = ""


WAIT = StartStep("wait")


@dataclass(frozen=True)
class StopNews:
    """What an off-loop stop (a pod's eviction) answered since the last tick."""

    record: tuple[str, str] | None = None  # (status, detail) of a ``stop`` action to record
    fail: str | None = None  # the sequence fails with this, nothing more is stopped
    hold_kill: bool = False  # the stop has not answered yet: no SIGKILL meanwhile


NO_NEWS = StopNews()


class MethodContext(Protocol):
    """What the machine lends a method while it steps a sequence."""

    control: ProcessControl
    cmd_runner: CommandRunner
    kube: KubeClient | None
    procfs: ProcFS | None
    log: logging.Logger

    def job(
        self, seq: RestartSequence, name: str, fn: Callable[[], T], now: float, retry_every: float | None = None
    ) -> JobResult[T] | None:
        """Run ``fn`` off the loop once per phase (or every ``retry_every`` s); None until it ends."""
        ...

    def submit(self, seq: RestartSequence, name: str, fn: Callable[[], object], now: float, deadline: float) -> None:
        """Run ``fn`` off the loop; its result is picked up with ``take``."""
        ...

    def take(self, seq: RestartSequence, name: str) -> JobResult[object] | None:
        """The result of a job ``submit``-ted for the sequence, once."""
        ...

    def record(self, seq: RestartSequence, name: str, status: str, detail: str) -> None: ...

    @property
    def settings(self) -> RemediationSettings: ...

    def save(self, seq: RestartSequence) -> bool: ...


class RestartMethod(Protocol):
    """One way of restarting a target (``restart.mode``)."""

    name: str

    def refusal(self, rc: RestartConfig, ctx: MethodContext) -> Refusal | None:
        """Why this method cannot restart the target here at all (None: it can)."""
        ...

    def start_problem(self, rc: RestartConfig, ctx: MethodContext) -> str | None:
        """Why the start would fail, checked before anything is stopped (None: it would not)."""
        ...

    def begin(self, seq: RestartSequence, ctx: MethodContext) -> None:
        """A sequence began: note what must be read while the old server still runs."""
        ...

    def stop(self, seq: RestartSequence, rc: RestartConfig, grace: float, now: float, ctx: MethodContext) -> StopSent:
        """Send the first stop (SIGTERM, or the pod's deletion with ``grace``)."""
        ...

    def stop_news(self, seq: RestartSequence, ctx: MethodContext) -> StopNews:
        """What an off-loop stop answered (the machine goes on to SIGKILL after the grace)."""
        ...

    def owner_may_restart(self, seq: RestartSequence) -> bool:
        """Should the machine give the target's owner ``owner_grace`` to bring it back first?"""
        ...

    def owner_restarting(self, seq: RestartSequence, rc: RestartConfig, now: float, ctx: MethodContext) -> str | None:
        """What this method's owner says about bringing it back (systemd: the unit activating)."""
        ...

    def start(self, seq: RestartSequence, rc: RestartConfig, now: float, ctx: MethodContext) -> StartStep:
        """Issue the start (never twice: ``seq.progress.start_issued``) or hand it to someone else."""
        ...


class SignalStop:
    """The shared default: SIGTERM to the API server (identity-checked), nothing started, no owner."""

    def refusal(self, rc: RestartConfig, ctx: MethodContext) -> Refusal | None:
        return None

    def start_problem(self, rc: RestartConfig, ctx: MethodContext) -> str | None:
        return None

    def begin(self, seq: RestartSequence, ctx: MethodContext) -> None:
        return None

    def stop(self, seq: RestartSequence, rc: RestartConfig, grace: float, now: float, ctx: MethodContext) -> StopSent:
        api = seq.api_key
        if ctx.control.signal(api, signal.SIGTERM):
            return StopSent("ok", f"SIGTERM to API server {api}")
        return StopSent("skipped", f"API server {api} already gone", found_gone=True)

    def stop_news(self, seq: RestartSequence, ctx: MethodContext) -> StopNews:
        return NO_NEWS

    def owner_may_restart(self, seq: RestartSequence) -> bool:
        return False

    def owner_restarting(self, seq: RestartSequence, rc: RestartConfig, now: float, ctx: MethodContext) -> str | None:
        return None
