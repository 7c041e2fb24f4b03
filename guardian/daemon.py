"""Wiring and the tick loop: discovery → probes → series → detectors → incidents → sinks.

``Daemon.tick()`` is the unit of work and never blocks on a supervised server:
HTTP scrapes and canaries run on a bounded pool (``AsyncRunner``) and their
results are folded in on a later tick; /proc reads are inline and cheap. Only
``run()`` sleeps, through the injected clock. The latest status is an
immutable dict swapped in at the end of each tick, read by the API thread.
"""
from __future__ import annotations

import logging
import os
import resource
import threading
import time
from functools import partial
from typing import Callable, Iterable

from . import __version__
from .actions.evidence import EvidenceCollector
from .actions.remediation import Remediator
from .config_schema import Config
from .daemon_actions import ActionsMixin
from .detectors import evaluate_all
from .detectors.probe_failure import evaluate_episodes
from .detectors.view import TargetView
from .discovery import DiscoveryCache, discover
from .episodes import EpisodeLog
from .host.process_control import OsProcessControl
from .host.runner import SubprocessRunner
from .incidents import IncidentManager, IncidentStore
from .model import Finding, Kind, TargetRef, Transition
from .policy import RestartLedger
from .probes.accel import make_backends
from .probes.async_runner import AsyncRunner, Done
from .probes.base import Folded, Job, Probe, ProbeParts, Readings, Seen
from .probes.table import build_probes, probe_names
from .selfstats import DISCOVERY, SelfStats
from .series import SeriesStore
from .tracker import Tracker

Sink = Callable[[Transition], None]


def _episode(probe: Probe, job: Job) -> str:
    return f"{job.subject}:{probe.name}" if job.subject else probe.name


