"""The face of remediation to the loop: may an incident's target be restarted (``consider``), a
human's ``guardian drain|restart|undrain`` (``manual`` / ``undrain``), and what status shows.

It reads the facts (``situation``), asks the pure ``decide``, records each refusal on the incident
once, and begins a sequence (persisted first) that the ``Machine`` then steps each tick. One
sequence per target at most. Readiness (``serving``) is False from draining until a verified
restart; after a failure, until the target serves again (``recovered``) or ``guardian undrain``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from vllm_guardian.config.schema import PolicyConfig
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.discovery.argv import not_verified
from vllm_guardian.model import Action, Incident, ProcKey
from vllm_guardian.remediation.decide import ManualSituation, Refusal, Situation, decide, decide_manual
from vllm_guardian.diagnosis.workaround import Workaround
from vllm_guardian.policy.workaround import Applied, WorkaroundState
from vllm_guardian.remediation.recurring import Recurrence, recurring, signature_of
from vllm_guardian.policy.breaker import PercentBreaker
from vllm_guardian.remediation.machine import BREAKER_TTL, Machine
from vllm_guardian.remediation.parts import ActionCounts, RemediationParts, Tally
from vllm_guardian.remediation.policy import Maintenance, RestartLedger, may_restart
from vllm_guardian.remediation.sequence import PHASE_NAMES, TAKING_DOWN, Outcome, Phase, RestartSequence
from vllm_guardian.remediation.methods import build_methods
from vllm_guardian.remediation.settings import RemediationSettings, control_message, log_fields
from vllm_guardian.remediation.store import SequenceStore
from vllm_guardian.remediation.target_policy import TargetPolicy, target_group, target_policy

if TYPE_CHECKING:
    from vllm_guardian.series import SeriesStore
    from vllm_guardian.state.tracker import TrackedTarget, Tracker


REGISTER_EVERY = 10.0  # seconds between registrations of this node's targets with the breaker


@dataclass(frozen=True)
class SequenceStatus:
    """One target's sequence, as status shows it."""

    phase: str
    reason: str
    incident: str | None
    mode: str
    since: float
    detail: str
    outcome: str | None
    drain_only: bool


@dataclass(frozen=True)
class Considered:
    """What ``consider`` decided for one open incident."""

    text: str  # for status (the target's ``decision``)
    hold: Refusal | None  # why the guardian does not act on it now; None: a sequence runs for this incident


