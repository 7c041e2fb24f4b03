"""The status of the guardian built from the daemon's state (a ``StatusSnapshot``), and the
human rendering of its JSON document (``guardian status``) as a table. Reads memory only
(and the maintenance file).
"""

from __future__ import annotations

import os
import resource
import time
from typing import TYPE_CHECKING, Any

from vllm_guardian import __version__
from vllm_guardian.detectors.output_corruption import health_score
from vllm_guardian.discovery.argv import NOT_VERIFIED
from vllm_guardian.remediation.policy import Maintenance, budget_left
from vllm_guardian.bundle.redact import redact_argv
from vllm_guardian.surface.readiness import readiness
from vllm_guardian.model import Incident, ProcessInfo, Subject
from vllm_guardian.diagnosis.node_view import render_table as render_accelerators
from vllm_guardian.diagnosis.node_view import with_faults
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
)

if TYPE_CHECKING:
    from vllm_guardian.loop.daemon import Daemon
    from vllm_guardian.probes.procfs import ProcessState
    from vllm_guardian.state.tracker import TrackedTarget


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
    sequence = d.remediator.sequence_status().get(name)
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
        remediation=d.remediator.status().get(name),
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
        accelerators=tuple(accel.per_target.get(name, []) if accel is not None else ()),
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
        socket=tr.target.socket,
        port_verified=tr.target.port_verified,
        auto_remediation=_auto_remediation(d, tr),
    )


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
    faults = d.readings.device_faults.status(now) if d.readings.device_faults is not None else {}
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
        unmatched=tuple(d.targets.unmatched),
        incidents=tuple(open_incidents),
        actions={
            "outcomes": dict(d.remediator.action_counts),
            "restarts": {k: dict(v) for k, v in d.remediator.restart_counts.items()},
        },
        maintenance_until=Maintenance(d.cfg.state_dir).until(),
        extras={
            **{key: fn() for key, fn in d.status_extras.items()},
            **({"gates": d.readings.gates.summary()} if d.readings.gates is not None else {}),
            **({"device_faults": faults} if faults else {}),
        },
        errors=dict(d.episodes.current()),
        accelerators=tuple(with_faults(d.readings.accel.node if d.readings.accel is not None else [], faults)),
        capabilities_missing=d.capabilities.missing(),
    )


def _fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024 or unit == "GiB":
            return f"{x:.0f}{unit}" if unit == "B" else f"{x:.1f}{unit}"
        x /= 1024
    return str(x)


def _gates_lines(g: dict[str, Any] | None) -> list[str]:
    if not g:
        return []
    score = "-" if g["health_score"] is None else str(g["health_score"])
    age = "never" if g["last_round_age_s"] is None else f"{g['last_round_age_s']:.0f}s ago"
    out = [
        f"  gates: health {score}/100, last round {age}, baseline {g['baseline']}, "
        f"L4 {g['agreement'] or '-'}, {g['reports']} report(s)"
    ]
    out += [
        f"  gate failure {f['level']} {f['check']}: {f['prompt'][:30]!r} -> {f['output'][:40]!r}"
        for f in g["failures"][:3]
    ]
    out += [f"  gate note: {n}" for n in g["notes"]]
    return out


