"""The acting half of the loop: what the guardian does about what it saw.

- Evidence before action: when an incident opens, its bundle is captured off the loop
  (``incident_opened``); remediation may start draining meanwhile, but stops nothing until the
  capture no longer needs the processes: /proc read and stacks dumped (the ``holding`` of ``Remediator.tick``;
  a flame record still sampling ends with the tree, the rest of the bundle is written after).
- Each tick (``act``): for every open incident, a decision (the detector's ``mode``, external
  evidence held to alert-only until confirmed (``remediation.external``), the policy
  gates of ``Remediator.consider``), handed to the ``on_decision`` hooks (the decisions the gates
  publish say what was decided: acting, or held and why), then the remediation state machine
  advances, and a target whose restart budget is spent gets a ``restart_budget_exhausted`` incident.
- Control-socket requests (``control``): drain, restart, undrain through the same machine.
- Diagnosis: with a ``Diagnoser``, the evidence job goes on to diagnose its bundle (known-bug
  catalog; crash forensics for engine_dead) and the incident gets ``diagnosis`` / ``crash``
  before its ``updated`` alert.
- Device faults: an engine incident (busy_loop, engine_stall, engine_dead) of a server whose
  devices reported a fault in the window names the fault first, the moment it opens and again
  after the catalog diagnosis (``diagnosis/device_story.py``); its evidence holds the devices'
  fault records.

Everything it touches is handed in, built: the tracker, series and readings it reads, the
incident manager it writes, the remediator, the evidence collector (None: no evidence), the
runner jobs go to, and ``emit`` for the transitions it causes (a verified restart resolves the
target's incidents). ``on_update`` hooks hear of an incident that changed without a transition
(evidence attached, a failed restart recorded), so alerts can be re-sent with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_guardian.clock import Clock
from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.errors import UnknownTarget
from vllm_guardian.state.episodes import EpisodeLog
from vllm_guardian.incidents import IncidentManager
from vllm_guardian.detectors.kinds import KINDS, KindSpec
from vllm_guardian.model import Action, Finding, Incident, Kind, Severity, Transition
from vllm_guardian.state.async_runner import AsyncRunner, Done
from vllm_guardian.probes.base import Readings
from vllm_guardian.series import SeriesStore
from vllm_guardian.state.tracker import Tracker
from vllm_guardian.diagnosis.device_story import device_story
from vllm_guardian.diagnosis.node_view import with_faults
from vllm_guardian.diagnosis.service import Diagnoser, capture_then_diagnose
from vllm_guardian.bundle.evidence import EvidenceCollector, EvidenceContext, EvidenceResult, series_windows
from vllm_guardian.remediation.decide import Refusal
from vllm_guardian.remediation.external import external_hold
from vllm_guardian.remediation.policy import budget_left
from vllm_guardian.remediation.remediator import Remediator
from vllm_guardian.remediation.sequence import Outcome, RestartSequence

#: Told each tick what was decided for an open incident: None, a sequence runs for it; else why not.
Decided = Callable[[Incident, Refusal | None], None]
AMBIGUOUS = Refusal("the finding is alert only (two instances split, neither has a baseline)", name="alert_only")


@dataclass(frozen=True)
class ResponderSettings:
    """What the responder decides by; ``reconfigure`` replaces the first two on a config reload."""

    detectors: DetectorsConfig  # each kind's mode
    target_configs: Mapping[str, Any] = field(default_factory=dict)  # name -> TargetConfig (log sources)
    kinds: Mapping[Kind, KindSpec] = field(default_factory=lambda: KINDS)  # the kind table


@dataclass(frozen=True)
class ResponderPorts:
    """The built parts the responder reads, writes and hands work to (module docstring)."""

    clock: Clock
    runner: AsyncRunner
    tracker: Tracker
    series: SeriesStore
    readings: Readings
    incidents: IncidentManager
    remediator: Remediator
    evidence: EvidenceCollector | None  # None: no evidence
    episodes: EpisodeLog
    emit: Callable[[Transition], None]
    log: logging.Logger
    diagnoser: Diagnoser | None = None
    on_update: Iterable[Callable[[Incident], None]] = ()
    on_decision: Iterable[Decided] = ()


class Responder:
    def __init__(self, *, settings: ResponderSettings, ports: ResponderPorts) -> None:
        self.detectors = settings.detectors
        self.kinds = settings.kinds  # the kind table: each kind's mode
        self.target_configs = dict(settings.target_configs)  # name -> TargetConfig (log sources)
        self.clock = ports.clock
        self.runner = ports.runner
        self.tracker = ports.tracker
        self.series = ports.series
        self.readings = ports.readings
        self.incidents = ports.incidents
        self.remediator = ports.remediator
        self.evidence = ports.evidence
        self.episodes = ports.episodes
        self.emit = ports.emit
        self.log = ports.log
        self.diagnoser = ports.diagnoser
        self.decisions: dict[str, str] = {}  # target -> what was decided this tick (status)
        # target -> (kind, incident id) of an open incident it will be remediated for: out of
        # rotation from the moment it opens (remediate mode only; surface/readiness.py)
        self.out_of_service: dict[str, tuple[str, str]] = {}
        self.evidence_pending: set[str] = set()  # incident ids whose bundle is being captured
        self.on_update: tuple[Callable[[Incident], None], ...] = tuple(ports.on_update)  # handed in, fixed
        self.on_decision: tuple[Decided, ...] = tuple(ports.on_decision)  # handed in, fixed
        self._evidence_of: dict[str, str] = {}  # incident id → target, while its bundle is captured
        self._live_done: set[str] = set()  # incident ids whose capture no longer needs the processes
        self._held: set[tuple[str, str]] = set()  # (incident id, why) held to alert-only, logged once

    def reconfigure(self, detectors: DetectorsConfig, target_configs: Mapping[str, Any]) -> None:
        """A config reload: the detectors' modes and the targets' log sources."""
        self.detectors = detectors
        self.target_configs = dict(target_configs)

    # ------------------------------------------------------------------ each tick
    def act(self, now: float) -> list[Transition]:
        open_incidents = self.incidents.open_incidents()
        tripped = {
            i.target.name for i in open_incidents if i.severity is Severity.CRITICAL and i.kind is not Kind.ACCEL_FAULT
        }
        total = len(self.tracker.targets)
        self.decisions = {}
        self.out_of_service = {}
        for inc in open_incidents:
            tr = self.tracker.targets.get(inc.target.name)
            if tr is None or inc.kind is Kind.RESTART_BUDGET_EXHAUSTED:
                continue
            row = self.kinds.get(inc.kind)
            mode = row.mode(self.detectors) if row is not None else Mode.ALERT
            mode = self.remediator.mode_for(inc, tr, mode)  # the target's profile may set it per kind
            ambiguous = bool(inc.signals.get("alert_only")) and mode is Mode.REMEDIATE
            if ambiguous:
                mode = Mode.ALERT  # e.g. two instances disagree and neither has a baseline: nobody to blame
            hold = self._external_hold(inc) if mode is Mode.REMEDIATE else None
            if hold:  # external evidence is a hint: only the guardian's own failing round confirms it
                if (inc.id, hold) not in self._held:
                    if len(self._held) > 1024:  # a few per incident; forget old ones rather than grow
                        self._held.clear()
                    self._held.add((inc.id, hold))
                    self.log.warning("%s %s of %s: %s", inc.kind.value, inc.id, inc.target.name, hold)
                self.decisions[inc.target.name] = hold
                self._decided(inc, Refusal(hold, name="external"))
                continue
            if self._will_remediate(inc, mode):
                self.out_of_service.setdefault(inc.target.name, (inc.kind.value, inc.id))
            # draining starts while the bundle is captured; stopping waits for it (``_capturing``)
            considered = self.remediator.consider(
                inc, tr, now, mode=mode, tripped=len(tripped), total=total, diagnosing=inc.id in self.evidence_pending
            )
            self._decided(inc, AMBIGUOUS if ambiguous else considered.hold)
            decision = considered.text
            if inc.id in self.evidence_pending:
                decision = f"capturing evidence; {decision}"
            self.decisions[inc.target.name] = decision
        holding = {t for t in list(self._evidence_of.values()) if self._capturing(t)}
        self.remediator.tick(now, self.tracker, self.series, holding)
        for seq, outcome in self.remediator.take_finished():
            self._remediation_finished(seq, outcome)
        for incident_id in self.remediator.take_escalated():
            escalated = self.incidents.get(incident_id)
            if escalated is not None:
                self._updated(escalated)  # the breaker's page: the alert goes out again with what is held
        still_open = {i.id for i in self.incidents.open_incidents()}  # a verified restart resolved its incident
        self.out_of_service = {t: v for t, v in self.out_of_service.items() if v[1] in still_open}
        self.remediator.refresh_budgets()
        return self._budget_incidents()

    def _decided(self, inc: Incident, hold: Refusal | None) -> None:
        for hook in self.on_decision:
            hook(inc, hold)

    def _external_hold(self, inc: Incident) -> str | None:
        if inc.kind is not Kind.OUTPUT_CORRUPTION:
            return None
        signals = self.incidents.latest_signals(inc.id) or inc.signals  # the latest finding: a confirmation since
        gates = self.readings.gates
        return external_hold(signals, gates is not None and gates.trusted)

    def _will_remediate(self, inc: Incident, mode: Mode) -> bool:
        """Remediate mode, a remediating detector, a configured target, a kind that restarts."""
        return (
            mode is Mode.REMEDIATE
            and not self.remediator.target_policy(inc.target.name).policy.dry_run
            and inc.kind is not Kind.PROBE_FAILURE
            and self.remediator.settings.configured(inc.target.name)
        )

    def _budget_incidents(self) -> list[Transition]:
        transitions: list[Transition] = []
        for name, tr in self.tracker.targets.items():
            kind = Kind.RESTART_BUDGET_EXHAUSTED
            finding = None
            if name in self.remediator.exhausted:
                policy = self.remediator.target_policy(name).policy
                left = budget_left(policy, self.remediator.ledger, name, self.clock.wall())
                finding = Finding(
                    kind,
                    name,
                    Severity.CRITICAL,
                    f"restart budget exhausted ({policy.budget.max_restarts} per "
                    f"{policy.budget.period:.0f}s): observe-only until it frees up",
                    {"max_restarts": policy.budget.max_restarts, "period": policy.budget.period, "budget_left": left},
                )
            transitions += self.incidents.update(name, tr.ref({}), {kind: finding})
        return transitions

    def _remediation_finished(self, seq: RestartSequence, outcome: Outcome) -> None:
        if outcome is not Outcome.DONE and seq.incident_id:
            inc = self.incidents.get(seq.incident_id)
            if inc is not None:
                self._updated(inc)  # the alert carries every step and why it failed
        if outcome is Outcome.DONE and not seq.drain_only and self.readings.gates is not None:
            self.readings.gates.request_rebaseline(seq.target)  # the gates take the baseline again
        if outcome is Outcome.DONE and not seq.drain_only:
            for t in self.incidents.resolve_target(seq.target, f"restarted and verified: {seq.detail}"):
                if t.incident.kind is not Kind.RESTART_BUDGET_EXHAUSTED:
                    self.emit(t)

    def record_action(self, incident_id: str, action: Action) -> None:
        """A step taken for an incident by someone else (a probe's diagnosis): kept on the
        incident, and its alert sent again with it. An incident already gone is ignored."""
        try:
            inc = self.incidents.add_action(incident_id, action)
        except KeyError:
            return
        self._updated(inc)

    def _updated(self, inc: Incident) -> None:
        for hook in self.on_update:
            hook(inc)

    # ------------------------------------------------------------------ control socket
    def control(self, req: dict) -> str:
        """drain, restart, undrain (same machine, same safety checks)."""
        cmd, name = req.get("cmd"), req.get("target")
        if not isinstance(name, str):
            raise UnknownTarget("a target name is required")
        if cmd == "undrain":
            return self.remediator.undrain(name)
        tr = self.tracker.targets.get(name)
        if tr is None:
            known = ", ".join(sorted(self.tracker.targets)) or "none"
            raise UnknownTarget(f"no target named {name!r} on this node (known: {known}; see `guardian status`)")
        return self.remediator.manual(name, tr, self.clock.monotonic(), str(cmd), bool(req.get("dry_run")))

    # ------------------------------------------------------------------ evidence
    def _device_story(self, inc: Incident) -> tuple[list[dict], list[str]]:
        ledger = self.readings.device_faults
        if ledger is None:
            return [], []
        return device_story(inc.kind.value, ledger.for_target(inc.target.name, self.clock.monotonic()))

    def _accelerators(self) -> dict[str, Any] | None:
        """The device table for the evidence, each device with the faults on record."""
        accel, ledger = self.readings.accel, self.readings.device_faults
        devices: dict[str, Any] = dict(accel.devices) if accel is not None else {}
        if ledger is not None:
            for dev, st in ledger.status(self.clock.monotonic()).items():
                devices[dev] = {
                    **devices.get(dev, {"device": dev}),
                    "fault_health": st["health"],
                    "faults": st["faults"],
                }
        return devices if (accel is not None or devices) else None

    def incident_opened(self, inc: Incident) -> None:
        """Evidence before action: the bundle is taken the moment an incident opens, off the loop;
        remediation of that incident waits for it (or its deadline)."""
        if inc.kind is Kind.RESTART_BUDGET_EXHAUSTED:
            return
        entries, notes = self._device_story(inc)
        if entries or notes:
            try:
                inc = self.incidents.set_diagnosis(inc.id, entries, None, notes)
            except KeyError:
                return
            self._updated(inc)
        tr = self.tracker.targets.get(inc.target.name)
        if self.evidence is None or tr is None:
            return
        if not tr.target.processes and inc.kind is not Kind.ENGINE_DEAD:
            return  # nothing to capture; a dead server still leaves its series and its log to read
        now = self.clock.monotonic()
        accel = self.readings.accel
        pid = inc.signals.get("pid")
        ctx = EvidenceContext(
            incident=inc,
            target=tr.target,
            hottest_pid=pid if isinstance(pid, int) else None,
            series=series_windows(self.series, inc.target.name, now - self.series.horizon),
            metrics_text=tr.last_scrape.page if tr.last_scrape is not None else None,
            accelerators=self._accelerators(),
            on_live_done=lambda: self._live_done.add(inc.id),  # set.add: atomic, from the capture's thread
        )
        collector, diagnoser = self.evidence, self.diagnoser
        target_cfg = self.target_configs.get(inc.target.name)
        ledger = self.readings.device_faults
        faults = ledger.status(now) if ledger is not None else {}
        accel_rows = with_faults(accel.node if accel is not None else [], faults)
        api_url = tr.target.api_url
        if self.runner.submit(
            ("evidence", inc.id),
            lambda: capture_then_diagnose(
                collector, ctx, diagnoser, target_cfg=target_cfg, api_url=api_url, accelerators=accel_rows
            ),
            deadline=now + collector.deadline(len(tr.target.processes)),
            on_done=lambda done, _now: self._evidence_done(inc.id, done),
        ):
            self.evidence_pending.add(inc.id)
            self._evidence_of[inc.id] = inc.target.name

    def _capturing(self, target: str) -> bool:
        """Does a capture still need this target's processes alive (the stop waits for it)?"""
        return any(self._evidence_of.get(i) == target and i not in self._live_done for i in list(self.evidence_pending))

    def _evidence_done(self, incident_id: str, done: Done) -> None:
        self.evidence_pending.discard(incident_id)
        self._evidence_of.pop(incident_id, None)
        self._live_done.discard(incident_id)
        if done.error is not None:
            self.episodes.fail("evidence", f"capture crashed: {done.error!r}", self.clock.monotonic())
            return
        res: EvidenceResult
        res, diag = done.result
        partial = (
            "" if res.complete else ", partial: " + "; ".join(f"{k}: {v}" for k, v in list(res.failures.items())[:3])
        )
        self.log.info(
            "evidence for %s: %d files in %.2fs%s",
            incident_id,
            len(res.files),
            res.duration,
            partial,
            extra={"incident": incident_id},
        )
        try:
            inc = self.incidents.set_evidence(incident_id, str(res.dir))
            if diag is not None:
                entries, notes = self._device_story(inc)
                inc = self.incidents.set_diagnosis(
                    incident_id, [*entries, *diag.diagnosis], diag.crash, [*notes, *diag.notes]
                )
                if diag.diagnosis:
                    self.log.info(
                        "diagnosis of %s: %s (confidence %.2f)",
                        incident_id,
                        diag.diagnosis[0]["id"],
                        diag.diagnosis[0]["confidence"],
                    )
        except KeyError:
            return
        self._updated(inc)
