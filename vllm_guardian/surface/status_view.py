"""The status of the guardian composed from its parts (a ``StatusSnapshot``). Reads memory only
(and the maintenance file).

Each part contributes its own typed section: the remediator (``status_section``,
``actions_section``), the gates (``status_of``, ``summary``), the accelerator readings
(``target_section``, the node table of ``diagnosis.node_view``), the fault ledger
(``status_section``) and the parts wired around the daemon (``StatusSources``: the alert sink,
the config reloads, the API keys, the Kubernetes publisher). The table a person reads is
``status_render.render_status``.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from vllm_guardian import __version__
from vllm_guardian.detectors.output_corruption import health_score
from vllm_guardian.remediation.policy import Maintenance, budget_left
from vllm_guardian.bundle.redact import redact_argv
from vllm_guardian.surface.readiness import readiness
from vllm_guardian.model import Incident, ProcessInfo, Subject
from vllm_guardian.config.status import ConfigStatus
from vllm_guardian.diagnosis.node_view import device_rows, with_faults
from vllm_guardian.sinks.redis_sink import AlertsStatus
from vllm_guardian.surface.kube_publisher import KubernetesStatus
from vllm_guardian.series import SeriesStore
from vllm_guardian.series import metrics as m
from vllm_guardian.series.slope import theil_sen
from vllm_guardian.surface.status_snapshot import (
    CanaryStatus,
    EngineStatus,
    GuardianSelf,
    HealthStatus,
    HottestThread,
    MemoryStatus,
    MemoryTrend,
    ProbeCounters,
    ProcessStatus,
    StatusSnapshot,
    TargetStatus,
    Unmatched,
)

if TYPE_CHECKING:
    from vllm_guardian.loop.daemon import Daemon
    from vllm_guardian.probes.procfs import ProcessState
    from vllm_guardian.state.tracker import TrackedTarget


T_co = TypeVar("T_co", covariant=True)


class Section(Protocol[T_co]):
    """A part that contributes a typed status section."""

    def status_section(self) -> T_co: ...


@dataclass(frozen=True)
class StatusSources:
    """The parts wired around the daemon that contribute a node section (None: not wired)."""

    alerts: Section[AlertsStatus] | None = None
    config: Section[ConfigStatus] | None = None
    api_keys: Section[Mapping[str, str]] | None = None
    kubernetes: Section[KubernetesStatus] | None = None


def self_usage() -> tuple[float, int]:
    """CPU seconds (user + system) and peak RSS bytes of the guardian process."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def _progress_rate(series: SeriesStore, name: str, now: float, window: float = 10.0) -> float | None:
    pts = series.window(name, "", m.ITERATIONS, now - window)
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return max(0.0, pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def _trend(
    series: SeriesStore, name: str, subjects: list[str], metric: str, now: float, window: float
) -> MemoryTrend | None:
    """The current level and Theil–Sen slope (bytes/s) of a memory series summed over subjects."""
    totals: dict[float, float] = {}
    for subject in subjects:
        for t, v in series.window(name, subject, metric, now - window):
            totals[round(t, 1)] = totals.get(round(t, 1), 0.0) + v
    pts = sorted(totals.items())
    fit = theil_sen(pts) if len(pts) >= 2 else None
    if not pts:
        return None
    return MemoryTrend(int(pts[-1][1]), None if fit is None else round(fit.slope, 1), window)


def _phase(tr: TrackedTarget, open_kinds: list[str], remediation: str) -> str:
    if remediation != "serving":
        return remediation  # draining / stopping / starting / verifying
    if not tr.api_alive:
        return "gone"
    if tr.hold is not None:
        return tr.hold  # paused / sleeping on purpose, as the server says (an incident shows beside it)
    if open_kinds:
        return "incident"
    return "serving" if tr.ready else "warming"


def _process(p: ProcessInfo, ps: ProcessState | None) -> ProcessStatus:
    hot = ps.hottest if ps is not None else None
    return ProcessStatus(
        p.pid,
        p.key.starttime,
        p.role.value,
        " ".join(redact_argv(p.cmdline))[:200],  # never an --api-key
        None if ps is None else ps.state,
        None if ps is None else _r(ps.cpu_ratio),
        None if ps is None else ps.rss_bytes,
        None if ps is None else ps.num_threads,
        None
        if hot is None
        else HottestThread(
            hot.tid,
            hot.comm,
            _r(hot.cpu_ratio),
            _r(hot.voluntary_per_s, 1),
            _r(hot.involuntary_per_s, 1),
            _r(hot.cpu_demand),
            hot.syscall,
            hot.wchan,
        ),
    )


def _target(d: Daemon, name: str, tr: TrackedTarget, open_incidents: list[Incident], now: float) -> TargetStatus:
    kinds = [i.kind.value for i in open_incidents if i.target.name == name]

    def latest(metric: str) -> float | None:
        point = d.series.latest(name, "", metric)
        return None if point is None else point[1]

    scrape, canary, accel = tr.last_scrape, tr.last_canary, d.readings.accel
    sequence = d.remediator.status_section(name)
    verdict = readiness(
        name,
        phase=d.remediator.phase(name),
        remediator_serving=d.remediator.serving(name),
        api_alive=tr.api_alive,
        ready=tr.ready,
        takes_out=d.responder.out_of_service.get(name),
        incident_id=None if sequence is None else sequence.incident,
        hold=tr.hold,
    )
    return TargetStatus(
        name=name,
        source=tr.target.source,
        pid=tr.target.key.pid,
        starttime=tr.target.key.starttime,
        port=tr.target.port,
        api_url=tr.target.api_url,
        model=tr.model,
        phase=_phase(tr, kinds, d.remediator.phase(name)),
        serving=verdict.serving,
        serving_reason=verdict.reason,
        serving_message=verdict.message,
        remediation=sequence,
        decision=d.responder.decisions.get(name),
        budget_left=budget_left(d.cfg.policy, d.ledger, name, d.clock.wall()),
        ready=tr.ready,
        health=None
        if scrape is None
        else HealthStatus(scrape.health_status, scrape.health_error, _r(latest(m.HEALTH_LATENCY), 4)),
        engine=EngineStatus(
            latest(m.REQ_RUNNING),
            latest(m.REQ_WAITING),
            _r(latest(m.KV_USAGE)),
            _r(_progress_rate(d.series, name, now), 2),
        ),
        canary=None
        if canary is None
        else CanaryStatus(canary.ok, canary.timed_out, _r(canary.latency, 4), canary.error, _r(now - canary.ended, 1)),
        processes=tuple(_process(p, d.readings.processes.get(p.key)) for p in tr.target.processes),
        accelerators=accel.target_section(name) if accel is not None else (),
        memory=MemoryStatus(
            _trend(d.series, name, [""], m.ACCEL_MEM, now, d.cfg.detectors.accel_memory_leak.window),
            _trend(
                d.series,
                name,
                [Subject(p.pid).key for p in tr.target.processes],
                m.PROC_RSS,
                now,
                d.cfg.detectors.host_memory_leak.window,
            ),
        ),
        suspects={k.value: f.summary for k, f in d.findings.get(name, {}).items() if f is not None and not f.confirmed},
        incidents=tuple(kinds),
        errors=d.episodes.current(f"{name}:"),
        gates=(
            d.readings.gates.status_of(name, now, d.cfg.detectors.output_corruption, health_score)
            if d.readings.gates is not None
            else None
        ),
    )


def build_status(d: Daemon, now: float) -> StatusSnapshot:
    cpu_s, rss = self_usage()
    open_incidents = d.incidents.open_incidents()
    probes = {
        name: ProbeCounters(
            s.runs,
            s.failures,
            s.overruns,
            _r(s.last_duration_s, 5),
            _r(s.total_duration_s / s.runs if s.runs else 0.0, 5),
        )
        for name, s in d.stats.probes.items()
    }
    ledger, gates, src = d.readings.device_faults, d.readings.gates, d.status_sources or StatusSources()
    faults = ledger.status_section(now) if ledger is not None else {}
    return StatusSnapshot(
        node=d.node,
        version=__version__,
        time=d.clock.wall(),
        uptime_s=_r(now - d.started_mono, 1),
        guardian=GuardianSelf(
            os.getpid(),
            d.stats.ticks,
            _r(d.stats.last_tick_s, 5),
            _r(d.stats.max_tick_s, 5),
            _r(cpu_s, 2),
            rss,
            d.stats.ticks_failed,
            _r(d.stats.tick_times.quantile(0.5), 5),
            _r(d.stats.tick_times.quantile(0.99), 5),
        ),
        probes=probes,
        targets=tuple(_target(d, name, tr, open_incidents, now) for name, tr in sorted(d.tracker.targets.items())),
        unmatched=tuple(Unmatched(n, r) for n, r in d.targets.unmatched),
        incidents=tuple(open_incidents),
        actions=d.remediator.actions_section(),
        maintenance_until=Maintenance(d.cfg.state_dir).until(),
        errors=dict(d.episodes.current()),
        accelerators=device_rows(
            with_faults(
                d.readings.accel.node if d.readings.accel is not None else [], {k: asdict(v) for k, v in faults.items()}
            )
        ),
        gates=gates.summary() if gates is not None else None,
        device_faults=faults or None,
        alerts=_section(src.alerts),
        config=_section(src.config),
        api_keys=_section(src.api_keys),
        kubernetes=_section(src.kubernetes),
    )


def _section(source: Section[T_co] | None) -> T_co | None:
    return None if source is None else source.status_section()
