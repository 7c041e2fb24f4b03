"""The table a person reads at a glance (``guardian status``, ``guardian probe``), from the typed
snapshot (the CLI reads the control socket's document back with ``StatusSnapshot.from_dict``)."""

from __future__ import annotations

import time

from vllm_guardian.diagnosis.node_view import render_table as render_accelerators
from vllm_guardian.discovery.argv import not_verified
from vllm_guardian.gates.status import GatesSummary, TargetGatesStatus, TrustStatus
from vllm_guardian.state.tracker import CanaryStatus
from vllm_guardian.state.vllm_states import VllmStatus
from vllm_guardian.probes.procfs_status import HottestThread
from vllm_guardian.surface.status_snapshot import StatusSnapshot, TargetStatus, WorkaroundStatus


def _fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _workaround_words(w: WorkaroundStatus) -> str:
    """``--flag value ENV=value (signature, since incident X)``."""
    parts = [*w.args, *(f"{k}={v}" for k, v in w.env.items())]
    return f"{' '.join(parts)} ({w.signature}, since incident {w.incident})"


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024 or unit == "GiB":
            return f"{x:.0f}{unit}" if unit == "B" else f"{x:.1f}{unit}"
        x /= 1024
    return str(x)


def _canary(c: CanaryStatus | None) -> str:
    if c is None:
        return "-"
    if c.ok:
        return "ok %.0fms" % (1000 * (c.latency_s or 0.0))
    return "TIMEOUT" if c.timed_out else "failed"


def _hot(h: HottestThread | None) -> str:
    if h is None:
        return "-"
    return f"{h.tid} {h.comm} {_fmt_pct(h.cpu_ratio)} vol/s {h.voluntary_per_s} {h.syscall or ''}"


def _gates_lines(g: TargetGatesStatus | None) -> list[str]:
    if g is None:
        return []
    score = "-" if g.health_score is None else str(g.health_score)
    age = "never" if g.last_round_age_s is None else f"{g.last_round_age_s:.0f}s ago"
    out = [
        f"  gates: health {score}/100, last round {age}, baseline {g.baseline}, "
        f"L4 {g.agreement or '-'}, {g.reports} report(s)"
    ]
    out += [f"  gate failure {f.level} {f.check}: {f.prompt[:30]!r} -> {f.output[:40]!r}" for f in g.failures[:3]]
    out += [f"  gate note: {n}" for n in g.notes]
    return out


def _vllm_lines(v: VllmStatus | None) -> list[str]:
    if v is None:
        return []
    head = f"  vLLM {v.version or '?'} (row {v.row})"
    states = [f"checkpoint {v.checkpoint}"] if v.checkpoint else []
    states += [f"engine {e} {s}" for e, s in v.engines.items() if s != "healthy"]
    states += [f"engine {e} in vLLM's own round {s:.0f}s" for e, s in v.recovering.items()]
    lines = [head + (f": {', '.join(states)}" if states else "")]
    if v.notice:
        lines.append(f"  notice: {v.notice}")
    if v.blind:
        lines.append(f"  sees: {', '.join(v.sees)}; cannot see: {', '.join(v.blind)}")
    return lines


def _target_lines(t: TargetStatus) -> list[str]:
    eng = t.engine
    lines = [
        "",
        f"TARGET {t.name}  [{t.phase.upper()}]  pid {t.pid}  {t.api_url or ''}  model {t.model or '?'}",
        f"  engine: running {eng.requests_running}, waiting {eng.requests_waiting}, "
        f"kv {_fmt_pct(eng.kv_cache_usage)}, steps/s {eng.steps_per_s}, canary {_canary(t.canary)}",
        f"  {'PID':>8} {'ROLE':<12} {'STATE':<5} {'CPU':>5} {'RSS':>9}  HOTTEST THREAD",
    ]
    for p in t.processes:
        lines.append(
            f"  {p.pid:>8} {p.role:<12} {p.state or '?':<5} "
            f"{_fmt_pct(p.cpu_ratio):>5} {_fmt_bytes(p.rss_bytes):>9}  {_hot(p.hottest_thread)}"
        )
    for label, trend in (("accelerator memory", t.memory.accelerator), ("RSS (tree)", t.memory.rss)):
        if trend is not None:
            slope = trend.slope_bytes_per_s
            words = "-" if slope is None else f"{slope / 1e6:+.2f} MB/s over {trend.window_s:.0f}s"
            lines.append(f"  {label}: {_fmt_bytes(trend.bytes)}, trend {words}")
    for dev in t.accelerators:
        lines.append(
            f"  device {dev.device}: {_fmt_bytes(dev.memory_used_bytes)} of "
            f"{_fmt_bytes(dev.memory_total_bytes)}, util {_fmt_pct(dev.utilization_ratio)}"
        )
    lines.extend(_vllm_lines(t.vllm))
    if not t.port_verified:
        lines.append(f"  port {t.port} not verified: {not_verified(t.socket).split(': ', 1)[1]}")
    if t.other_listeners:
        lines.append(f"  port {t.port}: {t.other_listeners} other socket(s) listen there, not serving {t.api_url}")
    if t.auto_remediation != "on":
        lines.append(f"  remediation: {t.auto_remediation}; detection and alerts go on")
    lines.append(f"  profile: {t.profile}")
    if t.workaround is not None:
        lines.append(f"  running with a workaround: {_workaround_words(t.workaround)}")
    rem = t.remediation
    if rem is not None:
        lines.append(f"  remediation: {rem.phase} ({rem.reason}, mode {rem.mode}): {rem.detail}")
    if t.decision:
        lines.append(f"  decision: {t.decision}")
    lines.append(f"  serving: {'yes' if t.serving else 'NO'}, restart budget left: {t.budget_left}")
    lines.extend(_gates_lines(t.gates))
    lines.extend(f"  suspect {kind}: {summary}" for kind, summary in t.suspects.items())
    lines.extend(f"  error {key}: {msg}" for key, msg in t.errors.items())
    return lines


