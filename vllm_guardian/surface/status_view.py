"""The status of the guardian composed from its parts (a ``StatusSnapshot``). Reads memory only
(and the maintenance file).

Each part contributes its own typed section: the loop's counters (``SelfStats.section``,
``probes_section``), the tracked target (``health_section``, ``canary_section``), the series
(``series.status``: engine, memory), the remediator (``status_section``, ``actions_section``), the
gates (``status_of``, ``summary``), the accelerator readings (``target_section``, the node table
of ``diagnosis.node_view``), the fault ledger (``status_section``) and the parts wired around the
daemon (``StatusSources``: the alert sink, the config reloads, the API keys, the Kubernetes
publisher, the HTTP listener's counters, the trust keys and the control channel), the procfs
readings (``process_section``), the files refused on a server's behalf
(``ServerFiles.status_section``). What is left here is the target's phase and readiness verdict.
The table a person reads is ``status_render.render_status``.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from vllm_guardian import __version__
from vllm_guardian.detectors.output_corruption import health_score
from vllm_guardian.policy.workaround import Applied, WorkaroundState
from vllm_guardian.remediation.policy import Maintenance, budget_left
from vllm_guardian.surface.readiness import readiness
from vllm_guardian.model import Incident, Subject
from vllm_guardian.config.status import ConfigStatus
from vllm_guardian.diagnosis.node_view import device_rows, with_faults
from vllm_guardian.gates.status import TrustStatus
from vllm_guardian.sinks.alertmanager_sink import AlertmanagerStatus
from vllm_guardian.sinks.redis_sink import AlertsStatus
from vllm_guardian.surface.http_stats import HttpStatus
from vllm_guardian.surface.connection_slots import ConnectionCounts
from vllm_guardian.surface.kube_status import KubernetesStatus
from vllm_guardian.series import metrics as m
from vllm_guardian.vllm_versions import RECOVERING, RETIRED
from vllm_guardian.state.vllm_states import serves_grpc, status_of
from vllm_guardian.probes.procfs_status import process_section
from vllm_guardian.series.status import engine_section, latest, memory_section
from vllm_guardian.groups.orphans import OrphansStatus
from vllm_guardian.surface.status_snapshot import (
    CapabilitiesStatus,
    StatusSnapshot,
    TargetStatus,
    Unmatched,
    WorkaroundStatus,
)

if TYPE_CHECKING:
    from vllm_guardian.loop.daemon import Daemon
    from vllm_guardian.state.tracker import TrackedTarget


T_co = TypeVar("T_co", covariant=True)


class Section(Protocol[T_co]):
    """A part that contributes a typed status section."""

    def status_section(self) -> T_co: ...


@dataclass(frozen=True)
class StatusSources:
    """The parts wired around the daemon that contribute a node section (None: not wired)."""

    alerts: Section[AlertsStatus] | None = None
    alertmanager: Section[AlertmanagerStatus] | None = None
    config: Section[ConfigStatus] | None = None
    api_keys: Section[Mapping[str, str]] | None = None
    kubernetes: Section[KubernetesStatus] | None = None
    http: Section[HttpStatus] | None = None
    trust: Section[TrustStatus] | None = None
    control_socket: Section[ConnectionCounts] | None = None
    http_listener: Section[ConnectionCounts] | None = None


def self_usage() -> tuple[float, int]:
    """CPU seconds (user + system) and peak RSS bytes of the guardian process."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def _phase(tr: TrackedTarget, open_kinds: list[str], remediation: str, now: float, grace: float) -> str:
    if remediation != "serving":
        return remediation  # draining / stopping / starting / verifying
    if not tr.api_alive:
        return "gone"
    vllm = tr.vllm.phase(now, grace) if tr.vllm is not None else None
    if vllm == RETIRED:
        return vllm  # an elastic-EP rank retired on purpose: judged no more
    if tr.hold is not None:
        return tr.hold  # paused / sleeping / checkpointing on purpose, as the server says (an incident beside it)
    if vllm is not None:
        return vllm  # recovering (vLLM's own fault-tolerance round), checkpoint_failed
    if open_kinds:
        return "incident"
    return "serving" if tr.ready else "warming"


def _out_on_purpose(tr: TrackedTarget, now: float, grace: float) -> str | None:
    """``retired`` / ``recovering``: out of rotation by vLLM's own doing (readiness says so)."""
    phase = tr.vllm.phase(now, grace) if tr.vllm is not None else None
    return phase if phase in (RETIRED, RECOVERING) else None


