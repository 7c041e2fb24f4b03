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
from dataclasses import dataclass, field
from typing import Callable, Iterable

from . import __version__
from .config_schema import Config
from .detectors import evaluate_all
from .detectors.probe_failure import evaluate_episodes
from .detectors.view import TargetView
from .discovery import DiscoveryCache, discover
from .episodes import EpisodeLog
from .incidents import IncidentManager, IncidentStore
from .model import Finding, Kind, ProcKey, TargetRef, Transition
from .probes.accel import AccelProbe, AccelResult, make_backends
from .probes.async_runner import AsyncRunner
from .probes.canary import CanaryResult, run_canary
from .probes.procfs import ProcfsProbe, ProcfsResult
from .probes.vllm_http import HttpScrape, scrape
from .series import SeriesStore
from .series import metrics as m
from .daemon_actions import ActionsMixin
from .tracker import Tracker
from .actions.evidence import EvidenceCollector
from .actions.remediation import Remediator
from .host.process_control import OsProcessControl
from .host.runner import SubprocessRunner
from .policy import RestartLedger

Sink = Callable[[Transition], None]


@dataclass
class ProbeStats:
    runs: int = 0
    failures: int = 0
    overruns: int = 0
    last_duration_s: float = 0.0
    total_duration_s: float = 0.0

    def record(self, seconds: float) -> None:
        self.runs += 1
        self.last_duration_s = seconds
        self.total_duration_s += seconds


