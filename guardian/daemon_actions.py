"""The daemon's acting half: evidence when an incident opens, remediation decisions and their
state machine, control-socket requests (drain / restart / undrain).

A mixin of ``Daemon`` (it uses the daemon's tracker, series, incidents, runner and remediator);
kept apart so ``daemon.py`` stays about seeing: the tick, discovery and the probes.
"""
from __future__ import annotations

from .actions.evidence import EvidenceContext, series_windows
from .model import Finding, Kind, Severity, Transition
from .policy import budget_left


class ActionsMixin:
    def _remediate(self, now: float) -> list[Transition]:
        open_incidents = self.incidents.open_incidents()
        tripped = {i.target.name for i in open_incidents if i.severity.value == "critical"}
        total = len(self.tracker.targets)
        self.decisions = {}
        for inc in open_incidents:
            tr = self.tracker.targets.get(inc.target.name)
            if tr is None or inc.kind is Kind.RESTART_BUDGET_EXHAUSTED:
                continue
            if inc.id in self.evidence_pending:
                self.decisions[inc.target.name] = "capturing evidence first"
                continue
            mode = getattr(getattr(self.cfg.detectors, inc.kind.value, None), "mode", "alert")
            if inc.signals.get("alert_only"):  # e.g. two instances disagree and neither has a baseline
                mode = "alert"
            self.decisions[inc.target.name] = self.remediator.consider(
                inc, tr, now, mode=mode, tripped=len(tripped), total=total)
        self.remediator.tick(now, self.tracker, self.series, self._remediation_jobs)
        self.remediator.refresh_budgets()
        transitions: list[Transition] = []
        for name, tr in self.tracker.targets.items():
            kind = Kind.RESTART_BUDGET_EXHAUSTED
            finding = None
            if name in self.remediator.exhausted:
                left = budget_left(self.cfg.policy, self.ledger, name, self.clock.wall())
                finding = Finding(kind, name, Severity.CRITICAL,
                                  f"restart budget exhausted ({self.cfg.policy.budget.max_restarts} per "
                                  f"{self.cfg.policy.budget.period:.0f}s): observe-only until it frees up",
                                  {"max_restarts": self.cfg.policy.budget.max_restarts,
                                   "period": self.cfg.policy.budget.period, "budget_left": left})
            transitions += self.incidents.update(name, self._ref(tr, {}), {kind: finding})
        return transitions

    def _remediation_finished(self, seq, outcome: str) -> None:
        if outcome != "done" and seq.incident_id:
            inc = self.incidents.get(seq.incident_id)
            if inc is not None:
                for hook in self.on_update:
                    hook(inc)  # the alert carries every step and why it failed
        if outcome == "done" and not seq.drain_only and self.readings.gates is not None:
            self.readings.gates.request_rebaseline(seq.target)
        if outcome == "done" and not seq.drain_only:
            for t in self.incidents.resolve_target(seq.target, f"restarted and verified: {seq.detail}"):
                if t.incident.kind is not Kind.RESTART_BUDGET_EXHAUSTED:
                    self._emit(t)

    def _accel_held(self, pids: set[int]) -> bool | None:
        """Whether an accelerator backend still shows memory held by these pids (None: no backend)."""
        accel = self.readings.accel
        if accel is None:
            return None
        return any(accel.process_memory.get(pid, 0) > 0 for pid in pids)

    def control_request(self, req: dict) -> str:
        """Control-socket commands: drain, restart, undrain (same machine, same safety checks)."""
        with self._lock:
            return self._control(req)

    def _control(self, req: dict) -> str:
        cmd, name = req.get("cmd"), req.get("target")
        if cmd == "undrain":
            return self.remediator.undrain(name)
        tr = self.tracker.targets.get(name)
        if tr is None:
            raise KeyError(f"unknown target {name!r} (known: {', '.join(sorted(self.tracker.targets)) or 'none'})")
        return self.remediator.manual(name, tr, self.clock.monotonic(), cmd, bool(req.get("dry_run")))

    # ------------------------------------------------------------------ evidence
    def _capture_evidence(self, inc) -> None:
        """Evidence before action: the bundle is taken the moment an incident opens, off the loop;
        remediation of that incident waits for it (or its deadline)."""
        tr = self.tracker.targets.get(inc.target.name)
        if self.evidence is None or tr is None or not tr.target.processes:
            return
        now = self.clock.monotonic()
        scrape = tr.last_scrape
        ctx = EvidenceContext(
            incident=inc, target=tr.target,
            hottest_pid=inc.signals.get("pid") if isinstance(inc.signals.get("pid"), int) else None,
            series=series_windows(self.series, inc.target.name, now - self.series.horizon),
            metrics_text=scrape.page if scrape is not None else None,
            accelerators=dict(self.readings.accel.devices) if self.readings.accel is not None else None,
        )
        collector = self.evidence
        if self.runner.submit(("evidence", inc.id), lambda: collector.capture(ctx),
                              deadline=now + collector.deadline(len(tr.target.processes)),
                              on_done=lambda done, _now, inc_id=inc.id: self._fold_evidence(inc_id, done)):
            self.evidence_pending.add(inc.id)

    def _fold_evidence(self, incident_id: str, done) -> None:
        self.evidence_pending.discard(incident_id)
        if done.error is not None:
            self.episodes.fail("evidence", f"capture crashed: {done.error!r}", self.clock.monotonic())
            return
        res = done.result
        self.log.info("evidence for %s: %d files in %.2fs%s", incident_id, len(res.files), res.duration,
                      "" if res.complete else f", partial: {'; '.join(f'{k}: {v}' for k, v in list(res.failures.items())[:3])}")
        try:
            inc = self.incidents.set_evidence(incident_id, str(res.dir))
        except KeyError:
            return
        for hook in self.on_update:
            hook(inc)
