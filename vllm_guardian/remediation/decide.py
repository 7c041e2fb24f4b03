"""May this incident's target be restarted now? A pure decision over a typed ``Situation``.

The ladder, in order (the first clause that holds decides): a sequence already running; a detector
in alert mode; a kind that is never a reason to restart; a sequence already finished for this
incident; no restart configured; a port not verified (a target matched by the port its argv
names, its sockets unreadable: a restart never rests on that word); vLLM's own fault-tolerance round
in progress for an engine of the target (never restarted mid-round); a restart method that
cannot run here; a start that would fail; a broken device under the target; a recurrence
(waiting for its diagnosis, or escalated); maintenance; a node-wide anomaly; a target never seen
ready; the budget; the backoff; dry run.
Everything else starts a sequence. A refusal that names a ``key`` is recorded on the incident once
(``Remediator``); one without is only shown in status. Either way ``why`` names it in a word
(``dry_run``, ``maintenance``, ``no_config``, ``budget``, ``anomaly``, ``mode``, ...): what the
guardian decided, as the decisions published on the gates' control channel say it.

A new reason to refuse is one field on ``Situation`` (filled in by ``Remediator.situation``) and one
clause here. ``decide_manual`` is the shorter ladder of ``guardian restart|drain``: a human decided,
so the detector's mode and the node-wide anomaly do not apply.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_guardian.config.schema import PolicyConfig, RestartConfig
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.detectors.kinds import NEVER_RESTART
from vllm_guardian.model import Kind
from vllm_guardian.remediation.policy import Verdict, node_anomaly
from vllm_guardian.remediation.sequence import FINISHED, Phase
from vllm_guardian.remediation.steps import stop_grace


@dataclass(frozen=True)
class Refusal:
    """Why not (``detail``); ``key`` set: recorded on the incident once, with ``status``."""

    detail: str
    key: str | None = None
    status: str = "skipped"  # skipped | escalated | deferred | dry_run
    name: str | None = None  # the word for a refusal without a key (in_progress, mode, ...)

    @property
    def why(self) -> str:
        """The refusal in a word: its key, else its name."""
        return self.key or self.name or "refused"


@dataclass(frozen=True)
class Decision:
    refusal: Refusal | None  # None: start a sequence
    budget_exhausted: bool | None = None  # the budget clause was reached: is it spent? (None: not reached)

    @property
    def start(self) -> bool:
        return self.refusal is None


@dataclass(frozen=True)
class Situation:
    """Everything ``decide`` looks at, read by the caller before it is asked."""

    kind: Kind
    incident_id: str
    mode: Mode  # the detector's mode for this incident
    active: bool  # a sequence is running for the target
    previous: tuple[str | None, Phase] | None  # (incident id, phase) of the target's last sequence
    restart: RestartConfig | None  # None: an autodiscovered target (never restarted)
    method_refusal: Refusal | None  # the restart method cannot run here (no Kubernetes API, no command)
    unstartable: str | None  # why a start would fail (checked before anything is stopped)
    device_fault: str | None  # why the target's devices make a restart pointless (a broken device)
    maintenance: bool
    policy: PolicyConfig
    tripped: int  # targets of the node with a critical incident open
    total: int  # targets of the node
    ever_ready: bool
    budget: Verdict  # the restart budget and backoff (``policy.may_restart``)
    pids: tuple[int, ...]  # the target's processes (for the dry-run message)
    # why its claim on its port is not verified (matched by its argv, its sockets unreadable); None: verified
    port_unverified: str | None = None
    # the same fault soon after a verified restart (policy.recurrence, docs/policy.md): escalate; None: not
    recurring: str | None = None
    # an engine of the target is in vLLM's own fault-tolerance round (never restarted mid-round); None: not
    vllm_round: str | None = None
    # a recurrence whose workaround may be applied, while its diagnosis is still being made: wait
    recurring_wait: str | None = None


def _refuse(detail: str, key: str | None = None, status: str = "skipped", exhausted: bool | None = None) -> Decision:
    return Decision(Refusal(detail, key, status), exhausted)


def _shown(detail: str, name: str) -> Decision:
    """A refusal only shown in status (not recorded on the incident), named ``name``."""
    return Decision(Refusal(detail, name=name))


def decide(s: Situation) -> Decision:
    if s.active:
        return _shown("in progress", "in_progress")
    if s.mode is not Mode.REMEDIATE:
        return _shown(f"mode {s.mode.value}: alert only", "mode")
    if s.kind in NEVER_RESTART:
        return _shown(
            "a blind spot, an exhausted budget, a pause on purpose or a device fault is never a reason "
            "to restart: alert only",
            "never_restart",
        )
    if s.previous is not None and s.previous[0] == s.incident_id and s.previous[1] in FINISHED:
        return _shown(f"already {s.previous[1].value} for this incident", "finished")
    if s.vllm_round:
        return _refuse(s.vllm_round, "vllm_round", "deferred")
    if s.restart is None:
        return _refuse("autodiscovered target: no restart configured (add it under targets: to remediate)", "no_config")
    if s.port_unverified:
        return _refuse(s.port_unverified, "port_unverified", "escalated")
    if s.method_refusal is not None:
        return Decision(s.method_refusal)
    if s.unstartable:
        return _refuse(s.unstartable, "unstartable", "escalated")
    if s.device_fault:
        return _refuse(s.device_fault, "device_fault", "escalated")
    if s.recurring_wait:
        return _shown(s.recurring_wait, "diagnosing")
    if s.recurring:
        return _refuse(s.recurring, "recurring", "escalated")
    if s.maintenance:
        return _refuse("maintenance mode is on: no remediation", "maintenance")
    anomaly = node_anomaly(s.policy, s.tripped, s.total)
    if anomaly:
        return _refuse(anomaly, "anomaly", "escalated")
    if not s.ever_ready:
        return _refuse("target never became ready: startup grace", "grace")
    if s.budget.exhausted:
        return _refuse(s.budget.reason + "; observe-only for this target", "budget", "escalated", exhausted=True)
    if not s.budget.allowed:
        return _refuse(s.budget.reason, "backoff", "deferred", exhausted=False)
    if s.policy.dry_run:
        return _refuse(
            f"would have drained, stopped {list(s.pids)} (SIGTERM, then SIGKILL after "
            f"{stop_grace(s.restart, s.kind.value):g}s) and restarted via {s.restart.mode}",
            "dry_run",
            "dry_run",
            exhausted=False,
        )
    return Decision(None, budget_exhausted=False)


@dataclass(frozen=True)
class ManualSituation:
    """What ``decide_manual`` looks at: ``guardian drain|restart <target>``."""

    target: str
    action: str  # drain | restart
    active_phase: str | None  # the running sequence's phase, None when none runs
    restart: RestartConfig | None
    unstartable: str | None
    device_fault: str | None
    budget: Verdict
    dry_run: bool  # asked for, or the policy's
    pids: tuple[int, ...]


def decide_manual(s: ManualSituation) -> str | None:
    """The answer to give instead of beginning (a refusal or the dry run); None: begin."""
    name = s.target
    if s.active_phase is not None:
        return f"{name}: a sequence is already in progress ({s.active_phase})"
    if s.action == "restart":
        if s.restart is None:
            return f"{name}: autodiscovered target has no restart config; refusing to restart it"
        if s.unstartable:
            return f"{name}: refused: {s.unstartable}"
        if s.device_fault:
            return f"{name}: {s.device_fault}"
        if not s.budget.allowed:
            return f"{name}: refused: {s.budget.reason}"
    if s.dry_run:
        return (
            f"{name}: dry run: would have {'drained' if s.action == 'drain' else 'drained, stopped'} "
            f"{list(s.pids)}"
            + ("" if s.action == "drain" or s.restart is None else f" and restarted via {s.restart.mode}")
        )
    return None
