"""Alert events, schema v1 (docs/alerts.md): what one incident transition says to the world.

``event_from_incident`` is a pure function of an incident and the wall time of
the event: one JSON-able dict with a unique, time-sortable ``id`` (ULID), a
stable ``fingerprint`` (node/target/kind), ``status`` firing/resolved and the
Alertmanager-like ``starts_at``/``ends_at`` (RFC 3339, UTC; ``ends_at`` is null
while firing). ``AlertEmitter`` decides *when* an event is due: one per
transition, a re-notification of every firing incident each
``renotify_interval`` (monotonic), and always the resolved one.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

from vllm_guardian import __version__
from vllm_guardian.incidents.ids import IdGenerator, decode_ms, new_incident_id
from vllm_guardian.incidents.runbooks import runbook_url
from vllm_guardian.incidents.store import jsonable
from vllm_guardian.model import Incident, Status, Transition

SCHEMA_VERSION = 1
REASONS = ("opened", "updated", "renotify", "resolved")
EVENT_FIELDS = (
    "schema",
    "id",
    "incident_id",
    "fingerprint",
    "status",
    "reason",
    "kind",
    "severity",
    "node",
    "target",
    "summary",
    "signals",
    "evidence",
    "actions",
    "starts_at",
    "ends_at",
    "timestamp",
    "generator",
    "diagnosis",
    "crash",
    "runbook",
)
MAX_DIAGNOSES = 3
CRASH_EVENT_KEYS = ("exception", "message", "process", "pid", "source", "error")
CRASH_FRAMES = 5
TARGET_FIELDS = ("name", "pid", "starttime", "port", "model", "role", "namespace", "pod")
MAX_EVIDENCE_FILES = 200

IdSource = Callable[[float], str]


def rfc3339(wall: float | None) -> str | None:
    """Wall seconds -> ``2024-05-01T12:00:00.123Z`` (UTC, milliseconds); None stays None."""
    if wall is None:
        return None
    dt = datetime.fromtimestamp(wall, tz=timezone.utc)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def generator_name(node: str, version: str = __version__) -> str:
    return f"vllm-guardian/{version}@{node}"


def event_from_incident(
    incident: Incident,
    node: str,
    now_wall: float,
    *,
    reason: str,
    evidence_files: Sequence[str] = (),
    ids: IdSource = new_incident_id,
    version: str = __version__,
) -> dict[str, Any]:
    """The schema-v1 event for ``incident`` as of ``now_wall``.

    ``reason`` is one of ``REASONS``; ``ids`` makes the event id (pass an
    ``IdGenerator`` to keep ids strictly increasing within one millisecond);
    ``evidence_files`` are paths relative to the incident's evidence folder.
    """
    if reason not in REASONS:
        raise ValueError(f"unknown event reason {reason!r} (one of {', '.join(REASONS)})")
    t = incident.target
    resolved = incident.status is Status.RESOLVED
    return {
        "schema": SCHEMA_VERSION,
        "id": ids(now_wall),
        "incident_id": incident.id,
        "fingerprint": incident.fingerprint,
        "status": incident.status.value,
        "reason": reason,
        "kind": incident.kind.value,
        "severity": incident.severity.value,
        "node": node,
        "target": {
            "name": t.name,
            "pid": t.pid,
            "starttime": t.starttime,
            "port": t.port,
            "model": t.model,
            "role": t.role,
            "namespace": t.namespace,
            "pod": t.pod,
        },
        "summary": incident.summary,
        "signals": jsonable(incident.signals),
        "evidence": {"dir": incident.evidence_dir, "files": list(evidence_files)},
        "actions": [
            {"name": a.name, "status": a.status, "at": rfc3339(a.at), "detail": a.detail} for a in incident.actions
        ],
        "starts_at": rfc3339(incident.opened_at),
        "ends_at": rfc3339(incident.resolved_at if incident.resolved_at is not None else now_wall)
        if resolved
        else None,
        "timestamp": rfc3339(now_wall),
        "generator": generator_name(node, version),
        "diagnosis": [jsonable(d) for d in incident.diagnosis[:MAX_DIAGNOSES]],
        "crash": crash_for_event(incident.crash),
        "runbook": runbook_url(incident.kind.value),
    }


def crash_for_event(crash: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The crash without its full traceback text (the bundle and the incident keep that)."""
    if crash is None:
        return None
    out = {k: jsonable(crash.get(k)) for k in CRASH_EVENT_KEYS}
    out["frames"] = jsonable(list(crash.get("frames") or ())[-CRASH_FRAMES:])
    return out


