"""Incidents on disk: ``<state_dir>/incidents/<id>/incident.json``, one JSON file each.

Writes atomically (temporary file, fsync, ``os.replace``, fsync of the folder);
files ``0640``, folders ``0750``. Field names are those `guardian incidents list --json` prints. Each file
passes through ``scrub`` on its way (the secret values the guardian holds: ``bundle/known_secrets.py``). A
corrupt or unreadable file is skipped with a warning, never a crash. The evidence bundle of
an incident lives in the same folder (``dir_for``).
"""

from __future__ import annotations

import builtins
import json
import logging
import math
import os
import re
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Mapping

from vllm_guardian.fsutil import atomic_write
from vllm_guardian.model import Action, Incident, Kind, Severity, Status, TargetRef

log = logging.getLogger(__name__)

FILE_NAME = "incident.json"
FILE_MODE = 0o640
DIR_MODE = 0o750
_SAFE_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_.-]*$")


# ---------------------------------------------------------------- codec
MAX_DEPTH = 32  # signals nest a few levels; deeper is damage (kept as a short text, never a crash)


def jsonable(value: Any, _depth: int = 0) -> Any:
    """Signals made JSON-safe: enums as values, tuples as lists, non-finite floats as None;
    a container nested deeper than ``MAX_DEPTH`` becomes a short text (saving never recurses
    without bound, whatever a finding carries)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (Mapping, list, tuple, set, frozenset)) and _depth >= MAX_DEPTH:
        return f"<{type(value).__name__} nested deeper than {MAX_DEPTH}>"
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v, _depth + 1) for v in value]
    return str(value)


def incident_to_dict(inc: Incident) -> dict[str, Any]:
    t = inc.target
    return {
        "id": inc.id,
        "kind": inc.kind.value,
        "status": inc.status.value,
        "severity": inc.severity.value,
        "node": inc.node,
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
        "summary": inc.summary,
        "signals": jsonable(inc.signals),
        "opened_at": inc.opened_at,
        "resolved_at": inc.resolved_at,
        "evidence_dir": inc.evidence_dir,
        "actions": [{"name": a.name, "status": a.status, "at": a.at, "detail": a.detail} for a in inc.actions],
        "fingerprint": inc.fingerprint,
        "diagnosis": [jsonable(d) for d in inc.diagnosis],
        "crash": jsonable(inc.crash) if inc.crash is not None else None,
    }


def incident_from_dict(d: Mapping[str, Any]) -> Incident:
    """The inverse of ``incident_to_dict``; raises ``KeyError``/``ValueError``/``TypeError``
    on a malformed document (``fingerprint`` is derived, not read)."""
    t = d["target"]
    return Incident(
        id=str(d["id"]),
        kind=Kind(d["kind"]),
        severity=Severity(d["severity"]),
        node=str(d["node"]),
        target=TargetRef(
            name=str(t["name"]),
            pid=int(t["pid"]),
            starttime=int(t["starttime"]),
            port=None if t.get("port") is None else int(t["port"]),
            model=t.get("model"),
            role=t.get("role"),
            namespace=t.get("namespace"),
            pod=t.get("pod"),
        ),
        status=Status(d["status"]),
        summary=str(d.get("summary", "")),
        opened_at=float(d["opened_at"]),
        signals=dict(d.get("signals") or {}),
        resolved_at=None if d.get("resolved_at") is None else float(d["resolved_at"]),
        evidence_dir=d.get("evidence_dir"),
        actions=tuple(
            Action(name=str(a["name"]), status=str(a["status"]), at=float(a["at"]), detail=str(a.get("detail", "")))
            for a in d.get("actions") or ()
        ),
        diagnosis=tuple(dict(x) for x in d.get("diagnosis") or () if isinstance(x, Mapping)),
        crash=dict(d["crash"]) if isinstance(d.get("crash"), Mapping) else None,
    )


MAX_FILE = 4 * 1024 * 1024  # an incident record is a few KiB; anything huge is damage


# ---------------------------------------------------------------- store
class IncidentStore:
    def __init__(self, state_dir: str | os.PathLike[str], scrub: Callable[[str], str] | None = None) -> None:
        self.root = Path(state_dir) / "incidents"
        self._scrub = scrub

    def dir_for(self, incident_id: str) -> Path:
        """The incident's folder (its evidence goes there too). Raises ``ValueError``
        on an id that is not a plain name (no path tricks)."""
        if not _SAFE_ID.match(incident_id or ""):
            raise ValueError(f"not an incident id: {incident_id!r}")
        return self.root / incident_id

    def save(self, incident: Incident) -> Path:
        d = self.dir_for(incident.id)
        _mkdir(self.root)
        _mkdir(d)
        path = d / FILE_NAME
        text = json.dumps(incident_to_dict(incident), indent=2, sort_keys=True)
        atomic_write(path, self._scrub(text) if self._scrub is not None else text, mode=FILE_MODE)
        return path

    def load(self, incident_id: str) -> Incident | None:
        """The stored incident, or None when absent or unreadable (warned)."""
        return self._read(self.dir_for(incident_id) / FILE_NAME)

    def list(self, limit: int | None = None) -> list[Incident]:
        """Stored incidents, newest first (by opening time, then id)."""
        out = []
        if self.root.is_dir():
            for entry in self.root.iterdir():
                if entry.is_dir() and _SAFE_ID.match(entry.name) and (entry / FILE_NAME).exists():
                    inc = self._read(entry / FILE_NAME)
                    if inc is not None:
                        out.append(inc)
        out.sort(key=lambda i: (i.opened_at, i.id), reverse=True)
        return out if limit is None else out[: max(0, limit)]

    def load_open(self) -> builtins.list[Incident]:  # `list` here is the method above
        """Stored incidents still firing, oldest first."""
        return sorted((i for i in self.list() if i.status is Status.FIRING), key=lambda i: (i.opened_at, i.id))

    def _read(self, path: Path) -> Incident | None:
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_FILE + 1)
            if len(raw) > MAX_FILE:
                raise ValueError(f"larger than {MAX_FILE} bytes")
            return incident_from_dict(json.loads(raw))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            log.warning("skipping unreadable incident file %s: %s: %s", path, type(e).__name__, e)
            return None


def _mkdir(path: Path) -> None:
    if not path.is_dir():
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        os.chmod(path, DIR_MODE)
