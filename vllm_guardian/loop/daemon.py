"""The tick loop: targets → probes → series → detectors → incidents → actions + sinks.

``Daemon.tick()`` is the unit of work and never blocks on a supervised server. Discovery
refreshes the targets every few seconds; every probe of the table (``vllm_guardian.probes.table``)
runs the same way: inline probes on the loop thread before detection, the others on a bounded
pool after it, folded in on a later tick. Detection is pure (``detectors/``); incidents open and
resolve with hysteresis; the ``Responder`` acts (evidence, remediation). ``run()`` sleeps through
the injected clock (``vllm_guardian.loop.run``). The daemon is handed its seams built (``Seams``);
``runtime.py`` builds the real ones. The status is built on demand, at most once per tick.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from vllm_guardian.bundle.evidence import EvidenceCollector
from vllm_guardian.remediation.policy import RestartLedger
from vllm_guardian.remediation.methods import build_methods
from vllm_guardian.remediation.parts import RemediationParts
from vllm_guardian.remediation.remediator import Remediator
from vllm_guardian.remediation.settings import RemediationSettings
from vllm_guardian.loop.responder import Responder
from vllm_guardian.config.schema import Config
from vllm_guardian.detectors.kinds import series_store_for
from vllm_guardian.detectors import accel_fault, evaluate_all
from vllm_guardian.detectors.probe_failure import evaluate_episodes
from vllm_guardian.detectors.view import TargetView
from vllm_guardian.state.episodes import EpisodeLog
from vllm_guardian.incidents import IncidentManager, IncidentStore
from vllm_guardian.loop.run import run_loop
from vllm_guardian.model import Finding, Incident, Kind, TargetRef, Transition
from vllm_guardian.discovery.platform_match import platform_for
from vllm_guardian.state.async_runner import AsyncRunner
from vllm_guardian.probes.base import ProbeParts, Readings, Seen
from vllm_guardian.probes.scheduler import ProbeScheduler
from vllm_guardian.probes.table import build_probes, probe_names
from vllm_guardian.seams import Seams
from vllm_guardian.state.device_faults import DeviceFaults
from vllm_guardian.state.selfstats import SelfStats
from vllm_guardian.discovery.targets import NAME as TARGETS
from vllm_guardian.discovery.targets import DiscoveryHook, TargetsStage
from vllm_guardian.state.tracker import Changes, Tracker

if TYPE_CHECKING:
    from vllm_guardian.diagnosis.service import Diagnoser
    from vllm_guardian.gates.exchange import RedisHashes
    from vllm_guardian.remediation.lease import FleetLease
    from vllm_guardian.host.kube import KubeClient
    from vllm_guardian.surface.status_snapshot import StatusSnapshot
    from vllm_guardian.surface.status_view import StatusSources

Sink = Callable[[Transition], None]


class Daemon:
    def __init__(
        self,
        cfg: Config,
        seams: Seams,
        *,
        store: IncidentStore | None = None,
        evidence: EvidenceCollector | None = None,
        lease: FleetLease | None = None,
        kube: KubeClient | None = None,
        publish_control: Callable[[dict], object] | None = None,
        sinks: Iterable[Sink] = (),
        on_update: Iterable[Callable[[Incident], None]] = (),
        on_discovery: Iterable[DiscoveryHook] = (),
        status_sources: StatusSources | None = None,
        runner: AsyncRunner | None = None,
        log: logging.Logger | None = None,
        diagnoser: Diagnoser | None = None,
        redis: RedisHashes | None = None,
    ) -> None:
        self.cfg = cfg
        self.seams, self.kube, self.redis = seams, kube, redis  # kept for a config reload (``loop.reload``)
        self.clock = seams.clock
        self.log = log or logging.getLogger("guardian")
        self.node = cfg.node or os.uname().nodename
        self.sinks: list[Sink] = [self._log_transition, *sinks]
        self.series = series_store_for(cfg)
        self.tracker = Tracker.from_config(cfg)
        self.episodes = EpisodeLog(self.log)
        self.runner = runner or AsyncRunner(max_workers=8)
        self.readings = Readings(device_faults=DeviceFaults(cfg.detectors.accel_fault.window))
        self.targets = TargetsStage(
            cfg,
            seams.proc,
            self.tracker,
            self.series,
            self.log,
            platform=platform_for(cfg, seams.proc, kube, seams.commands),
            on_discovery=on_discovery,
        )
        self.stats = SelfStats.for_probes(probe_names())
        self.probes = ProbeScheduler(
            build_probes(ProbeParts(cfg, seams, self.tracker, self.series, self.readings, self.log, redis)),
            self.runner,
            self.stats,
            self.episodes,
            self.series,
            record=lambda incident_id, action: self.responder.record_action(incident_id, action),
        )
        self.seen = Seen()
        self.incidents = IncidentManager(self.node, self.clock, store, cfg.detectors)
        self.ledger = RestartLedger(cfg.state_dir, keep=cfg.policy.budget.period)
        settings = RemediationSettings.from_config(cfg)
        self.remediator = Remediator(
            RemediationParts(
                settings,
                self.clock,
                seams.control,
                self.runner,
                seams.commands,
                self.incidents,
                self.ledger,
                seams.proc,
                build_methods(settings.units()),
                self.log.getChild("remediation"),
                lease=lease,
                kube=kube,
                publish_control=publish_control or (lambda msg: None),
                release_check=self.readings.device_memory_held,
                device_check=self._restart_blocked_by_device,
            )
        )
        self.responder = Responder(
            cfg.detectors,
            self.clock,
            self.runner,
            self.tracker,
            self.series,
            self.readings,
            self.incidents,
            self.remediator,
            evidence,
            self.episodes,
            self._emit,
            self.log,
            diagnoser=diagnoser,
            target_configs={t.name: t for t in cfg.targets},
            on_update=on_update,
        )
        self.status_sources = status_sources  # sections of the parts wired around the daemon (None: none)
        self.findings: dict[str, dict[Kind, Finding | None]] = {}
        self._status: StatusSnapshot | None = None
        self._status_tick = -1
        self.started_mono = self.clock.monotonic()
        self._lock = threading.RLock()  # the loop and control-socket requests take turns

    def tick(self) -> list[Transition]:
        with self._lock:
            return self._tick()

    def _tick(self) -> list[Transition]:
        start = time.perf_counter()
        now = self.clock.monotonic()
        self._refresh_targets(now)  # a discovery pass applied when one finished, started when due
        self.probes.collect(now)  # finished off-loop jobs: folds, evidence, remediation steps
        self.probes.run_inline(now, self.seen)
        transitions = self._detect(now)
        self.probes.schedule(now, self.seen)  # off-loop probes plan on this tick's detection
        for tr in transitions:
            self._emit(tr)  # opening an incident starts its evidence capture, before any action
        later = self.responder.act(now)
        for tr in later:
            self._emit(tr)
        transitions += later
        if self.stats.ticks % 60 == 0:
            self.series.expire(now)
        self.stats.ticks += 1
        self.stats.last_tick_s = time.perf_counter() - start
        self.stats.max_tick_s = max(self.stats.max_tick_s, self.stats.last_tick_s)
        self.stats.tick_times.add(self.stats.last_tick_s)
        return transitions

    def _refresh_targets(self, now: float) -> None:
        st = self.stats.probes[TARGETS]
        for out in self.targets.step(now):
            if out.seconds is not None:
                st.record(out.seconds)
            if out.changes is None:  # a broken /proc, a stuck pass, discovery stopped: counted, logged once
                st.failures += 1
                self.episodes.fail(TARGETS, out.error, now)
                continue
            self.episodes.ok(TARGETS)
            self._forget(out.changes, now)

    def _forget(self, changes: Changes, now: float) -> None:
        for name in changes.forgotten:
            self.findings.pop(name, None)
            self.episodes.forget(f"{name}:")
            for t in self.incidents.resolve_target(name, "target disappeared"):
                self._emit(t)
        present = set(self.tracker.targets) | set(self._fault_devices())
        for t in self.incidents.resolve_missing(present, now, self.cfg.discovery.forget_after):
            self._emit(t)  # e.g. reloaded at start-up for a target that no longer exists

    def _detect(self, now: float) -> list[Transition]:
        transitions: list[Transition] = []
        suspected: set[str] = set()
        open_episodes = {k: (e.count, e.message, e.since) for k, e in self.episodes.open.items()}
        for name, tr in list(self.tracker.targets.items()):
            if self.remediator.suppress_detection(name):
                continue  # the guardian is taking it down itself: its death is not news
            gates = self.readings.gates.view(name) if self.readings.gates is not None else None
            findings = evaluate_all(TargetView(self.tracker.state(name, now), self.series, gates), self.cfg.detectors)
            findings[Kind.PROBE_FAILURE] = evaluate_episodes(
                name, {k: v for k, v in open_episodes.items() if k.startswith(f"{name}:")}, self.cfg.detectors, now
            )
            self.findings[name] = findings
            # not yet seen ready (warm-up, a guardian just restarted): a quiet detector may not resolve;
            # its API server gone (not ready either): whatever hung or leaked in it ended with it
            judged = findings if tr.ready or not tr.api_alive else {k: f for k, f in findings.items() if f is not None}
            transitions.extend(self.incidents.update(name, tr.ref(findings), judged))
            if any(f is not None for f in findings.values()):
                suspected.add(name)
        transitions.extend(self._detect_devices(now))
        open_incidents = tuple(self.incidents.open_incidents())
        suspected.update(inc.target.name for inc in open_incidents if inc.kind is not Kind.ACCEL_FAULT)
        self.seen = Seen(frozenset(suspected), self.findings, open_incidents)
        return transitions

    def _fault_devices(self) -> list[str]:
        """Devices with a fault on record, and those of open accel_fault incidents (reloaded at start)."""
        ledger = self.readings.device_faults
        known = ledger.devices() if ledger is not None else []
        return known + [i.target.name for i in self.incidents.open_incidents() if i.kind is Kind.ACCEL_FAULT]

    def _detect_devices(self, now: float) -> list[Transition]:
        """accel_fault, one incident per device (its target is the device)."""
        ledger = self.readings.device_faults
        if ledger is None:
            return []
        out: list[Transition] = []
        for dev in sorted(set(self._fault_devices())):
            finding = accel_fault.evaluate(ledger.view(dev, now), self.cfg.detectors)
            out += self.incidents.update(dev, TargetRef(dev, 0, 0), {Kind.ACCEL_FAULT: finding})
        return out

    def _restart_blocked_by_device(self, target: str) -> str | None:
        """Why a restart of this server would land on a broken device (None: it would not)."""
        ledger = self.readings.device_faults
        if ledger is None:
            return None
        faults = ledger.blocking(target, self.clock.monotonic())
        if not faults:
            return None
        f = max(faults, key=accel_fault.precedence)
        devices = sorted({r.device for r in faults})
        return (
            f"restart refused: device {', '.join(devices)} reported {f.label()}; a restart cannot help "
            f"({f.entry.action.replace('_', ' ')}: {f.entry.what_to_do}); escalated to the node alert accel_fault"
        )

    def _emit(self, tr: Transition) -> None:
        if tr.previous is None:
            self.responder.incident_opened(tr.incident)
        counter = self.stats.incidents_opened if tr.previous is None else self.stats.incidents_resolved
        counter[tr.incident.kind.value] = counter.get(tr.incident.kind.value, 0) + 1
        for sink in self.sinks:
            try:
                sink(tr)
            except Exception as e:  # noqa: BLE001 - a sink must never take the loop down: logged once
                self.episodes.fail(
                    f"sink:{getattr(sink, '__name__', type(sink).__name__)}", repr(e), self.clock.monotonic()
                )

    def _log_transition(self, tr: Transition) -> None:
        inc = tr.incident
        fields = {"target": inc.target.name, "incident": inc.id, "kind": inc.kind.value}  # json/logfmt keys
        if tr.previous is None:
            self.log.warning(
                "INCIDENT %s %s on %s: %s", inc.id, inc.kind.value, inc.target.name, inc.summary, extra=fields
            )
            return
        self.log.warning("RESOLVED %s %s on %s", inc.id, inc.kind.value, inc.target.name, extra=fields)

    def status(self) -> StatusSnapshot:
        """The status as of the last tick (built when first asked for after it)."""
        with self._lock:
            if self._status_tick != self.stats.ticks:
                from vllm_guardian.surface.status_view import build_status  # here: keeps this module about the loop

                self._status = build_status(self, self.clock.monotonic())
                self._status_tick = self.stats.ticks
            assert self._status is not None
            return self._status

    def control_request(self, req: dict) -> str:
        """Control-socket commands: drain, restart, undrain (under the loop's lock)."""
        with self._lock:
            return self.responder.control(req)

    def run(self, stop: threading.Event, on_tick: Callable[[], None] | None = None) -> None:
        """Tick every ``interval`` until ``stop`` is set (``vllm_guardian.loop.run``)."""
        run_loop(self, stop, on_tick)