def list_evidence_files(directory: str | None, limit: int = MAX_EVIDENCE_FILES) -> list[str]:
    """Files under an evidence folder, relative and sorted, at most ``limit``; [] when absent."""
    if not directory or not os.path.isdir(directory):
        return []
    out: list[str] = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            out.append(os.path.relpath(os.path.join(root, name), directory))
    return sorted(out)[:limit]


class AlertEmitter:
    """Which events are due: one per transition, re-notifications of firing incidents.

    Holds, per open incident id, the monotonic time it was last announced.
    ``list_files`` is the seam that names the evidence files of a folder.
    """

    def __init__(
        self,
        node: str,
        renotify_interval: float,
        *,
        ids: IdSource | None = None,
        list_files: Callable[[str | None], list[str]] = list_evidence_files,
        version: str = __version__,
    ) -> None:
        if renotify_interval <= 0:
            raise ValueError("renotify_interval must be positive")
        self.node = node
        self.renotify_interval = float(renotify_interval)
        self._ids: IdSource = ids if ids is not None else IdGenerator()
        self._list_files = list_files
        self._version = version
        self._last: dict[str, float] = {}

    def _event(self, incident: Incident, now_wall: float, reason: str) -> dict[str, Any]:
        return event_from_incident(
            incident,
            self.node,
            now_wall,
            reason=reason,
            evidence_files=self._list_files(incident.evidence_dir),
            ids=self._ids,
            version=self._version,
        )

    def on_transition(self, transition: Transition, now_wall: float, now_mono: float) -> dict[str, Any]:
        inc = transition.incident
        if inc.status is Status.RESOLVED:
            self._last.pop(inc.id, None)
            return self._event(inc, now_wall, "resolved")
        self._last[inc.id] = now_mono
        return self._event(inc, now_wall, "opened" if transition.previous is None else "updated")

    def due(self, open_incidents: Iterable[Incident], now_wall: float, now_mono: float) -> list[dict[str, Any]]:
        """Re-notifications for firing incidents last announced ``renotify_interval`` ago or more.

        An incident seen here for the first time is considered announced now
        (its transition event carries it); incidents no longer open are forgotten.
        """
        events: list[dict[str, Any]] = []
        seen: set[str] = set()
        for inc in open_incidents:
            if inc.status is not Status.FIRING:
                continue
            seen.add(inc.id)
            last = self._last.setdefault(inc.id, now_mono)
            if now_mono - last >= self.renotify_interval:
                self._last[inc.id] = now_mono
                events.append(self._event(inc, now_wall, "renotify"))
        for gone in set(self._last) - seen:
            del self._last[gone]
        return events

    def firing(self, open_incidents: Iterable[Incident], now_wall: float) -> list[dict[str, Any]]:
        """An event (reason ``renotify``) for every firing incident now; the re-notification clock untouched."""
        return [self._event(i, now_wall, "renotify") for i in open_incidents if i.status is Status.FIRING]


class IncidentAlerts:
    """Daemon glue: a ``Transition`` sink (``__call__``) plus ``renotify`` for each tick,
    both handing events to ``publish`` (``AlertSink.publish``: spool, never blocks on Redis);
    ``current`` is every firing incident's event now (the Alertmanager resend). ``prepare`` is
    applied to each event first (the runtime scrubs the secret values it knows)."""

    def __init__(
        self,
        emitter: AlertEmitter,
        publish: Callable[[dict[str, Any]], None],
        clock,
        prepare: Callable[[dict[str, Any]], dict[str, Any]] = lambda e: e,
    ) -> None:
        self.emitter = emitter
        self._publish = publish
        self.prepare = prepare
        self.clock = clock

    def publish(self, event: dict[str, Any]) -> None:
        self._publish(self.prepare(event))

    def __call__(self, transition: Transition) -> None:
        self.publish(self.emitter.on_transition(transition, self.clock.wall(), self.clock.monotonic()))

    def renotify(self, open_incidents: Iterable[Incident]) -> int:
        events = self.emitter.due(open_incidents, self.clock.wall(), self.clock.monotonic())
        for event in events:
            self.publish(event)
        return len(events)

    def current(self, open_incidents: Iterable[Incident]) -> list[dict[str, Any]]:
        return [self.prepare(e) for e in self.emitter.firing(open_incidents, self.clock.wall())]


def event_time_ms(event: Mapping[str, Any]) -> int:
    """Milliseconds encoded in an event id (ULID); 0 when the id is not a ULID."""
    try:
        return decode_ms(str(event["id"]))
    except (KeyError, ValueError):
        return 0