class Remediator:
    def __init__(self, parts: RemediationParts) -> None:
        self.parts = parts
        self.settings = parts.settings
        self.policy: PolicyConfig = parts.settings.policy
        self.ledger: RestartLedger = parts.ledger
        self.clock = parts.clock
        self.log = parts.log
        self.maintenance = Maintenance(parts.settings.state_dir)
        self.store = SequenceStore(parts.settings.state_dir, parts.log)
        self.workaround_state = WorkaroundState(parts.settings.state_dir)
        self.tally = Tally()
        self.machine = Machine(parts, self.store, self.tally)
        self.profiles: dict[str, TargetPolicy] = {}  # target -> the policy it is remediated under (its profile)
        self.machine.policy_of = self.target_policy
        self._registered_at: float | None = None  # monotonic time the breaker's targets were last registered
        self.sequences: dict[str, RestartSequence] = self.machine.sequences
        self.exhausted: set[str] = set()  # targets whose budget is spent: observe-only
        self._noted: set[tuple[str, str]] = set()  # (incident id, refusal key) already recorded
        self.machine.resume(self.store.load_all())

    def reconfigure(self, settings: RemediationSettings) -> None:
        """A reloaded config: new targets' restart specs, policy and pod removal; running sequences go on."""
        self.parts = replace(
            self.parts, settings=settings, methods=build_methods(settings.units(), self.parts.method_table)
        )
        self.settings, self.policy = settings, settings.policy
        self.profiles = {}
        self.machine.reconfigure(self.parts)

    # ------------------------------------------------------------------ queries
    def target_policy(self, name: str, tracked: TrackedTarget | None = None) -> TargetPolicy:
        """The policy ``name`` is remediated under: its profile over the global policy. With
        ``tracked``, its facts are read again (the served model can change)."""
        if tracked is not None or name not in self.profiles:
            model = (tracked.model if tracked is not None else None) or self.settings.model_for(name)
            group = target_group(tracked.target) if tracked is not None else None
            facts = self.settings.facts(name, model, self.parts.device_kind(name), group)
            self.profiles[name] = target_policy(self.policy, facts)
        return self.profiles[name]

    def mode_for(self, incident: Incident, tracked: TrackedTarget, detector_mode: Mode) -> Mode:
        """The mode an incident is handled in: the target's profile's for its kind, else the detector's."""
        return self.target_policy(incident.target.name, tracked).mode_for(incident.kind.value, detector_mode)

    def active(self, name: str) -> bool:
        s = self.sequences.get(name)
        return s is not None and s.phase.active

    def serving(self, name: str) -> bool:
        """Readiness: False from drain start until a verified restart; False after a failed
        restart; False after a manual drain until ``undrain``."""
        s = self.sequences.get(name)
        if s is None:
            return True
        if s.drain_only:
            return not (s.phase.active or s.phase is Phase.DONE)
        return not (s.phase.active or s.phase is Phase.FAILED)

    def phase(self, name: str) -> str:
        s = self.sequences.get(name)
        if s is not None and s.drain_only and s.phase is Phase.DONE:
            return "drained"  # out of rotation until `guardian undrain`: what serving() says
        if s is None or s.phase in (Phase.DONE, Phase.UNDRAINED, Phase.RECOVERED, Phase.ABORTED):
            return "serving"
        return PHASE_NAMES.get(s.phase) or s.phase.value

    def operator_drained(self, name: str) -> bool:
        """Out of rotation by ``guardian drain`` (draining or drained) until ``guardian undrain``:
        on purpose, as a pause is (the hang detectors stand down)."""
        s = self.sequences.get(name)
        return s is not None and s.drain_only and (s.phase.active or s.phase is Phase.DONE)

    def suppress_detection(self, name: str) -> bool:
        """While the guardian itself takes a target down, its death is not news."""
        s = self.sequences.get(name)
        return s is not None and s.phase in TAKING_DOWN

    def status_section(self, name: str) -> SequenceStatus | None:
        """The target's ``remediation`` status section (None: no sequence)."""
        s = self.sequences.get(name)
        if s is None:
            return None
        outcome = None if s.outcome is None else s.outcome.value
        return SequenceStatus(
            s.phase.value, s.reason, s.incident_id, s.mode, s.phase_since_wall, s.detail, outcome, s.drain_only
        )

    def actions_section(self) -> ActionCounts:
        """The node's ``actions`` status section."""
        return self.tally.section()

    # ------------------------------------------------------------------ the loop
    def tick(self, now: float, tracker: Tracker, series: SeriesStore, holding: Collection[str] = ()) -> None:
        for name, tr in tracker.targets.items():
            if self.settings.configured(name):
                self.target_policy(name, tr)
        self._register(now)
        self.machine.tick(now, tracker, series, holding)

    def _register(self, now: float) -> None:
        """Every ``REGISTER_EVERY`` s, this node's configured targets counted by a breaker are
        registered in the fleet store under their scope (the breaker's whole is the live fleet)."""
        if self._registered_at is not None and now - self._registered_at < REGISTER_EVERY:
            return
        scopes: dict[str, list[str]] = {}
        for name, tp in self.profiles.items():
            if tp.breaker_on and self.settings.configured(name):
                scopes.setdefault(tp.scope, []).append(name)
        if not scopes or self.parts.fleet_client is None:
            return
        self._registered_at = now
        breaker = PercentBreaker(
            self.parts.fleet_client,
            node=self.settings.node or "",
            max_fraction=1.0,
            window=1.0,
            when_redis_down=self.policy.fleet.when_redis_down,
            target_ttl=BREAKER_TTL,
        )
        wall = self.clock.wall()

        def register() -> None:
            for scope, names in scopes.items():
                breaker.register(scope, sorted(names), wall)

        self.parts.async_runner.submit(("remediation", "breaker:register"), register, deadline=now + 30)

    def take_finished(self) -> list[tuple[RestartSequence, Outcome]]:
        return self.machine.take_finished()

    def take_escalated(self) -> list[str]:
        """Incidents a waiting sequence escalated since the last call (the breaker's one page)."""
        return self.machine.take_escalated()

    def begin(
        self,
        name: str,
        reason: str,
        incident_id: str | None,
        api_key: ProcKey,
        tree: list[ProcKey],
        now: float,
        *,
        drain_only: bool = False,
    ) -> RestartSequence | None:
        """A new sequence, persisted first: one whose state cannot be written (a full disk) could
        not be resumed after a crash, so it is not begun (None)."""
        mode = self.settings.restart_config_for(name).mode if self.settings.configured(name) else "signal"
        seq = RestartSequence(
            name, reason, incident_id, mode, api_key, list(tree), drain_only=drain_only, started_wall=self.clock.wall()
        )
        self.sequences[name] = seq
        if not self.store.save(seq):
            del self.sequences[name]
            return None
        self.parts.method(mode).begin(seq, self.machine)
        what = "drain" if drain_only else "restart"
        pids = [k.pid for k in seq.tree]
        self.machine.enter(seq, Phase.LEASE, now, f"{what} of {name} ({reason}), mode {mode}, tree {pids}")
        return seq

    # ------------------------------------------------------------------ decisions
    def situation(
        self,
        incident: Incident,
        tracked: TrackedTarget,
        *,
        mode: Mode,
        tripped: int,
        total: int,
        recurrence: Recurrence | None = None,
    ) -> Situation:
        """The facts ``decide`` looks at, read now (``recurrence``: ``self.recurrence``'s answer)."""
        name = incident.target.name
        prev = self.sequences.get(name)
        tp = self.target_policy(name, tracked)
        rc = self.settings.restart_config_for(name) if self.settings.configured(name) else None
        method = self.parts.method(rc.mode) if rc is not None else None
        wall = self.clock.wall()
        return Situation(
            kind=incident.kind,
            incident_id=incident.id,
            mode=mode,
            active=self.active(name),
            previous=None if prev is None else (prev.incident_id, prev.phase),
            restart=rc,
            method_refusal=None if method is None or rc is None else method.refusal(rc, self.machine),
            unstartable=None if method is None or rc is None else method.start_problem(rc, self.machine),
            device_fault=self.parts.device_check(name) if rc is not None else None,
            maintenance=self.maintenance.active(wall),
            policy=tp.policy,
            tripped=tripped,
            total=total,
            ever_ready=tracked.ever_ready,
            budget=may_restart(tp.policy, self.ledger, name, wall),
            pids=tuple(p.pid for p in tracked.target.processes),
            port_unverified=None if tracked.target.port_verified else not_verified(tracked.target.socket),
            recurring=recurrence.reason if recurrence is not None and recurrence.action == "escalate" else None,
            recurring_wait=recurrence.reason if recurrence is not None and recurrence.action == "wait" else None,
            vllm_round=self._vllm_round(tracked),
        )

    def recurrence(self, incident: Incident, tracked: TrackedTarget, diagnosing: bool) -> Recurrence | None:
        """Is the incident a recurrence after a verified restart, and what then (``remediation/recurring.py``)."""
        name = incident.target.name
        rc = self.settings.restart_config_for(name) if self.settings.configured(name) else None
        prev = self.sequences.get(name)
        before = self.parts.incidents.get(prev.incident_id) if prev is not None and prev.incident_id else None
        return recurring(
            self.target_policy(name, tracked).profile.recurrence,
            prev,
            incident,
            rc,
            self.clock.wall(),
            workarounds=self.parts.workarounds,
            running_with=self.workaround_state.load().get(name),
            diagnosing=diagnosing,
            previous_signature=signature_of(before, self.parts.workarounds) if before is not None else None,
        )

    def _vllm_round(self, tracked: TrackedTarget) -> str | None:
        """Why not now: an engine of the target is in vLLM's own fault-tolerance round (None: none is)."""
        if tracked.vllm is None:
            return None
        within = tracked.vllm.rounds(self.clock.monotonic(), self.settings.recovery_grace)[0]
        if not within:
            return None
        engines = ", ".join(f"{e} ({s:.0f}s)" for e, s in sorted(within.items()))
        return f"vLLM's own fault-tolerance round in progress for engine {engines}: never restarted mid-round"

    def consider(
        self,
        incident: Incident,
        tracked: TrackedTarget,
        now: float,
        *,
        mode: Mode,
        tripped: int,
        total: int,
        diagnosing: bool = False,
    ) -> Considered:
        """Decide whether an open incident gets a restart now: the decision in words (status) and
        why the guardian does not act on it, if it does not; each refusal with a key is recorded on
        the incident once. ``diagnosing``: its evidence and diagnosis are still being made."""
        name = incident.target.name
        rec = self.recurrence(incident, tracked, diagnosing) if mode is Mode.REMEDIATE else None
        decision = decide(self.situation(incident, tracked, mode=mode, tripped=tripped, total=total, recurrence=rec))
        if decision.budget_exhausted is True:
            self.exhausted.add(name)
        elif decision.budget_exhausted is False:
            self.exhausted.discard(name)
        refusal = decision.refusal
        if refusal is not None:
            seq = self.sequences.get(name)
            if refusal.name == "in_progress" and seq is not None and seq.incident_id == incident.id:
                return Considered(refusal.detail, None)  # its own sequence runs
            if refusal.key is None:
                return Considered(refusal.detail, refusal)
            return Considered(self._once(incident, refusal.key, refusal.status, refusal.detail), refusal)
        tree = [p.key for p in tracked.target.processes]
        if self.begin(name, incident.kind.value, incident.id, tracked.target.key, tree, now) is None:
            unsaved = Refusal(
                f"remediation state could not be written under {self.store.dir} (full disk?); "
                "not starting a sequence that could not be resumed after a crash",
                "unsaved",
                "escalated",
            )
            return Considered(self._once(incident, "unsaved", "escalated", unsaved.detail), unsaved)
        if rec is not None and rec.action == "workaround" and rec.workaround is not None and rec.signature:
            self._apply_workaround(incident, rec.signature, rec.workaround, rec.reason)
            return Considered("started with the workaround", None)
        return Considered("started", None)

    def _apply_workaround(self, incident: Incident, signature: str, wa: Workaround, why: str) -> None:
        """Record that the target runs with ``wa`` from now on (its start reads the record) and say so
        on the incident."""
        name = incident.target.name
        self.workaround_state.record(Applied(name, signature, wa, incident.id, self.clock.wall()))
        words = " ".join([*wa.args, *(f"{k}={v}" for k, v in wa.env)])
        how = "drop-in for its unit" if self.settings.restart_config_for(name).mode == "systemd" else "command line"
        detail = (
            f"{why}; restarting with {words} (catalog {signature}, {how}); `guardian workaround clear {name}` undoes it"
        )
        try:
            self.parts.incidents.add_action(incident.id, Action("workaround", "applied", self.clock.wall(), detail))
        except KeyError:
            pass
        self.log.warning("remediation %s: %s", name, detail, extra=log_fields(name, incident.kind.value, incident.id))

    def manual(self, name: str, tracked: TrackedTarget | None, now: float, action: str, dry_run: bool) -> str:
        """``guardian drain|restart <target>``: the same machine and the same safety checks,
        minus the detector mode and the node-wide anomaly (a human decided)."""
        if tracked is None:
            raise KeyError(f"unknown target {name!r}")
        configured = self.settings.configured(name)
        policy = self.target_policy(name, tracked).policy
        rc = self.settings.restart_config_for(name) if configured else None
        restarting = action == "restart" and rc is not None
        answer = decide_manual(
            ManualSituation(
                target=name,
                action=action,
                active_phase=self.phase(name) if self.active(name) else None,
                restart=rc,
                unstartable=self.parts.method(rc.mode).start_problem(rc, self.machine) if restarting and rc else None,
                device_fault=self.parts.device_check(name) if restarting else None,
                budget=may_restart(policy, self.ledger, name, self.clock.wall()),
                dry_run=dry_run or policy.dry_run,
                pids=tuple(p.pid for p in tracked.target.processes),
            )
        )
        if answer is not None:
            return answer
        tree = [p.key for p in tracked.target.processes]
        if self.begin(name, "manual", None, tracked.target.key, tree, now, drain_only=(action == "drain")) is None:
            return f"{name}: refused: remediation state could not be written under {self.store.dir}"
        return f"{name}: {action} started"

    def undrain(self, name: str) -> str:
        seq = self.sequences.get(name)
        if seq is None or not (seq.drain_only or seq.phase is Phase.FAILED):
            return f"{name}: not drained by the guardian"
        if seq.phase.active or seq.phase in (Phase.DONE, Phase.FAILED):
            seq.end(Outcome.UNDRAINED, "undrained by request")
            self.parts.publish_control(control_message("undrain", name, self.settings.node))
            self.store.save(seq)
        return f"{name}: back in rotation"

    def refresh_budgets(self) -> None:
        """A target whose budget frees up leaves observe-only."""
        wall = self.clock.wall()
        for name in list(self.exhausted):
            if not may_restart(self.target_policy(name).policy, self.ledger, name, wall).exhausted:
                self.exhausted.discard(name)

    def _once(self, incident: Incident, key: str, status: str, detail: str) -> str:
        mark = (incident.id, key)
        if mark not in self._noted:
            self._noted.add(mark)
            self.tally.count(status)
            if status == "dry_run":
                self.tally.restart(incident.target.name, "dry_run")
            try:
                self.parts.incidents.add_action(incident.id, Action("restart", status, self.clock.wall(), detail))
            except KeyError:
                pass
            fields = log_fields(incident.target.name, incident.kind.value, incident.id)
            self.log.warning("remediation %s: %s: %s", incident.target.name, status, detail, extra=fields)
        return f"{status}: {detail}"
