"""The incident page: one self-contained ``report.html`` per evidence bundle.

``render_report(ReportInput) -> str`` is pure: no JavaScript, no network, no
external file — charts are inline SVG (``svg.line_chart``), the py-spy flame
graph is embedded as an ``<img>`` data URI (its own script never runs there),
styles are inline. First the verdict (diagnosis, crash, "device idle while the
engine spins"), then the windows that fired for this incident's kind, then the
actions with their durations, the flame graph, the other series and the
bundle's files.

``read_bundle(dir, incident)`` gathers a ``ReportInput`` from a bundle folder
(``series.json``, ``capture.json``, ``diagnosis.json``, ``accelerators.json``,
``summary.txt``, ``flame-*.svg``) and ``write_report`` writes ``report.html``
next to them (bounded: a flame graph over 4 MiB is linked, not embedded).
"""

from __future__ import annotations

import base64
import html
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from vllm_guardian.fsutil import atomic_write
from vllm_guardian.incidents.runbooks import runbook_url
from vllm_guardian.series import metrics as m
from vllm_guardian.series.slope import theil_sen
from vllm_guardian.detectors.kinds import spec
from vllm_guardian.diagnosis.svg import Line, fmt_value, line_chart

REPORT = "report.html"
DIAGNOSIS_FILE = "diagnosis.json"
MAX_FLAME_BYTES = 4 * 1024 * 1024
MAX_LINES_PER_CHART = 6

Series = Mapping[str, Mapping[str, Sequence[Sequence[float]]]]


@dataclass(frozen=True)
class ReportInput:
    incident: Mapping[str, Any] | None  # incident_to_dict(...) or None for a manual snapshot
    bundle_id: str
    series: Series = field(default_factory=dict)
    diagnosis: Sequence[Mapping[str, Any]] = ()
    crash: Mapping[str, Any] | None = None
    notes: Sequence[str] = ()  # e.g. "device idle while the engine spins (accelerator 0 %)"
    capture: Mapping[str, Any] | None = None  # capture.json
    flame_svg: bytes | None = None
    flame_name: str | None = None
    summary: str = ""
    accelerators: Sequence[Mapping[str, Any]] = ()


# ---------------------------------------------------------------- chart selection (pure)
@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    lines: tuple[Line, ...]
    unit: str = ""
    threshold: float | None = None
    threshold_label: str = ""


def _pts(raw: Sequence[Sequence[float]]) -> list[tuple[float, float]]:
    return [(float(p[0]), float(p[1])) for p in raw if len(p) == 2]


def _subjects(series: Series, metric: str) -> dict[str, list[tuple[float, float]]]:
    return {s: _pts(v) for s, v in (series.get(metric) or {}).items() if v}


def _label(subject: str) -> str:
    return subject or "target"


def _top(subjects: Mapping[str, list[tuple[float, float]]], n: int = MAX_LINES_PER_CHART) -> list[str]:
    return sorted(subjects, key=lambda s: -(subjects[s][-1][1] if subjects[s] else 0))[:n]