def _reports_line(g: GatesSummary) -> str:
    dropped = sum(g.reports_dropped.values())
    trust = "signed" if g.trust == "signed" else "no trust key: reports and peers alert, never restart"
    return f"gate reports: {g.reports.get('accepted', 0)} accepted, {dropped} dropped (trust: {trust})"


def _trust_line(t: TrustStatus) -> str:
    """The key ids in force (never a secret) and what came in on the control channel."""
    keys = f"trust keys: {', '.join(t.kids)} ({t.source})" if t.kids else "trust keys: none"
    msgs = t.control_messages
    if msgs is None:
        return keys
    dropped = sum(n for o, n in msgs.items() if o not in ("accepted", "own"))
    return f"{keys}; control messages: {msgs.get('own', 0)} own, {msgs.get('accepted', 0)} accepted, {dropped} dropped"


def render_status(s: StatusSnapshot) -> str:
    """The table a person reads at a glance."""
    g = s.guardian
    lines = [
        f"guardian {s.version} on {s.node} — up {s.uptime_s or 0:.0f}s, "
        f"{g.ticks} ticks, last tick {1000 * (g.last_tick_s or 0):.1f} ms, "
        f"guardian CPU {g.cpu_seconds or 0:.1f}s"
    ]
    until = s.maintenance_until
    if until is not None and until > time.time():
        lines.append(
            f"MAINTENANCE until {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(until))}: "
            "no automatic remediation (detection and alerts go on; `guardian maintenance off` ends it)"
        )
    if not s.targets:
        lines.append("no vLLM targets found")
    lines.extend(f"configured target {u.target} not found: {u.reason}" for u in s.unmatched)
    for t in s.targets:
        lines.extend(_target_lines(t))
    if s.gates is not None or s.trust is not None:
        lines.append("")
    if s.gates is not None:
        lines.append(_reports_line(s.gates))
    if s.trust is not None:
        lines.append(_trust_line(s.trust))
    lines += ["", render_accelerators(s.accelerators).rstrip("\n")]
    refused = [f"{b} {r}: {n}" for b, rs in sorted(s.accelerators_refused.items()) for r, n in sorted(rs.items()) if n]
    if refused:
        lines.append(f"accelerator input refused (not acted on): {', '.join(refused)}")
    if s.incidents:
        lines += ["", "OPEN INCIDENTS"]
        for i in s.incidents:
            opened = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(i.opened_at))
            lines.append(f"  {i.id}  {i.kind.value:<14} {i.target.name:<14} since {opened}  {i.summary}")
    down = [i for i in s.alertmanager.instances if not i.up or i.spooled] if s.alertmanager is not None else []
    if down:
        lines += ["", "ALERTMANAGER NOT TAKING ALERTS (spooled, retried)"]
        lines.extend(f"  {i.url}: {i.spooled} spooled, {i.last_error or 'not reached yet'}" for i in down)
    for grp in s.groups:
        lead = grp.leader_node or "unknown"
        lines += [
            "",
            f"GROUP {grp.group} ({grp.kind}, size {grp.size or '?'}, leader on {lead}; here: {', '.join(grp.targets)})",
        ]
        for r in grp.ranks:
            inc = f"  incident {r.incident}" if r.incident else ""
            lines.append(
                f"  rank {r.rank:<3} {r.node:<16} pid {r.pid:<8} {r.health}{' (leader)' if r.leader else ''}{inc}"
            )
        lines.extend(f"  {what}" for what in (*grp.conflicts, *grp.rejected, *grp.problems))
    if s.orphans.found:
        lines += ["", "ORPHANS (VLLM:: processes with no live API server)"]
        for o in s.orphans.found:
            said = "stopped" if o.stopped else "provably ours" if o.provable else "title only: reported, never stopped"
            lines.append(f"  pid {o.pid:<8} {o.title:<24} {o.rss >> 20} MiB RSS  {said}")
    web = s.http.web_config if s.http is not None else None
    if web is not None and not web.last_reload_ok:
        lines += ["", f"WEB CONFIG RELOAD REFUSED ({web.file}), the running one is kept: {web.last_error}"]
    if s.capabilities.missing:
        lines += ["", "CAPABILITIES MISSING"]
        lines.extend(f"  {c.capability}: {c.why}; {c.consequence}" for c in s.capabilities.missing)
    if s.server_files.refused:
        counts = ", ".join(f"{k} {n}" for k, n in sorted(s.server_files.refused.items()))
        lines += ["", f"FILES REFUSED on a server's behalf: {counts}", f"  last: {s.server_files.last_refusal}"]
    node_errors = {k: v for k, v in s.errors.items() if ":" not in k or k.startswith(("procfs", "sink"))}
    lines.extend(f"error {key}: {msg}" for key, msg in node_errors.items())
    return "\n".join(lines)
