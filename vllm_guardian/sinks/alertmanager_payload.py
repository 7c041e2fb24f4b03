"""An alert event (schema v1) as an Alertmanager API v2 alert (pure: data in, data out).

``POST /api/v2/alerts`` takes a list of ``{labels, annotations, startsAt, endsAt, generatorURL}``.
The labels identify the alert (Alertmanager groups, routes, silences and de-duplicates by them):
``alertname`` (the same ``VllmGuardianIncidentOpen`` as the Prometheus rule, so one silence covers
both paths), ``node``, ``target``, ``kind``, ``severity`` and, when known, ``model``,
``namespace`` and ``pod``. The annotations carry what a person needs: ``summary``,
``description``, ``runbook_url``, ``evidence`` (``<node>:<folder>``), ``incident_id``.

A firing alert's ``endsAt`` is left empty in the spool and stamped when it is sent: ``now`` plus
the validity horizon (four resend intervals, as Prometheus does), so an alert the guardian stops
re-sending (the guardian is gone) resolves by itself, and one held in the spool through an outage
is not sent already expired. A resolved alert carries the incident's ``ends_at``.
"""

from __future__ import annotations

from typing import Any, Mapping

from vllm_guardian.sinks.events import rfc3339

ALERTNAME = "VllmGuardianIncidentOpen"
HORIZON_RESENDS = 4  # a firing alert is valid for this many resend intervals
MAX_LABEL = 256  # characters of one label value
MAX_ANNOTATION = 4096  # characters of one annotation
TARGET_LABELS = ("model", "namespace", "pod")


def _clip(value: Any, limit: int) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def labels_of(event: Mapping[str, Any]) -> dict[str, str]:
    """The identifying labels of an event (empty values left out: Alertmanager drops them anyway)."""
    target = event.get("target") or {}
    labels = {
        "alertname": ALERTNAME,
        "node": _clip(event.get("node"), MAX_LABEL),
        "target": _clip(target.get("name"), MAX_LABEL),
        "kind": _clip(event.get("kind"), MAX_LABEL),
        "severity": _clip(event.get("severity"), MAX_LABEL),
    }
    for name in TARGET_LABELS:
        if target.get(name):
            labels[name] = _clip(target[name], MAX_LABEL)
    return {k: v for k, v in labels.items() if v}


def _description(event: Mapping[str, Any]) -> str:
    parts = [f"{event.get('kind')} on {event.get('node')}/{(event.get('target') or {}).get('name')}"]
    diagnoses = event.get("diagnosis") or []
    if diagnoses and isinstance(diagnoses[0], Mapping):
        first = diagnoses[0]
        title = first.get("title") or first.get("summary") or first.get("id")
        if title:
            parts.append(f"diagnosis: {title}")
    actions = [a for a in event.get("actions") or [] if isinstance(a, Mapping)]
    if actions:
        last = actions[-1]
        parts.append(f"last action: {last.get('name')} {last.get('status')}")
    return "; ".join(parts)


def annotations_of(event: Mapping[str, Any]) -> dict[str, str]:
    """What a person reads: summary, description, runbook, where the evidence is, the incident id."""
    evidence = (event.get("evidence") or {}).get("dir")
    out = {
        "summary": _clip(event.get("summary"), MAX_ANNOTATION),
        "description": _clip(_description(event), MAX_ANNOTATION),
        "runbook_url": _clip(event.get("runbook"), MAX_ANNOTATION),
        "evidence": _clip(f"{event.get('node')}:{evidence}" if evidence else "", MAX_ANNOTATION),
        "incident_id": _clip(event.get("incident_id"), MAX_ANNOTATION),
    }
    return {k: v for k, v in out.items() if v}


def alert_of(event: Mapping[str, Any]) -> dict[str, Any]:
    """The Alertmanager alert of an event; ``endsAt`` is None while firing (stamped when sent)."""
    resolved = event.get("status") == "resolved"
    return {
        "labels": labels_of(event),
        "annotations": annotations_of(event),
        "startsAt": event.get("starts_at"),
        "endsAt": (event.get("ends_at") or event.get("timestamp")) if resolved else None,
    }


def resolved_copy(alert: Mapping[str, Any], now_wall: float) -> dict[str, Any]:
    """The same alert, resolved now (its labels changed: the old label set must not linger)."""
    return {**alert, "endsAt": rfc3339(now_wall)}


def stamped(alerts: list[Mapping[str, Any]], now_wall: float, resend_interval: float) -> list[dict[str, Any]]:
    """The alerts as sent at ``now_wall``: a firing one valid until ``now + HORIZON_RESENDS × resend``."""
    horizon = rfc3339(now_wall + HORIZON_RESENDS * resend_interval)
    out = []
    for a in alerts:
        doc = {k: v for k, v in a.items() if v is not None}
        if a.get("endsAt") is None:
            doc["endsAt"] = horizon
        out.append(doc)
    return out