def select_charts(series: Series, kind: str | None, signals: Mapping[str, Any]) -> tuple[list[Chart], list[Chart]]:
    """(the charts of the windows that fired for this kind, the other charts)."""
    charts: dict[str, Chart] = {}
    pid, tid = signals.get("pid"), signals.get("tid")
    hot = f"p{pid}/t{tid}" if isinstance(pid, int) and isinstance(tid, int) else None

    def thread_lines(metric: str) -> tuple[Line, ...]:
        subs = _subjects(series, metric)
        keys = [hot] if hot in subs else _top(subs, 4)
        return tuple(Line(("hot thread " if k == hot else "") + k, subs[k]) for k in keys)

    demand = tuple(Line("demand " + ln.label, ln.points) for ln in thread_lines(m.THREAD_DEMAND)) + tuple(
        Line("cpu " + ln.label, ln.points) for ln in thread_lines(m.THREAD_CPU)
    )
    if demand:
        charts["thread_cpu"] = Chart(
            "thread_cpu",
            "Hot thread: CPU demand and CPU (1.0 = one core)",
            demand,
            "ratio",
            signals.get("threshold_cpu_ratio"),
            "busy threshold",
        )
    vol = thread_lines(m.THREAD_VOL_RATE)
    if vol:
        charts["thread_vol"] = Chart("thread_vol", "Hot thread: voluntary context switches per second", vol, "/s")
    counters = []
    for metric in m.PROGRESS_COUNTERS:
        pts = _subjects(series, metric).get("")
        if pts:
            base = pts[0][1]
            counters.append(Line(metric.split(".", 1)[1] + " (+since window start)", [(t, v - base) for t, v in pts]))
    if counters:
        charts["progress"] = Chart("progress", "Engine progress counters (flat = no progress)", tuple(counters))
    reqs = [
        Line(metric.split(".", 1)[1], pts)
        for metric in (m.REQ_RUNNING, m.REQ_WAITING)
        for pts in [_subjects(series, metric).get("")]
        if pts
    ]
    if reqs:
        charts["requests"] = Chart("requests", "Requests running / waiting", tuple(reqs))
    kv = _subjects(series, m.KV_USAGE).get("")
    if kv:
        charts["kv"] = Chart(
            "kv",
            "KV cache usage",
            (Line("kv_cache_usage", kv),),
            "ratio",
            signals.get("threshold_usage") if isinstance(signals.get("threshold_usage"), (int, float)) else None,
            "threshold",
        )
    for key, metric, title in (
        ("accel_mem", m.ACCEL_MEM, "Accelerator memory (dashed: fitted slope)"),
        ("rss", m.PROC_RSS, "Host RSS per process (dashed: fitted slope)"),
    ):
        subs = _subjects(series, metric)
        if subs:
            keys = ([""] if "" in subs else []) + [k for k in _top(subs) if k != ""]
            charts[key] = Chart(
                key,
                title,
                tuple(
                    Line(_label(k), subs[k], theil_sen(subs[k]) if len(subs[k]) > 2 else None)
                    for k in keys[:MAX_LINES_PER_CHART]
                ),
                "bytes",
            )
    util = _subjects(series, m.ACCEL_UTIL).get("")
    if util:
        charts["accel_util"] = Chart(
            "accel_util",
            "Accelerator utilisation (busiest device of the target)",
            (Line("utilisation", util),),
            "ratio",
        )
    health = [
        Line(metric.split(".", 1)[1], pts)
        for metric in (m.HEALTH_OK, m.CANARY_OK)
        for pts in [_subjects(series, metric).get("")]
        if pts
    ]
    if health:
        charts["health"] = Chart("health", "/health and canary (1 = ok)", tuple(health))
    row = spec(kind) if kind else None
    fired_keys = row.charts if row is not None else ()
    fired = [charts[k] for k in fired_keys if k in charts]
    rest = [c for k, c in charts.items() if k not in fired_keys]
    return fired, rest


