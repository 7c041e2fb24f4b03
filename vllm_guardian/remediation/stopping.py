"""The stopping and releasing phases of a restart sequence: count the restart in the ledger, stop the
tree the restart method's way, escalate to SIGKILL after the grace, then wait for the accelerator
memory to be released before anything is started.

Reads the process tree's liveness through ``ProcessControl`` and the accelerator through the parts'
``device_check``/``release_check``; decides when a sequence moves on to releasing/starting or fails.
The machine (``remediation/machine.py``) calls these once per tick while a sequence is in the phase.
"""

from __future__ import annotations

import signal
from typing import Protocol

from vllm_guardian.clock import Clock
from vllm_guardian.config.schema import RestartConfig
from vllm_guardian.remediation.methods.base import MethodContext, RestartMethod
from vllm_guardian.remediation.parts import RemediationParts
from vllm_guardian.remediation.sequence import Outcome, Phase, RestartSequence
from vllm_guardian.remediation.settings import control_message
from vllm_guardian.remediation.steps import stop_grace

KILL_GRACE = 10.0  # after SIGKILL, how long processes get to disappear
RELEASE_TIMEOUT = 60.0


class Machine(MethodContext, Protocol):
    """What these phases need of the machine (``remediation/machine.py``'s ``Machine`` is one)."""

    clock: Clock
    parts: RemediationParts

    def method(self, seq: RestartSequence) -> RestartMethod: ...

    def rc(self, seq: RestartSequence) -> RestartConfig: ...

    def enter(self, seq: RestartSequence, phase: Phase, now: float, detail: str) -> None: ...

    def finish(self, seq: RestartSequence, now: float, outcome: Outcome, detail: str) -> None: ...


def step_stopping(m: Machine, seq: RestartSequence, now: float) -> None:
    """Stop the tree the method's way; SIGKILL what outlives the grace; fail what outlives SIGKILL."""
    rc, method = m.rc(seq), m.method(seq)
    grace = stop_grace(rc, seq.reason)
    if not seq.progress.begun:
        try:  # the budget counts the disruptive act: recorded (and persisted) before the first signal
            m.parts.ledger.record(seq.target, m.clock.wall())
        except OSError as e:  # fail closed: an uncounted restart could loop past the budget
            why = f"restart ledger could not be written ({e}); nothing was stopped (fail closed)"
            m.finish(seq, now, Outcome.ABORTED, why)
            m.parts.publish_control(control_message("undrain", seq.target, m.settings.node))
            return
        seq.progress.begun = True
        sent = method.stop(seq, rc, grace, now, m)
        seq.found_gone = sent.found_gone
        m.record(seq, "stop", sent.status, sent.detail)
    news = method.stop_news(seq, m)
    if news.fail is not None:
        m.finish(seq, now, Outcome.FAILED, news.fail)
        return
    if news.record is not None:
        m.record(seq, "stop", *news.record)
    if news.hold_kill:
        grace = max(grace, now - seq.phase_since + 1)  # the eviction may wait on a budget: no SIGKILL meanwhile
    alive = [k for k in seq.tree if m.control.alive(k)]
    if alive and not seq.sigkill_sent and now - seq.phase_since >= grace:
        seq.sigkill_sent = True
        killed = [k.pid for k in alive if m.control.signal(k, signal.SIGKILL)]
        m.record(seq, "kill", "ok", f"SIGKILL after {grace:g}s to {killed}")
        seq.progress.kill_at = now
        alive = [k for k in seq.tree if m.control.alive(k)]
    if not alive:
        m.enter(seq, Phase.RELEASING, now, f"tree stopped in {now - seq.phase_since:.1f}s")
        return
    kill_at = seq.progress.kill_at
    if seq.sigkill_sent and now - (now if kill_at is None else kill_at) >= KILL_GRACE:
        pids = [k.pid for k in alive]
        why = f"processes survived SIGKILL: {pids} (uninterruptible in the kernel?); a human must look"
        m.finish(seq, now, Outcome.FAILED, why)


def step_releasing(m: Machine, seq: RestartSequence, now: float) -> None:
    """Wait (at most ``RELEASE_TIMEOUT``) for the accelerator memory to be freed; never start onto a faulted device."""
    broken = m.parts.device_check(seq.target)
    if broken:  # a device fault seen while the tree was stopped: never start onto it
        m.finish(seq, now, Outcome.FAILED, f"stopped, not started again: {broken}; a human must look")
        return
    held = m.parts.release_check({k.pid for k in seq.tree})
    if held is None or held is False:
        took = now - seq.phase_since
        why = "no accelerator backend" if held is None else f"accelerator memory released in {took:.1f}s"
        m.enter(seq, Phase.STARTING, now, why)
    elif now - seq.phase_since >= RELEASE_TIMEOUT:
        why = f"accelerator memory still held after {RELEASE_TIMEOUT:g}s; starting anyway"
        m.enter(seq, Phase.STARTING, now, why)
