"""The fleet page (``guardian fleet --html FILE``): one static, self-contained HTML page with the look
of the incident page (``report_html``'s styles and helpers): a summary, then nodes × targets with
their phase, open incidents and restarts, the models' health and the groups. Pure: a ``FleetView``
in, text out; no script, no network, every outside string escaped.
"""

from __future__ import annotations

from vllm_guardian.diagnosis.report_html import CSS, _e, _when
from vllm_guardian.incidents.runbooks import runbook_url
from vllm_guardian.sinks.fleet_view import FleetView, phases

EXTRA_CSS = """
.phase{display:inline-block;padding:0 6px;border-radius:8px;background:#eee}
.phase.serving{background:#e8f5e9}.phase.incident,.phase.gone{background:#fde8e8}.ok{color:#2e7d32}
td.num{text-align:right}
"""


def _kinds(kinds: tuple[str, ...]) -> str:
    if not kinds:
        return "<span class='ok'>none</span>"
    return " ".join(f"<a class='kind critical' href='{_e(runbook_url(k))}'>{_e(k)}</a>" for k in kinds)


def render_fleet_html(view: FleetView) -> str:
    targets = view.targets
    incidents = sum(len(t.incidents) for t in targets)
    restarts = sum(t.restarts for t in targets)
    sev = "critical" if incidents else "info"
    out = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>fleet — vllm-guardian</title>"
        f"<meta name='viewport' content='width=device-width'><style>{CSS}{EXTRA_CSS}</style></head><body>",
        f"<h1><span class='kind {sev}'>fleet</span> {len(view.nodes)} nodes, {len(targets)} targets</h1>",
        f"<div class='meta'>{incidents} open incidents · {restarts}{'+' if view.events_cut else ''} restarts in "
        f"{view.window_s / 3600:g} h · phases: "
        + (", ".join(f"{_e(p)} {n}" for p, n in phases(targets).items()) or "none")
        + "</div>",
        f"<div class='meta small'>read from the fleet store at {_e(_when(view.time))} "
        f"({view.events_read} alert events read)</div>",
        "<h2>Nodes × targets</h2><table id='targets'><tr><th>node</th><th>target</th><th>model</th><th>phase</th>"
        "<th>open incidents</th><th>restarts</th><th>heartbeat</th><th>spooled</th></tr>",
    ]
    for n in view.nodes:
        rows = n.targets or ()
        if not rows:
            out.append(
                f"<tr><td>{_e(n.node)}</td><td colspan='7' class='small'>{_e(n.error or 'no targets')}</td></tr>"
            )
        for t in rows:
            out.append(
                f"<tr{' class=fault' if t.incidents else ''}><td>{_e(n.node)}</td><td>{_e(t.name)}</td>"
                f"<td>{_e(t.model)}</td><td><span class='phase {_e(t.phase)}'>{_e(t.phase)}</span></td>"
                f"<td>{_kinds(t.incidents)}</td><td class='num'>{t.restarts}</td>"
                f"<td class='small'>{_e(_when(n.time))}</td><td class='num'>{_e(n.spooled)}</td></tr>"
            )
    out.append("</table>")
    out.append(
        "<h2>Models</h2><table id='models'><tr><th>model</th><th>targets</th><th>serving</th>"
        "<th>with an incident</th><th>kinds</th><th>restarts</th></tr>"
    )
    for m in view.models:
        out.append(
            f"<tr{' class=fault' if m.with_incident else ''}><td>{_e(m.model)}</td><td class='num'>{m.targets}</td>"
            f"<td class='num'>{m.serving}</td><td class='num'>{m.with_incident}</td><td>{_kinds(m.kinds)}</td>"
            f"<td class='num'>{m.restarts}</td></tr>"
        )
    out.append("</table>")
    if view.groups:
        out.append(
            "<h2>Groups</h2><table id='groups'><tr><th>group</th><th>lease</th><th>nodes with a record</th></tr>"
        )
        out += [
            f"<tr><td>{_e(g.group)}</td><td>{_e(g.lease or '-')}</td><td>{_e(', '.join(g.nodes))}</td></tr>"
            for g in view.groups
        ]
        out.append("</table>")
    if view.events_cut:
        out.append(f"<p class='small'>Restart counts are a floor: only {view.events_read} events were read.</p>")
    out.append("<p class='small'>vllm-guardian fleet page: self-contained, no scripts.</p></body></html>")
    return "".join(out)