# ---------------------------------------------------------------- rendering (pure)
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:22px 0 8px;border-bottom:1px solid #ddd}
.meta{color:#555}.kind{display:inline-block;padding:1px 8px;border-radius:10px;background:#333;color:#fff}
.critical{background:#b71c1c}.warning{background:#e65100}.info{background:#1565c0}
.verdict{border-left:5px solid #b71c1c;background:#fff5f5;padding:10px 14px;margin:12px 0}
.verdict.none{border-color:#999;background:#f6f6f6}.candidate{margin:6px 0;color:#444}tr.fault td{background:#fde8e8}
.workaround{background:#eef7ee;border-left:4px solid #2e7d32;padding:6px 10px;margin:8px 0}
pre{background:#f4f4f4;padding:10px;overflow:auto;font-size:12px;max-height:420px}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;font-size:13px}
.charts svg{margin:6px 8px 6px 0;border:1px solid #eee}.flame img{max-width:100%;border:1px solid #ddd}
.small{font-size:12px;color:#666}
"""


def _e(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def _when(wall: Any) -> str:
    if not isinstance(wall, (int, float)):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(wall))


def _diagnosis_html(diag: Sequence[Mapping[str, Any]], notes: Sequence[str]) -> str:
    notes_html = "".join(f"<p><b>{_e(n)}</b></p>" for n in notes)
    if not diag:
        return (
            f'<div class="verdict none" id="diagnosis"><b>No known signature matched.</b> '
            f"The stacks and series below are what there is.{notes_html}</div>"
        )
    top, others = diag[0], diag[1:]
    refs = "".join(
        f'<li><a href="{_e(r)}">{_e(r)}</a></li>' if str(r).startswith("http") else f"<li>{_e(r)}</li>"
        for r in top.get("references") or ()
    )
    parts = [
        f'<div class="verdict" id="diagnosis"><div><b>Most likely:</b> {_e(top.get("title"))} '
        f'<span class="small">({_e(top.get("id"))}, confidence {float(top.get("confidence", 0)):.2f})</span></div>',
        notes_html,
    ]
    if top.get("workaround"):
        parts.append(f'<div class="workaround"><b>Workaround:</b> {_e(top["workaround"])}</div>')
    if top.get("advice"):
        parts.append(f"<div><b>What to do:</b> {_e(top['advice'])}</div>")
    if top.get("fixed_in"):
        parts.append(f"<div><b>Fixed in:</b> vLLM {_e(top['fixed_in'])}</div>")
    parts.append(
        "<div><b>Why:</b><ul>" + "".join(f"<li>{_e(x)}</li>" for x in top.get("matched") or ()) + "</ul></div>"
    )
    for n in top.get("notes") or ():
        parts.append(f"<div>{_e(n)}</div>")
    if refs:
        parts.append(f"<div><b>References:</b><ul>{refs}</ul></div>")
    src = [f"<b>Source:</b> {_e(top.get('source'))}"]
    if top.get("confirmed"):
        src.append("<b>confirmed:</b> " + "; ".join(_e(x) for x in top["confirmed"]))
    if top.get("inferred"):
        src.append("<b>inferred:</b> " + "; ".join(_e(x) for x in top["inferred"]))
    parts.append('<div class="small">' + "<br>".join(src) + f" <br>catalog {_e(top.get('catalog'))}</div>")
    for o in others:
        parts.append(
            f'<div class="candidate">Also possible: {_e(o.get("title"))} '
            f'<span class="small">({_e(o.get("id"))}, {float(o.get("confidence", 0)):.2f})</span></div>'
        )
    parts.append("</div>")
    return "".join(parts)


def _crash_html(crash: Mapping[str, Any] | None) -> str:
    if not crash:
        return ""
    if not crash.get("exception"):
        return (
            f'<h2>Crash</h2><p id="crash">No traceback: {_e(crash.get("error"))} '
            f'<span class="small">(source: {_e(crash.get("source"))})</span></p>'
        )
    frames = crash.get("frames") or []
    last = frames[-1] if frames else None
    where = f" at {_e(last['file'])}:{_e(last['line'])} in {_e(last['function'])}" if last else ""
    chain = "".join(f"<li>caused by {_e(c)}</li>" for c in crash.get("chain") or ()) + "".join(
        f"<li>then reported as {_e(c)}</li>" for c in crash.get("followed_by") or ()
    )
    return (
        f'<h2>Crash</h2><div id="crash"><p><b>{_e(crash["exception"])}</b>: {_e(crash.get("message"))}{where}'
        f' <span class="small">(process {_e(crash.get("process") or "?")} pid {_e(crash.get("pid") or "?")}; '
        f"source: {_e(crash.get('source'))})</span></p>"
        + (f"<ul>{chain}</ul>" if chain else "")
        + f"<pre>{_e(crash.get('text'))}</pre></div>"
    )


def _actions_html(incident: Mapping[str, Any] | None, capture: Mapping[str, Any] | None) -> str:
    rows = []
    acts = list((incident or {}).get("actions") or [])
    end = (incident or {}).get("resolved_at")
    for i, a in enumerate(acts):
        nxt = acts[i + 1]["at"] if i + 1 < len(acts) else end
        dur = (
            f"{nxt - a['at']:.1f} s" if isinstance(nxt, (int, float)) and isinstance(a.get("at"), (int, float)) else ""
        )
        rows.append(
            f"<tr><td>{_e(_when(a.get('at')))}</td><td>{_e(a.get('name'))}</td><td>{_e(a.get('status'))}</td>"
            f"<td>{dur}</td><td>{_e(a.get('detail'))}</td></tr>"
        )
    if capture:
        rows.append(
            f"<tr><td>{_e(_when(capture.get('started_at')))}</td><td>evidence capture</td>"
            f"<td>{'complete' if capture.get('complete') else 'partial'}</td>"
            f"<td>{_e(capture.get('duration_s'))} s</td><td>{len(capture.get('files') or [])} files</td></tr>"
        )
        for s in capture.get("steps") or []:
            rows.append(
                f"<tr class='small'><td></td><td>py-spy {_e(s.get('what'))} pid {_e(s.get('pid'))}</td>"
                f"<td>{_e(s.get('mode'))}{' rc ' + _e(s.get('rc')) if s.get('rc') is not None else ''}</td>"
                f"<td>{_e(s.get('duration_s'))} s</td><td>{_e(s.get('error') or '')}</td></tr>"
            )
    if not rows:
        return "<h2>Actions</h2><p>None recorded.</p>"
    return (
        '<h2>Actions</h2><table id="actions"><tr><th>when</th><th>action</th><th>status</th>'
        "<th>duration (to the next step)</th><th>detail</th></tr>" + "".join(rows) + "</table>"
    )


def _accel_html(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return ""
    body = []
    for r in rows:
        util = "?" if r.get("utilization_pct") is None else f"{r['utilization_pct']:g} %"
        used, total = r.get("memory_used_bytes"), r.get("memory_total_bytes")
        mem = f"{fmt_value(used, 'bytes') if used is not None else '?'} / {fmt_value(total, 'bytes') if total else '?'}"
        procs = ", ".join(
            f"{p.get('pid')} {p.get('name') or ''} → {p.get('target') or 'no target'}" for p in r.get("processes") or ()
        )
        fault = r.get("fault") or ""
        cls = ' class="fault"' if int(r.get("fault_health") or 0) >= 2 else ""
        body.append(
            f"<tr{cls}><td>{_e(r.get('device'))}</td><td>{_e(r.get('name'))}</td><td>{_e(r.get('health'))}</td>"
            f"<td>{_e(r.get('utilization_label', ''))} {util}</td><td>{_e(mem)}</td><td>{_e(procs)}</td>"
            f"<td>{_e(fault)}</td></tr>"
        )
    return (
        '<h2>Accelerators at capture</h2><table id="accelerators"><tr><th>device</th><th>name</th><th>health</th>'
        "<th>util</th><th>memory</th><th>processes</th><th>device fault</th></tr>" + "".join(body) + "</table>"
    )


def _charts_html(charts: Sequence[Chart], t_end: float | None) -> str:
    return (
        '<div class="charts">'
        + "".join(
            line_chart(
                c.title,
                c.lines,
                unit=c.unit,
                t_end=t_end,
                threshold=c.threshold,
                threshold_label=c.threshold_label,
                chart_id=f"chart-{c.key}",
            )
            for c in charts
        )
        + "</div>"
    )


def render_report(r: ReportInput) -> str:
    inc = r.incident or {}
    target = inc.get("target") or {}
    kind = inc.get("kind")
    signals = inc.get("signals") or {}
    fired, rest = select_charts(r.series, kind, signals)
    t_end = max(
        (float(p[0]) for subs in r.series.values() for pts in subs.values() for p in pts if len(p) == 2), default=None
    )
    title = f"{kind} on {target.get('name')}" if inc else f"snapshot {r.bundle_id}"
    sev = inc.get("severity", "info")
    head = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)} — vllm-guardian</title>"
        f"<meta name='viewport' content='width=device-width'><style>{CSS}</style></head><body>",
        f"<h1><span class='kind {_e(sev)}'>{_e(kind or 'snapshot')}</span> {_e(target.get('name') or '')}</h1>",
        f"<div class='meta'>{_e(inc.get('summary') or '')}</div>",
    ]
    if inc:
        head.append(
            f"<div class='meta small'>incident {_e(inc.get('id'))} · node {_e(inc.get('node'))} · "
            f"{_e(inc.get('status'))} · opened {_e(_when(inc.get('opened_at')))}"
            + (f" · resolved {_e(_when(inc.get('resolved_at')))}" if inc.get("resolved_at") else "")
            + f" · pid {_e(target.get('pid'))} port {_e(target.get('port'))}</div>"
        )
        if kind:
            url = runbook_url(str(kind))
            head.append(f"<div class='meta small'>runbook: <a id='runbook' href='{_e(url)}'>{_e(url)}</a></div>")
    body = [_diagnosis_html(r.diagnosis, r.notes), _crash_html(r.crash)]
    if fired:
        body.append("<h2>The windows that fired</h2>" + _charts_html(fired, t_end))
    body.append(_actions_html(r.incident, r.capture))
    if r.flame_svg:
        uri = "data:image/svg+xml;base64," + base64.b64encode(r.flame_svg).decode()
        body.append(
            f"<h2>Flame graph</h2><div class='flame'><img id='flame' alt='py-spy flame graph' src='{uri}'>"
            f"<div class='small'>{_e(r.flame_name)} (py-spy record; open the file for the interactive view)"
            "</div></div>"
        )
    elif r.flame_name:
        body.append(f"<h2>Flame graph</h2><p>Too large to embed: open <code>{_e(r.flame_name)}</code>.</p>")
    if rest:
        body.append("<h2>Other series</h2>" + _charts_html(rest, t_end))
    body.append(_accel_html(r.accelerators))
    if r.summary:
        body.append(f"<h2>summary.txt</h2><pre>{_e(r.summary)}</pre>")
    if r.capture:
        files = "".join(
            f"<li>{_e(f.get('name'))} <span class='small'>{_e(f.get('bytes'))} B</span></li>"
            for f in r.capture.get("files") or []
        )
        body.append(f"<h2>Bundle</h2><ul class='small'>{files}</ul>")
    body.append("<p class='small'>vllm-guardian incident page: self-contained, no scripts.</p></body></html>")
    return "".join(head + body)


# ---------------------------------------------------------------- the bundle (reads and one write)
def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_bundle(bundle_dir: str | os.PathLike[str], incident: Mapping[str, Any] | None) -> ReportInput:
    d = Path(bundle_dir)
    diag_doc = _read_json(d / DIAGNOSIS_FILE) or {}
    inc = dict(incident) if incident else None
    diagnosis = (inc or {}).get("diagnosis") or diag_doc.get("diagnosis") or []
    crash = (inc or {}).get("crash") or diag_doc.get("crash")
    flames = sorted(d.glob("flame-*.svg"))
    flame, flame_name = None, None
    if flames:
        flame_name = flames[0].name
        if flames[0].stat().st_size <= MAX_FLAME_BYTES:
            flame = flames[0].read_bytes()
    try:
        summary = (d / "summary.txt").read_text(encoding="utf-8")
    except OSError:
        summary = ""
    return ReportInput(
        inc,
        d.name,
        _read_json(d / "series.json") or {},
        diagnosis,
        crash,
        tuple(diag_doc.get("notes") or ()),
        _read_json(d / "capture.json"),
        flame,
        flame_name,
        summary,
        tuple(diag_doc.get("accelerators") or ()),
    )


def write_report(
    bundle_dir: str | os.PathLike[str],
    incident: Mapping[str, Any] | None,
    scrub: Callable[[str], str] | None = None,
) -> Path:
    """(Re)writes ``report.html`` in the bundle from what the bundle holds; mode 0640. ``scrub``:
    the known secret values out of the page (``bundle/known_secrets.py``)."""
    path = Path(bundle_dir) / REPORT
    page = render_report(read_bundle(bundle_dir, incident))
    atomic_write(path, scrub(page) if scrub is not None else page)
    return path