@dataclass
class SelfStats:
    ticks: int = 0
    last_tick_s: float = 0.0
    max_tick_s: float = 0.0
    probes: dict[str, ProbeStats] = field(default_factory=lambda: {
        "discovery": ProbeStats(), "procfs": ProbeStats(), "vllm_http": ProbeStats(), "canary": ProbeStats(),
        "accel": ProbeStats()})
    incidents_opened: dict[str, int] = field(default_factory=dict)
    incidents_resolved: dict[str, int] = field(default_factory=dict)


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
        self.procfs_probe = ProcfsProbe(procfs, cfg.probes.procfs)
        if accel_backends is None:  # NVML/npu-smi are touched here, after construction, never at import
            accel_backends = make_backends(cfg.accelerators, cmd_runner or SubprocessRunner(), self.log)
        self.accel_probe = AccelProbe(list(accel_backends)) if accel_backends else None
        self.accel: AccelResult | None = None
        self.store = store
        self.incidents = IncidentManager(self.node, clock, store, cfg.detectors)
        self.stats = SelfStats()
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
        self.platform = None  # match.kubernetes / match.systemd_unit: pods and units -> processes
        if any(t.match.kubernetes is not None or t.match.systemd_unit is not None for t in cfg.targets):
            from .platform_match import PlatformMatcher
            from .discovery import is_api_server

            self.platform = PlatformMatcher(procfs, kube=kube, runner=cmd_runner or SubprocessRunner(),
                                            is_api_server=is_api_server)
        self.status_extras: dict[str, Callable[[], object]] = {}
        self.on_update: list[Callable[[object], None]] = []  # incident changed without a transition
        self.on_discovery: list[Callable[[tuple], None]] = []  # each pass's targets (e.g. API keys)
        self.findings: dict[str, dict[Kind, Finding | None]] = {}
        self.process_states: dict[ProcKey, object] = {}
        self.unmatched: tuple = ()
        self._next: dict[str, float] = {}
        self._suspected: set[str] = set()
        self._status: dict = {}
        self._status_tick = -1
        self._started_mono = clock.monotonic()
        self._started_wall = clock.wall()
        self._first_tick_done = threading.Event()
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
        if self._due("discovery", now, self.cfg.discovery.interval):
            self._discover(now)
        self._collect_async(now)
        if self._due("procfs", now, self.cfg.probes.procfs.interval):
            self._run_procfs(now)
        self._schedule_http(now)
        self._schedule_canaries(now)
        self._schedule_accel(now)
        transitions = self._detect(now)
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
        self._first_tick_done.set()  # the status document is built on demand, at most once per tick
        return transitions

    def _due(self, what: str, now: float, interval: float) -> bool:
        if now >= self._next.get(what, float("-inf")):
            self._next[what] = now + interval
            return True
        return False

    # ------------------------------------------------------------------ discovery
    def _discover(self, now: float) -> None:
        st = self.stats.probes["discovery"]
        t0 = time.perf_counter()
        try:
            self.discovery_cache.now = now
            result = discover(self.procfs, self.cfg, cache=self.discovery_cache, platform=self.platform)
        except Exception as e:  # a broken /proc must not kill the loop
            st.failures += 1
            self.episodes.fail("discovery", f"{type(e).__name__}: {e}", now)
            return
        finally:
            st.record(time.perf_counter() - t0)
        self.episodes.ok("discovery")
        self.unmatched = result.unmatched
        for hook in self.on_discovery:
            hook(result.targets)
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
    def _run_procfs(self, now: float) -> None:
        st = self.stats.probes["procfs"]
        t0 = time.perf_counter()
        try:
            res: ProcfsResult = self.procfs_probe.collect(self.tracker.live_targets(), self._suspected, now)
        except Exception as e:
            st.failures += 1
            self.episodes.fail("procfs", f"{type(e).__name__}: {e}", now)
            return
        finally:
            st.record(time.perf_counter() - t0)
            if st.last_duration_s > self.cfg.probes.procfs.deadline:
                st.overruns += 1
        self.episodes.ok("procfs")
        self.series.extend(res.samples)
        self.process_states = dict(res.processes)
        if res.denied:
            self.episodes.fail("procfs:access", f"{res.denied[0]} (and {len(res.denied) - 1} more)", now)
        else:
            self.episodes.ok("procfs:access")
        for name in self.tracker.mark_gone(res.gone, now):
            self.log.warning("target %s: API server process exited", name)

    def _schedule_http(self, now: float) -> None:
        cfg = self.cfg.probes.vllm_http
        for tr in self.tracker.targets.values():
            url = tr.target.api_url
            if not url or not tr.api_alive:
                continue
            key = ("http", tr.name)
            if self.runner.busy(key) or not self._due(f"http:{tr.name}", now, cfg.interval):
                continue
            name = tr.name
            self.runner.submit(key, lambda: scrape(self.http, name, url, cfg.timeout, self.clock.monotonic),
                               deadline=now + 2 * cfg.timeout + 1)

    def _schedule_canaries(self, now: float) -> None:
        cfg = self.cfg.probes.canary
        for tr in self.tracker.targets.values():
            if not tr.target.api_url or not tr.api_alive or self.runner.busy(("canary", tr.name)):
                continue
            last = tr.last_canary_start
            if tr.ready:
                due = last is None or now - last >= cfg.interval
            else:  # warming up: try to establish readiness once /health answers 200
                health = self.series.latest(tr.name, "", m.HEALTH_OK)
                due = bool(health and health[1] == 1.0) and (last is None or now - last >= 2.0)
            if due:
                self._start_canary(tr, now)

    def _start_canary(self, tr, now: float) -> None:
        name, url, model, key = tr.name, tr.target.api_url, tr.model, tr.target.key
        cfg = self.cfg.probes.canary

        def job() -> tuple[ProcKey, CanaryResult]:
            return key, run_canary(self.http, name, url, model, cfg, self.clock.monotonic)

        if self.runner.submit(("canary", name), job, deadline=now + 2 * cfg.timeout + 1):
            self.tracker.canary_started(name, now)

    def _collect_async(self, now: float) -> None:
        self._remediation_jobs = {}  # results of this tick only
        for done in self.runner.collect():
            kind, name = done.key
            if kind == "remediation":
                self._remediation_jobs[name] = done.error if done.error is not None else done.result
                continue
            if kind == "evidence":
                self._fold_evidence(name, done)
                continue
            if kind == "accel":
                self._fold_accel(done, now)
                continue
            st = self.stats.probes["vllm_http" if kind == "http" else "canary"]
            st.record(done.duration)
            if done.error is not None:  # a bug in a probe job: count it, keep going
                st.failures += 1
                self.episodes.fail(f"{name}:{kind}", f"probe crashed: {done.error!r}", now)
                continue
            if kind == "http":
                self._fold_scrape(done.result, now)
            else:
                key, result = done.result
                self._fold_canary(key, result, now)
        for kind, name in self.runner.overruns(now):
            if kind in ("http", "canary"):
                self.stats.probes["vllm_http" if kind == "http" else "canary"].overruns += 1

    def _schedule_accel(self, now: float) -> None:
        """NVML / npu-smi reads may block (npu-smi up to its timeout): one job at a time, off the loop;
        each backend reads at its own interval inside the probe."""
        if self.accel_probe is None or self.runner.busy(("accel", "*")):
            return
        probe, targets = self.accel_probe, self.tracker.live_targets()
        self.runner.submit(("accel", "*"), lambda: probe.collect(targets, self.clock.monotonic()),
                           deadline=now + 2 * self.cfg.accelerators.npu_smi_timeout + 2)

    def _fold_accel(self, done, now: float) -> None:
        st = self.stats.probes["accel"]
        st.record(done.duration)
        if done.error is not None:
            st.failures += 1
            self.episodes.fail("accel", f"probe crashed: {done.error!r}", now)
            return
        res: AccelResult = done.result
        self.series.extend(res.samples)
        for name, msg in res.errors.items():
            st.failures += 1
            self.episodes.fail(f"accel:{name}", msg, now)
        for name in res.read:
            if name not in res.errors:
                self.episodes.ok(f"accel:{name}")
        for ev in res.events:
            self.log.warning("accelerator event: %s", ev)
        if self.accel is not None and not res.read:
            return  # no backend was due: keep the latest full reading
        self.accel = res

    def _fold_scrape(self, res: HttpScrape, now: float) -> None:
        tr = self.tracker.targets.get(res.target)
        if tr is None:
            return
        self.series.extend(res.samples)
        tr.last["scrape"] = res
        st = self.stats.probes["vllm_http"]
        if res.health_error:
            if tr.ever_ready or tr.ready:  # refused while warming up is normal, not an error
                st.failures += 1
                self.episodes.fail(f"{res.target}:health", res.health_error, now)
        else:
            self.episodes.ok(f"{res.target}:health")
        if res.metrics_error and not (res.health_error or "").startswith("refused"):
            st.failures += 1
            self.episodes.fail(f"{res.target}:metrics", res.metrics_error, now)
        elif not res.metrics_error:
            self.episodes.ok(f"{res.target}:metrics")

    def _fold_canary(self, key: ProcKey, res: CanaryResult, now: float) -> None:
        tr = self.tracker.targets.get(res.target)
        if tr is None:
            return
        self.series.extend(res.samples())
        tr.last["canary"] = res
        was_ready = tr.ready
        self.tracker.canary_finished(res.target, key, res.ok, res.model, now)
        if tr.ready and not was_ready:
            self.log.info("target %s is ready (canary answered in %.3fs)", res.target, res.latency)
        if res.auth_status is not None:  # loud whatever the readiness: no canary can confirm a hang
            self.stats.probes["canary"].failures += 1
            self.episodes.fail(f"{res.target}:auth", res.error or f"HTTP {res.auth_status}", now)
            return
        self.episodes.ok(f"{res.target}:auth")
        if res.ok:
            self.episodes.ok(f"{res.target}:canary")
        elif tr.ready or tr.ever_ready:
            self.stats.probes["canary"].failures += 1
            self.episodes.fail(f"{res.target}:canary", res.error or "failed", now)

    # ------------------------------------------------------------------ detection
    def _detect(self, now: float) -> list[Transition]:
        transitions: list[Transition] = []
        suspected: set[str] = set()
        interval = self.cfg.probes.procfs.interval
        for name, tr in list(self.tracker.targets.items()):
            if self.remediator.suppress_detection(name):
                continue  # the guardian is taking it down itself: its death is not news
            view = TargetView(self.tracker.state(name, now, interval), self.series)
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
            unconfirmed = [f for f in findings.values() if f is not None and not f.confirmed]
            if unconfirmed or any(f is not None for f in findings.values()):
                suspected.add(name)
            if unconfirmed and tr.ready and tr.api_alive and not self.runner.busy(("canary", name)):
                # a hung engine queues every canary it is sent: once the incident is open, its
                # re-confirmation runs at the periodic pace, not the quick confirmation pace
                already_open = {i.kind for i in self.incidents.open_incidents() if i.target.name == name}
                pace = (self.cfg.probes.canary.interval if any(f.kind in already_open for f in unconfirmed)
                        else self.cfg.probes.canary.confirm_cooldown)
                last = tr.last_canary_start
                if last is None or now - last >= pace:
                    self._start_canary(tr, now)
        for inc in self.incidents.open_incidents():
            suspected.add(inc.target.name)
        self._suspected = suspected
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

    def wait_first_tick(self, timeout: float) -> bool:
        return self._first_tick_done.wait(timeout)

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
            if self.accel_probe is not None:
                self.accel_probe.close()

    @staticmethod
    def self_usage() -> tuple[float, int]:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024