def _target(
    d: Daemon,
    name: str,
    tr: TrackedTarget,
    open_incidents: list[Incident],
    now: float,
    workarounds: Mapping[str, Applied],
) -> TargetStatus:
    kinds = [i.kind.value for i in open_incidents if i.target.name == name]
    sequence, phase = d.remediator.status_section(name), d.remediator.phase(name)
    verdict = readiness(
        name,
        phase=phase,
        remediator_serving=d.remediator.serving(name),
        api_alive=tr.api_alive,
        ready=tr.ready,
        takes_out=d.responder.out_of_service.get(name),
        incident_id=None if sequence is None else sequence.incident,
        hold=tr.hold or _out_on_purpose(tr, now, d.cfg.lifecycle.recovery_grace),
    )
    accel, gates, det = d.readings.accel, d.readings.gates, d.cfg.detectors
    return TargetStatus(
        name=name,
        source=tr.target.source,
        namespace=tr.target.namespace,
        pod=tr.target.pod,
        pid=tr.target.key.pid,
        starttime=tr.target.key.starttime,
        port=tr.target.port,
        api_url=tr.target.api_url,
        model=tr.model,
        phase=_phase(tr, kinds, phase, now, d.cfg.lifecycle.recovery_grace),
        serving=verdict.serving,
        serving_reason=verdict.reason,
        serving_message=verdict.message,
        remediation=sequence,
        decision=d.responder.decisions.get(name),
        budget_left=budget_left(d.remediator.target_policy(name).policy, d.ledger, name, d.clock.wall()),
        ready=tr.ready,
        health=tr.health_section(latest(d.series, name, m.HEALTH_LATENCY)),
        engine=engine_section(d.series, name, now),
        canary=tr.canary_section(now),
        processes=tuple(process_section(p, d.readings.processes.get(p.key)) for p in tr.target.processes),
        accelerators=accel.target_section(name) if accel is not None else (),
        memory=memory_section(
            d.series,
            name,
            [Subject(p.pid).key for p in tr.target.processes],
            now,
            det.accel_memory_leak.window,
            det.host_memory_leak.window,
        ),
        suspects={k.value: f.summary for k, f in d.findings.get(name, {}).items() if f is not None and not f.confirmed},
        incidents=tuple(kinds),
        errors=d.episodes.current(f"{name}:"),
        gates=gates.status_of(name, now, det.output_corruption, health_score) if gates is not None else None,
        socket=tr.target.socket,
        port_verified=tr.target.port_verified,
        other_listeners=tr.target.other_listeners,
        auto_remediation=_auto_remediation(d, tr),
        metrics_dropped=_dropped(tr, d.series.refused(name)),
        vllm=status_of(tr.vllm, now, d.cfg.lifecycle.recovery_grace, grpc=serves_grpc(tr.target)),
        profile=d.remediator.target_policy(name).profile.name,
        workaround=_workaround(workarounds.get(name)),
    )


def _workaround(a: Applied | None) -> WorkaroundStatus | None:
    if a is None:
        return None
    return WorkaroundStatus(a.signature, a.incident, a.workaround.args, dict(a.workaround.env), a.at)


def _dropped(tr: TrackedTarget, series_refused: int) -> dict[str, int]:
    """What the guardian dropped of the target's input, by reason (none: empty)."""
    out = {reason: n for reason, n in sorted(tr.metrics_dropped.items()) if n}
    if series_refused:
        out["series"] = series_refused
    return out


def _auto_remediation(d: Daemon, tr: TrackedTarget) -> str:
    """Whether an incident of this target may restart it: "on", or "off (why)". Detection and
    alerts go on either way (maintenance stops remediation only, never hides a hang)."""
    if d.remediator.maintenance.active(d.clock.wall()):
        return "off (maintenance)"
    if not d.remediator.settings.configured(tr.name):
        return "off (autodiscovered: no restart configured)"
    if not tr.target.port_verified:
        return "off (port not verified)"
    if tr.name in d.remediator.exhausted:
        return "off (restart budget spent)"
    return "on"


def build_status(d: Daemon, now: float) -> StatusSnapshot:
    cpu_s, rss = self_usage()
    open_incidents = d.incidents.open_incidents()
    ledger, gates, accel, src = d.readings.device_faults, d.readings.gates, d.readings.accel, d.status_sources
    faults = ledger.status_section(now) if ledger is not None else {}
    src = src or StatusSources()
    workarounds = WorkaroundState(d.cfg.state_dir).load()
    return StatusSnapshot(
        node=d.node,
        version=__version__,
        time=d.clock.wall(),
        uptime_s=_r(now - d.started_mono, 1),
        guardian=d.stats.section(os.getpid(), cpu_s, rss),
        probes=d.stats.probes_section(),
        targets=tuple(
            _target(d, name, tr, open_incidents, now, workarounds) for name, tr in sorted(d.tracker.targets.items())
        ),
        unmatched=tuple(Unmatched(n, r) for n, r in d.targets.unmatched),
        incidents=tuple(open_incidents),
        actions=d.remediator.actions_section(),
        maintenance_until=Maintenance(d.cfg.state_dir).until(),
        errors=dict(d.episodes.current()),
        accelerators=device_rows(
            with_faults(accel.node if accel is not None else [], {k: asdict(v) for k, v in faults.items()})
        ),
        accelerators_refused=accel.refused if accel is not None else {},
        gates=gates.summary() if gates is not None else None,
        device_faults=faults or None,
        alerts=_section(src.alerts),
        alertmanager=_section(src.alertmanager),
        config=_section(src.config),
        api_keys=_section(src.api_keys),
        kubernetes=_section(src.kubernetes),
        http=_section(src.http),
        trust=_section(src.trust),
        listeners=_listeners(src),
        capabilities=CapabilitiesStatus(d.capabilities.missing()),
        server_files=d.seams.files.status_section(),
        groups=d.groups.status(d.tracker.targets) if d.groups is not None else (),
        orphans=d.orphans.status_section() if d.orphans is not None else OrphansStatus(),
    )


def _listeners(src: StatusSources) -> dict[str, ConnectionCounts] | None:
    named = (("socket", src.control_socket), ("http", src.http_listener))
    out = {name: part.status_section() for name, part in named if part is not None}
    return out or None


def _section(source: Section[T_co] | None) -> T_co | None:
    return None if source is None else source.status_section()
