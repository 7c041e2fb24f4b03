"""The tick loop: targets → probes → series → detectors → incidents → actions + sinks.

``Daemon.tick()`` is the unit of work and never blocks on a supervised server. Discovery
refreshes the targets every few seconds; every probe of the table (``vllm_guardian.probes.table``)
runs the same way: inline probes on the loop thread before detection, the others on a bounded
pool after it, folded in on a later tick. Detection is pure (``detectors/``); incidents open and
resolve with hysteresis; the ``Responder`` acts (evidence, remediation). ``run()`` sleeps through
the injected clock (``vllm_guardian.loop.run``). The daemon builds nothing: it is handed its parts built
(``DaemonParts``, by ``loop/assemble.py``); ``runtime.py`` builds the real seams. The status is
built on demand, at most once per tick.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vllm_guardian.config.schema import Config
from vllm_guardian.detectors import accel_fault, evaluate_all
from vllm_guardian.detectors.kinds import Detector
from vllm_guardian.detectors.probe_failure import evaluate_episodes
from vllm_guardian.detectors.view import TargetView
from vllm_guardian.discovery.targets import NAME as TARGETS
from vllm_guardian.discovery.targets import TargetsStage
from vllm_guardian.host.capabilities import Capabilities
from vllm_guardian.incidents import IncidentManager
from vllm_guardian.loop.fanout import Sink, TransitionFanout
from vllm_guardian.loop.responder import Responder
from vllm_guardian.loop.run import run_loop
from vllm_guardian.loop.tables import Tables
from vllm_guardian.model import Finding, Kind, TargetRef, Transition
from vllm_guardian.probes.base import Readings, Seen
from vllm_guardian.probes.scheduler import ProbeScheduler
from vllm_guardian.remediation.policy import RestartLedger
from vllm_guardian.remediation.remediator import Remediator
from vllm_guardian.seams import Seams
from vllm_guardian.series import SeriesStore
from vllm_guardian.state.async_runner import AsyncRunner
from vllm_guardian.state.episodes import EpisodeLog
from vllm_guardian.state.selfstats import SelfStats
from vllm_guardian.state.tracker import Changes, Tracker

if TYPE_CHECKING:
    from vllm_guardian.loop.group_stage import GroupStage
    from vllm_guardian.loop.orphan_watch import OrphanWatch
    from vllm_guardian.host.kube import KubeClient
    from vllm_guardian.surface.status_snapshot import StatusSnapshot
    from vllm_guardian.surface.status_view import StatusSources

__all__ = ["Daemon", "DaemonParts", "Sink"]


@dataclass(frozen=True)
class DaemonParts:
    """Every part of the daemon, built once by the assembler (``loop/assemble.py``)."""

    cfg: Config
    seams: Seams
    kube: KubeClient | None
    log: logging.Logger
    node: str
    series: SeriesStore
    tracker: Tracker
    episodes: EpisodeLog
    runner: AsyncRunner
    stats: SelfStats
    readings: Readings
    capabilities: Capabilities  # what it cannot do here, each said once
    targets: TargetsStage
    probes: ProbeScheduler
    incidents: IncidentManager
    ledger: RestartLedger
    remediator: Remediator
    fanout: TransitionFanout
    responder: Responder
    status_sources: StatusSources | None  # the node sections of the parts around the daemon (None: none)
    detectors: Mapping[Kind, Detector]  # the kind table's per-target detectors, in table order
    tables: Tables = field(default_factory=Tables)  # the probes, kinds and restart methods it was assembled from
    groups: GroupStage | None = None  # multi-node groups: records exchanged, findings scoped (groups/stage.py)
    orphans: OrphanWatch | None = None  # VLLM:: processes with no live API server (loop/orphan_watch.py)


class Daemon:
    def __init__(self, parts: DaemonParts) -> None:
        self.parts = parts
        self.cfg = parts.cfg  # replaced by a config reload (``loop.reload``)
        self.seams, self.kube = parts.seams, parts.kube  # kept for a config reload
        self.clock = parts.seams.clock
        self.log, self.node = parts.log, parts.node
        self.series, self.tracker, self.episodes = parts.series, parts.tracker, parts.episodes
        self.runner, self.stats, self.readings = parts.runner, parts.stats, parts.readings
        self.capabilities = parts.capabilities
        self.targets, self.probes, self.incidents = parts.targets, parts.probes, parts.incidents
        self.ledger, self.remediator, self.responder = parts.ledger, parts.remediator, parts.responder
        self.status_sources = parts.status_sources
        self.detectors = parts.detectors
        self.groups = parts.groups
        self.orphans = parts.orphans
        self._emit = parts.fanout.emit
        self.seen = Seen()
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
        if self.groups is not None:
            self.groups.tick(now, self.tracker.targets, self.incidents.open_incidents())
        if self.orphans is not None:
            self.orphans.step(now, self.tracker.targets)
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
            change = self.tracker.operator_drain(name, self.remediator.operator_drained(name), now)
            if change:
                self.log.info("target %s: %s", name, change, extra={"target": name})
            if self.remediator.suppress_detection(name):
                continue  # the guardian is taking it down itself: its death is not news
            gates = self.readings.gates.view(name) if self.readings.gates is not None else None
            view = TargetView(self.tracker.state(name, now), self.series, gates)
            findings = evaluate_all(view, self.cfg.detectors, self.detectors)
            findings[Kind.PROBE_FAILURE] = evaluate_episodes(
                name, {k: v for k, v in open_episodes.items() if k.startswith(f"{name}:")}, self.cfg.detectors, now
            )
            if self.groups is not None:  # a member of a group over nodes raises only its own ranks' findings
                findings = self.groups.scope(tr.target, findings)
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
