"""The status document (SPEC §9 `guardian status --json`) built from the daemon's state,
and its human rendering as a table. Reads memory only; no I/O.
"""
from __future__ import annotations

import resource
import time
from typing import Any

from . import __version__
from .actions.redact import redact_argv
from .incidents import incident_to_dict
from .policy import Maintenance, budget_left
from .model import Subject
from .series.slope import theil_sen
from .series import metrics as m


def self_usage() -> tuple[float, int]:
    """CPU seconds (user + system) and peak RSS bytes of the guardian process."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def _progress_rate(series, name: str, now: float, window: float = 10.0) -> float | None:
    pts = series.window(name, "", m.ITERATIONS, now - window)
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return max(0.0, pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def _trend(series, name: str, subjects: list[str], metric: str, now: float, window: float) -> dict | None:
    """The current level and Theil–Sen slope (bytes/s) of a memory series summed over subjects."""
    totals: dict[float, float] = {}
    for subject in subjects:
        for t, v in series.window(name, subject, metric, now - window):
            totals[round(t, 1)] = totals.get(round(t, 1), 0.0) + v
    pts = sorted(totals.items())
    fit = theil_sen(pts) if len(pts) >= 2 else None
    if not pts:
        return None
    return {"bytes": int(pts[-1][1]), "slope_bytes_per_s": None if fit is None else round(fit.slope, 1),
            "window_s": window}


def _phase(tr, open_kinds: list[str], remediation: str) -> str:
    if remediation != "serving":
        return remediation  # draining / stopping / starting / verifying
    if not tr.api_alive:
        return "gone"
    if open_kinds:
        return "incident"
    return "serving" if tr.ready else "warming"


def build_status(d, now: float) -> dict[str, Any]:
    cpu_s, rss = self_usage()
    open_incidents = d.incidents.open_incidents()
    targets = []
    for name, tr in sorted(d.tracker.targets.items()):
        kinds = [i.kind.value for i in open_incidents if i.target.name == name]
        procs = []
        for p in tr.target.processes:
            ps = d.readings.processes.get(p.key)
            hot = ps.hottest if ps is not None else None
            procs.append({
                "pid": p.pid, "starttime": p.key.starttime, "role": p.role.value,
                "cmdline": " ".join(redact_argv(p.cmdline))[:200],  # never a --api-key value
                "state": getattr(ps, "state", None),
                "cpu_ratio": _r(getattr(ps, "cpu_ratio", None)),
                "rss_bytes": getattr(ps, "rss_bytes", None),
                "threads": getattr(ps, "num_threads", None),
                "hottest_thread": None if hot is None else {
                    "tid": hot.tid, "comm": hot.comm, "cpu_ratio": _r(hot.cpu_ratio),
                    "voluntary_per_s": _r(hot.voluntary_per_s, 1),
                    "involuntary_per_s": _r(hot.involuntary_per_s, 1),
                    "cpu_demand": _r(hot.cpu_demand), "syscall": hot.syscall, "wchan": hot.wchan,
                },
            })
        latest = lambda metric: d.series.latest(name, "", metric)  # noqa: E731
        health = tr.last_scrape
        canary = tr.last_canary
        suspects = {k.value: f.summary for k, f in d.findings.get(name, {}).items()
                    if f is not None and not f.confirmed}
        targets.append({
            "name": name,
            "source": tr.target.source,
            "pid": tr.target.key.pid,
            "starttime": tr.target.key.starttime,
            "port": tr.target.port,
            "api_url": tr.target.api_url,
            "model": tr.model,
            "phase": _phase(tr, kinds, d.remediator.phase(name)),
            "serving": d.remediator.serving(name) and tr.api_alive and tr.ready,
            "remediation": d.remediator.status().get(name),
            "decision": d.responder.decisions.get(name),
            "budget_left": budget_left(d.cfg.policy, d.ledger, name, d.clock.wall()),
            "ready": tr.ready,
            "health": None if health is None else {
                "status": health.health_status, "error": health.health_error,
                "latency_s": _r((latest(m.HEALTH_LATENCY) or (0, None))[1], 4),
            },
            "engine": {
                "requests_running": (latest(m.REQ_RUNNING) or (0, None))[1],
                "requests_waiting": (latest(m.REQ_WAITING) or (0, None))[1],
                "kv_cache_usage": _r((latest(m.KV_USAGE) or (0, None))[1]),
                "steps_per_s": _r(_progress_rate(d.series, name, now), 2),
            },
            "canary": None if canary is None else {
                "ok": canary.ok, "timed_out": canary.timed_out, "latency_s": _r(canary.latency, 4),
                "error": canary.error, "age_s": _r(now - canary.ended, 1),
            },
            "processes": procs,
            "accelerators": (d.readings.accel.per_target.get(name, []) if d.readings.accel is not None else []),
            "memory": {
                "accelerator": _trend(d.series, name, [""], m.ACCEL_MEM, now, d.cfg.detectors.accel_memory_leak.window),
                "rss": _trend(d.series, name, [Subject(p.pid).key for p in tr.target.processes], m.PROC_RSS, now,
                              d.cfg.detectors.host_memory_leak.window),
            },
            "suspects": suspects,
            "incidents": kinds,
            "errors": d.episodes.current(f"{name}:"),
        })
    probes = {name: {"runs": s.runs, "failures": s.failures, "overruns": s.overruns,
                     "last_duration_s": _r(s.last_duration_s, 5),
                     "mean_duration_s": _r(s.total_duration_s / s.runs if s.runs else 0.0, 5)}
              for name, s in d.stats.probes.items()}
    return {
        "schema": 1,
        "node": d.node,
        "version": __version__,
        "time": d.clock.wall(),
        "uptime_s": _r(now - d.started_mono, 1),
        "guardian": {
            "pid": __import__("os").getpid(),
            "ticks": d.stats.ticks,
            "last_tick_s": _r(d.stats.last_tick_s, 5),
            "max_tick_s": _r(d.stats.max_tick_s, 5),
            "cpu_seconds": _r(cpu_s, 2),
            "max_rss_bytes": rss,
        },
        "probes": probes,
        "targets": targets,
        "unmatched": [{"target": n, "reason": r} for n, r in d.targets.unmatched],
        "incidents": [incident_to_dict(i) for i in open_incidents],
        "actions": {"outcomes": dict(d.remediator.action_counts),
                    "restarts": {k: dict(v) for k, v in d.remediator.restart_counts.items()}},
        "maintenance_until": Maintenance(d.cfg.state_dir).until(),
        **{key: fn() for key, fn in d.status_extras.items()},
        "errors": {k: v for k, v in d.episodes.current().items()},
    }


def _fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _fmt_bytes(x: int | None) -> str:
    if x is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024 or unit == "GiB":
            return f"{x:.0f}{unit}" if unit == "B" else f"{x:.1f}{unit}"
        x /= 1024
    return str(x)


def render_status(doc: dict[str, Any]) -> str:
    """The table a person reads at a glance."""
    g = doc["guardian"]
    lines = [f"guardian {doc['version']} on {doc['node']} — up {doc['uptime_s']:.0f}s, "
             f"{g['ticks']} ticks, last tick {1000 * (g['last_tick_s'] or 0):.1f} ms, "
             f"guardian CPU {g['cpu_seconds']:.1f}s"]
    if not doc["targets"]:
        lines.append("no vLLM targets found")
    for u in doc.get("unmatched", []):
        lines.append(f"configured target {u['target']} not found: {u['reason']}")
    for t in doc["targets"]:
        eng = t["engine"]
        canary = t["canary"]
        c = "-" if canary is None else ("ok %.0fms" % (1000 * canary["latency_s"]) if canary["ok"]
                                        else ("TIMEOUT" if canary["timed_out"] else "failed"))
        lines.append("")
        lines.append(f"TARGET {t['name']}  [{t['phase'].upper()}]  pid {t['pid']}  {t['api_url'] or ''}"
                     f"  model {t['model'] or '?'}")
        lines.append(f"  engine: running {eng['requests_running']}, waiting {eng['requests_waiting']}, "
                     f"kv {_fmt_pct(eng['kv_cache_usage'])}, steps/s {eng['steps_per_s']}, canary {c}")
        lines.append(f"  {'PID':>8} {'ROLE':<12} {'STATE':<5} {'CPU':>5} {'RSS':>9}  HOTTEST THREAD")
        for p in t["processes"]:
            h = p["hottest_thread"]
            hot = "-" if h is None else (f"{h['tid']} {h['comm']} {_fmt_pct(h['cpu_ratio'])} "
                                         f"vol/s {h['voluntary_per_s']} {h['syscall'] or ''}")
            lines.append(f"  {p['pid']:>8} {p['role']:<12} {p['state'] or '?':<5} "
                         f"{_fmt_pct(p['cpu_ratio']):>5} {_fmt_bytes(p['rss_bytes']):>9}  {hot}")
        mem = t.get("memory") or {}
        for label, key in (("accelerator memory", "accelerator"), ("RSS (tree)", "rss")):
            tr_ = mem.get(key)
            if tr_:
                slope = tr_["slope_bytes_per_s"]
                trend = "-" if slope is None else f"{slope / 1e6:+.2f} MB/s over {tr_['window_s']:.0f}s"
                lines.append(f"  {label}: {_fmt_bytes(tr_['bytes'])}, trend {trend}")
        for dev in t.get("accelerators") or []:
            lines.append(f"  device {dev.get('device')}: {_fmt_bytes(dev.get('memory_used_bytes'))} of "
                         f"{_fmt_bytes(dev.get('memory_total_bytes'))}, util {_fmt_pct(dev.get('utilization_ratio'))}")
        rem = t.get("remediation")
        if rem:
            lines.append(f"  remediation: {rem['phase']} ({rem['reason']}, mode {rem['mode']}): {rem['detail']}")
        if t.get("decision"):
            lines.append(f"  decision: {t['decision']}")
        lines.append(f"  serving: {'yes' if t['serving'] else 'NO'}, restart budget left: {t['budget_left']}")
        for kind, summary in t["suspects"].items():
            lines.append(f"  suspect {kind}: {summary}")
        for key, msg in t["errors"].items():
            lines.append(f"  error {key}: {msg}")
    if doc["incidents"]:
        lines.append("")
        lines.append("OPEN INCIDENTS")
        for i in doc["incidents"]:
            opened = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(i["opened_at"]))
            lines.append(f"  {i['id']}  {i['kind']:<14} {i['target']['name']:<14} since {opened}  {i['summary']}")
    node_errors = {k: v for k, v in doc["errors"].items() if ":" not in k or k.startswith(("procfs", "sink"))}
    for key, msg in node_errors.items():
        lines.append(f"error {key}: {msg}")
    return "\n".join(lines)