def render_status(doc: dict[str, Any]) -> str:
    """The table a person reads at a glance."""
    g = doc["guardian"]
    lines = [
        f"guardian {doc['version']} on {doc['node']} — up {doc['uptime_s']:.0f}s, "
        f"{g['ticks']} ticks, last tick {1000 * (g['last_tick_s'] or 0):.1f} ms, "
        f"guardian CPU {g['cpu_seconds']:.1f}s"
    ]
    until = doc.get("maintenance_until")
    if isinstance(until, (int, float)) and until > time.time():
        lines.append(
            f"MAINTENANCE until {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(until))}: "
            "no automatic remediation (detection and alerts go on; `guardian maintenance off` ends it)"
        )
    if not doc["targets"]:
        lines.append("no vLLM targets found")
    for u in doc.get("unmatched", []):
        lines.append(f"configured target {u['target']} not found: {u['reason']}")
    for t in doc["targets"]:
        eng = t["engine"]
        canary = t["canary"]
        c = (
            "-"
            if canary is None
            else (
                "ok %.0fms" % (1000 * canary["latency_s"])
                if canary["ok"]
                else ("TIMEOUT" if canary["timed_out"] else "failed")
            )
        )
        lines.append("")
        lines.append(
            f"TARGET {t['name']}  [{t['phase'].upper()}]  pid {t['pid']}  {t['api_url'] or ''}"
            f"  model {t['model'] or '?'}"
        )
        lines.append(
            f"  engine: running {eng['requests_running']}, waiting {eng['requests_waiting']}, "
            f"kv {_fmt_pct(eng['kv_cache_usage'])}, steps/s {eng['steps_per_s']}, canary {c}"
        )
        lines.append(f"  {'PID':>8} {'ROLE':<12} {'STATE':<5} {'CPU':>5} {'RSS':>9}  HOTTEST THREAD")
        for p in t["processes"]:
            h = p["hottest_thread"]
            hot = (
                "-"
                if h is None
                else (
                    f"{h['tid']} {h['comm']} {_fmt_pct(h['cpu_ratio'])} "
                    f"vol/s {h['voluntary_per_s']} {h['syscall'] or ''}"
                )
            )
            lines.append(
                f"  {p['pid']:>8} {p['role']:<12} {p['state'] or '?':<5} "
                f"{_fmt_pct(p['cpu_ratio']):>5} {_fmt_bytes(p['rss_bytes']):>9}  {hot}"
            )
        mem = t.get("memory") or {}
        for label, key in (("accelerator memory", "accelerator"), ("RSS (tree)", "rss")):
            tr_ = mem.get(key)
            if tr_:
                slope = tr_["slope_bytes_per_s"]
                trend = "-" if slope is None else f"{slope / 1e6:+.2f} MB/s over {tr_['window_s']:.0f}s"
                lines.append(f"  {label}: {_fmt_bytes(tr_['bytes'])}, trend {trend}")
        for dev in t.get("accelerators") or []:
            lines.append(
                f"  device {dev.get('device')}: {_fmt_bytes(dev.get('memory_used_bytes'))} of "
                f"{_fmt_bytes(dev.get('memory_total_bytes'))}, util {_fmt_pct(dev.get('utilization_ratio'))}"
            )
        if not t.get("port_verified", True):
            lines.append(f"  port {t['port']} not verified: {NOT_VERIFIED.split(': ', 1)[1]}")
        auto = t.get("auto_remediation")
        if auto and auto != "on":
            lines.append(f"  remediation: {auto}; detection and alerts go on")
        rem = t.get("remediation")
        if rem:
            lines.append(f"  remediation: {rem['phase']} ({rem['reason']}, mode {rem['mode']}): {rem['detail']}")
        if t.get("decision"):
            lines.append(f"  decision: {t['decision']}")
        lines.append(f"  serving: {'yes' if t['serving'] else 'NO'}, restart budget left: {t['budget_left']}")
        lines.extend(_gates_lines(t.get("gates")))
        for kind, summary in t["suspects"].items():
            lines.append(f"  suspect {kind}: {summary}")
        for key, msg in t["errors"].items():
            lines.append(f"  error {key}: {msg}")
    gates = doc.get("gates")
    if isinstance(gates, dict) and isinstance(gates.get("reports"), dict):
        dropped = sum(int(n) for n in (gates.get("reports_dropped") or {}).values() if isinstance(n, int))
        trust = "signed" if gates.get("trust") == "signed" else "no trust key: reports and peers alert, never restart"
        lines.append("")
        lines.append(
            f"gate reports: {gates['reports'].get('accepted', 0)} accepted, {dropped} dropped (trust: {trust})"
        )
    lines.append("")
    lines.append(render_accelerators(doc.get("accelerators") or []).rstrip("\n"))
    if doc["incidents"]:
        lines.append("")
        lines.append("OPEN INCIDENTS")
        for i in doc["incidents"]:
            opened = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(i["opened_at"]))
            lines.append(f"  {i['id']}  {i['kind']:<14} {i['target']['name']:<14} since {opened}  {i['summary']}")
    missing = (doc.get("capabilities") or {}).get("missing") or []
    if missing:
        lines.append("")
        lines.append("CAPABILITIES MISSING")
        lines.extend(f"  {c['capability']}: {c['why']}; {c['consequence']}" for c in missing)
    node_errors = {k: v for k, v in doc["errors"].items() if ":" not in k or k.startswith(("procfs", "sink"))}
    for key, msg in node_errors.items():
        lines.append(f"error {key}: {msg}")
    return "\n".join(lines)