class Daemon(ActionsMixin):
    def __init__(self, cfg: Config, clock, procfs, http, *, sinks: Iterable[Sink] = (),
                 store: IncidentStore | None = None, log: logging.Logger | None = None,
                 runner: AsyncRunner | None = None, control=None, cmd_runner=None, lease=None,
                 kube=None, publish_control: Callable[[dict], object] | None = None,
                 evidence=None, accel_backends=None) -> None:
        self.cfg = cfg
        self.clock = clock
        self.procfs = procfs
        self.http = http
        self.log = log or logging.getLogger("guardian")
        self.node = cfg.node or os.uname().nodename
        self.sinks = [self._log_transition, *sinks]
        self.series = SeriesStore(horizon=self._horizon(cfg))
        self.tracker = Tracker(cfg.discovery.forget_after,
                               {t.name: t.model for t in cfg.targets if t.model})
        self.episodes = EpisodeLog(self.log)
        self.runner = runner or AsyncRunner(max_workers=8)
        if accel_backends is None:  # NVML/npu-smi are touched here, after construction, never at import
            accel_backends = make_backends(cfg.accelerators, cmd_runner or SubprocessRunner(), self.log)
        self.readings = Readings()
        self.probes = build_probes(ProbeParts(
            cfg, clock, procfs, http, cmd_runner or SubprocessRunner(), list(accel_backends), self.tracker,
            self.series, self.readings, self.log))
        self.seen = Seen()
        self.store = store
        self.incidents = IncidentManager(self.node, clock, store, cfg.detectors)
        self.stats = SelfStats.for_probes(probe_names())
        self.ledger = RestartLedger(cfg.state_dir)
        self.remediator = Remediator(
            cfg, clock, control or OsProcessControl(procfs), self.runner, cmd_runner or SubprocessRunner(),
            self.incidents, self.ledger, procfs, lease=lease, kube=kube, publish_control=publish_control,
            release_check=self._accel_held, log=self.log.getChild("remediation"))
        self.remediator.on_finish.append(self._remediation_finished)
        self.decisions: dict[str, str] = {}
        self.evidence = evidence if evidence is not None else (
            EvidenceCollector(cfg.evidence, store.dir_for, cmd_runner or SubprocessRunner(), procfs, clock)
            if store is not None else None)
        self.evidence_pending: set[str] = set()
        self._remediation_jobs: dict[str, object] = {}
        self.discovery_cache = DiscoveryCache()
        self.status_extras: dict[str, Callable[[], object]] = {}
        self.on_update: list[Callable[[object], None]] = []  # incident changed without a transition
        self.findings: dict[str, dict[Kind, Finding | None]] = {}
        self.unmatched: tuple = ()
        self._next_discovery = float("-inf")
        self._status: dict = {}
        self._status_tick = -1
        self._started_mono = clock.monotonic()
        self._started_wall = clock.wall()
        self._lock = threading.RLock()  # the loop and control-socket requests take turns

    @staticmethod
    def _horizon(cfg: Config) -> float:
        d = cfg.detectors
        longest = max(d.busy_loop.window, d.engine_stall.window, d.kv_cache_leak.window,
                      d.accel_memory_leak.window, d.host_memory_leak.window, cfg.probes.canary.interval)
        return 2 * longest + 30

    # ------------------------------------------------------------------ the tick
    def tick(self) -> list[Transition]:
        with self._lock:
            return self._tick()

    def _tick(self) -> list[Transition]:
        start = time.perf_counter()
        now = self.clock.monotonic()
        if now >= self._next_discovery:
            self._next_discovery = now + self.cfg.discovery.interval
            self._discover(now)
        self._collect_async(now)
        self._run_inline(now)
        transitions = self._detect(now)
        self._schedule(now)  # off-loop probes plan on this tick's detection (a suspect's canary)
        for tr in transitions:
            self._emit(tr)  # opening an incident starts its evidence capture, before any action
        later = self._remediate(now)
        for tr in later:
            self._emit(tr)
        transitions += later
        if self.stats.ticks % 60 == 0:
            self.series.expire(now)
        self.stats.ticks += 1
        self.stats.last_tick_s = time.perf_counter() - start
        self.stats.max_tick_s = max(self.stats.max_tick_s, self.stats.last_tick_s)
        return transitions

    # ------------------------------------------------------------------ discovery
    def _discover(self, now: float) -> None:
        st = self.stats.probes[DISCOVERY]
        t0 = time.perf_counter()
        try:
            self.discovery_cache.now = now
            result = discover(self.procfs, self.cfg, cache=self.discovery_cache)
        except Exception as e:  # a broken /proc must not kill the loop
            st.failures += 1
            self.episodes.fail(DISCOVERY, f"{type(e).__name__}: {e}", now)
            return
        finally:
            st.record(time.perf_counter() - t0)
        self.episodes.ok(DISCOVERY)
        self.unmatched = result.unmatched
        changes = self.tracker.apply_discovery(result.targets, result.orphans, now)
        for name in changes.new:
            self.log.info("target %s discovered: %s", name, self.tracker.targets[name].target.key)
        for name in changes.restarted:
            tr = self.tracker.targets[name]
            self.log.info("target %s has a new API server %s", name, tr.target.key)
            self.series.drop_subjects(name, {f"p{p.pid}" for p in tr.target.processes})
        for name in changes.vanished:
            self.log.warning("target %s: API server is gone", name)
        for name in changes.forgotten:
            self.log.info("target %s forgotten after %.0fs gone", name, self.cfg.discovery.forget_after)
            self.series.drop_target(name)
            self.findings.pop(name, None)
            self.episodes.forget(f"{name}:")
            for t in self.incidents.resolve_target(name, "target disappeared"):
                self._emit(t)

    # ------------------------------------------------------------------ probes
    def _run_inline(self, now: float) -> None:
        for probe in self.probes:
            if probe.inline:
                for job in probe.jobs(now, self.seen):
                    self._run_now(probe, job, now)

    def _run_now(self, probe: Probe, job: Job, now: float) -> None:
        st = self.stats.probes[probe.name]
        t0 = time.perf_counter()
        try:
            result = job.run()
        except Exception as e:  # a broken /proc must not kill the loop
            st.failures += 1
            self.episodes.fail(_episode(probe, job), f"{type(e).__name__}: {e}", now)
            return
        finally:
            st.record(time.perf_counter() - t0)
            if st.last_duration_s > job.timeout:
                st.overruns += 1
        self._apply(probe, probe.fold(result, now), now)

    def _schedule(self, now: float) -> None:
        for probe in self.probes:
            if probe.inline:
                continue
            for job in probe.jobs(now, self.seen):
                key = (probe.name, job.subject)
                if self.runner.busy(key):
                    continue
                if self.runner.submit(key, job.run, deadline=now + job.timeout,
                                      on_done=partial(self._probe_done, probe, job)):
                    if job.on_start is not None:
                        job.on_start(now)

    def _probe_done(self, probe: Probe, job: Job, done: Done, now: float) -> None:
        st = self.stats.probes[probe.name]
        st.record(done.duration)
        if done.error is not None:  # a bug in a probe job: count it, keep going
            st.failures += 1
            self.episodes.fail(_episode(probe, job), f"probe crashed: {done.error!r}", now)
            return
        self._apply(probe, probe.fold(done.result, now), now)

    def _apply(self, probe: Probe, folded: Folded, now: float) -> None:
        self.series.extend(folded.samples)
        st = self.stats.probes[probe.name]
        for key, message in folded.failed.items():
            st.failures += 1
            self.episodes.fail(key, message, now)
        for key, message in folded.degraded.items():
            self.episodes.fail(key, message, now)
        for key in folded.cleared:
            self.episodes.ok(key)

    def _collect_async(self, now: float) -> None:
        self._remediation_jobs = {}  # results of this tick only
        for done in self.runner.collect():
            if done.on_done is not None:
                done.on_done(done, now)
            elif done.key[0] == "remediation":
                self._remediation_jobs[done.key[1]] = done.error if done.error is not None else done.result
        for key in self.runner.overruns(now):
            st = self.stats.probes.get(key[0])
            if st is not None:
                st.overruns += 1

    # ------------------------------------------------------------------ detection
    def _detect(self, now: float) -> list[Transition]:
        transitions: list[Transition] = []
        suspected: set[str] = set()
        interval = self.cfg.probes.procfs.interval
        for name, tr in list(self.tracker.targets.items()):
            if self.remediator.suppress_detection(name):
                continue  # the guardian is taking it down itself: its death is not news
            gates = self.readings.gates.view(name) if self.readings.gates is not None else None
            view = TargetView(self.tracker.state(name, now, interval), self.series, gates)
            findings = evaluate_all(view, self.cfg.detectors)
            findings[Kind.PROBE_FAILURE] = evaluate_episodes(
                name, {k: (e.count, e.message, e.since) for k, e in self.episodes.open.items()
                       if k.startswith(f"{name}:")}, self.cfg.detectors, now)
            self.findings[name] = findings
            ref = self._ref(tr, findings)
            # Until the target has answered a canary (warm-up, or a guardian that just restarted and
            # has not seen it healthy yet) a quiet detector proves nothing: it may not resolve.
            judged = findings if tr.ready else {k: f for k, f in findings.items() if f is not None}
            transitions.extend(self.incidents.update(name, ref, judged))
            if any(f is not None for f in findings.values()):
                suspected.add(name)
        open_incidents = tuple(self.incidents.open_incidents())
        suspected.update(inc.target.name for inc in open_incidents)
        self.seen = Seen(frozenset(suspected), self.findings, open_incidents)
        return transitions

    def _ref(self, tr, findings) -> TargetRef:
        role = None
        for f in findings.values():
            if f is not None and f.signals.get("role"):
                role = str(f.signals["role"])
                break
        return TargetRef(tr.name, tr.target.key.pid, tr.target.key.starttime, tr.target.port, tr.model, role)

    def _emit(self, tr: Transition) -> None:
        if tr.previous is None and tr.incident.kind is not Kind.RESTART_BUDGET_EXHAUSTED:
            self._capture_evidence(tr.incident)
        counter = self.stats.incidents_opened if tr.previous is None else self.stats.incidents_resolved
        counter[tr.incident.kind.value] = counter.get(tr.incident.kind.value, 0) + 1
        for sink in self.sinks:
            try:
                sink(tr)
            except Exception as e:  # a sink must never take the loop down
                self.episodes.fail(f"sink:{getattr(sink, '__name__', type(sink).__name__)}", repr(e),
                                   self.clock.monotonic())

    def _log_transition(self, tr: Transition) -> None:
        inc = tr.incident
        if tr.previous is None:
            self.log.warning("INCIDENT %s %s on %s: %s", inc.id, inc.kind.value, inc.target.name, inc.summary)
        else:
            self.log.warning("RESOLVED %s %s on %s", inc.id, inc.kind.value, inc.target.name)

    # ------------------------------------------------------------------ status
    def status(self) -> dict:
        """The status document as of the last tick (built when first asked for after it)."""
        with self._lock:
            if self._status_tick != self.stats.ticks:
                self._status = self._build_status(self.clock.monotonic())
                self._status_tick = self.stats.ticks
            return self._status

    def _build_status(self, now: float) -> dict:
        from .status_view import build_status  # keeps this module about the loop

        return build_status(self, now)

    # ------------------------------------------------------------------ run
    def run(self, stop: threading.Event, on_tick: Callable[[], None] | None = None) -> None:
        interval = self.cfg.interval
        self.log.info("guardian %s on %s: interval %.2fs, state in %s", __version__, self.node,
                      interval, self.cfg.state_dir)
        try:
            while not stop.is_set():
                t0 = self.clock.monotonic()
                try:
                    self.tick()
                except Exception:  # the loop survives its own bugs; they are logged loudly
                    self.log.exception("tick failed")
                if on_tick:
                    on_tick()
                self.clock.sleep(max(0.0, interval - (self.clock.monotonic() - t0)))
        finally:
            self.runner.shutdown()
            for probe in self.probes:
                probe.close()

    @staticmethod
    def self_usage() -> tuple[float, int]:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024
