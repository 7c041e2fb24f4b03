"""The node heartbeat's document: a compact summary of the status snapshot (pure).

``node_summary`` keeps what ``guardian status --fleet`` shows of a node: its targets (phase, pid,
port, model, open incidents), its open incidents and the alert sink's health. The loop hands it
to the alert sink, which writes it under ``guardian:node:<node>`` (``sinks/fleet.py``).
"""

from __future__ import annotations

from typing import Any

from vllm_guardian.sinks.redis_sink import AlertsStatus
from vllm_guardian.surface.status_snapshot import StatusSnapshot


def node_summary(status: StatusSnapshot, alerts: AlertsStatus | None = None) -> dict[str, Any]:
    """A compact heartbeat from the status snapshot and the alert sink's section."""
    out: dict[str, Any] = {
        "node": status.node,
        "version": status.version,
        "time": status.time,
        "uptime_s": status.uptime_s,
        "targets": [
            {
                "name": t.name,
                "phase": t.phase,
                "pid": t.pid,
                "port": t.port,
                "model": t.model,
                "incidents": list(t.incidents),
            }
            for t in status.targets
        ],
        "incidents": [
            {
                "id": i.id,
                "kind": i.kind.value,
                "severity": i.severity.value,
                "target": i.target.name,
                "opened_at": i.opened_at,
            }
            for i in status.incidents
        ],
    }
    if alerts is not None:
        out["alerts"] = {"spooled": alerts.spooled, "dropped_total": alerts.dropped_total, "redis_up": alerts.redis_up}
    return out
