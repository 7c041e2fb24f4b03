"""``capture.json``, the bundle's manifest: what was captured, how, what failed and why.

Built from the plan (``bundle.plan``), the incident and the target it was planned for, and the
writer's bookkeeping (files and sizes, failures, notes, every py-spy call). Schema 1.
"""

from __future__ import annotations

from typing import Any

from vllm_guardian.bundle import pyspy
from vllm_guardian.bundle.plan import RECORDS, CapturePlan
from vllm_guardian.redact import redact_argv
from vllm_guardian.bundle.writer import BundleWriter
from vllm_guardian.incidents.store import jsonable
from vllm_guardian.model import Incident, Target

MANIFEST = "capture.json"


def build_manifest(
    plan: CapturePlan,
    incident: Incident | None,
    target: Target,
    bundle: BundleWriter,
    removed: list[str],
    duration: float,
) -> dict[str, Any]:
    return {
        "schema": 1,
        "id": plan.bundle_id,
        "incident": None if incident is None else _incident(incident),
        "target": {
            "name": target.name,
            "pid": target.key.pid,
            "starttime": target.key.starttime,
            "port": target.port,
        },
        "processes": [
            {
                "pid": p.pid,
                "starttime": p.key.starttime,
                "role": p.role.value,
                "cmdline": list(redact_argv(p.cmdline)),
                "captured": plan.captured(p),
            }
            for p in target.processes
        ],
        "pyspy": plan.exe,
        "hottest_pid": plan.hottest,
        "record": None
        if plan.recorded is None
        else {
            "pid": plan.recorded,
            "seconds": pyspy.record_seconds_arg(plan.seconds),
            "formats": [f for f, _ in RECORDS],
        },
        "started_at": plan.wall,
        "monotonic_at_start": plan.start,
        "deadline_s": plan.deadline,
        "duration_s": round(duration, 3),
        "complete": not bundle.failures,
        "files": [{"name": n, "bytes": s} for n, s in sorted(bundle.files.items())],
        "failures": dict(sorted(bundle.failures.items())),
        "notes": dict(sorted(bundle.notes.items())),
        "steps": [call.to_dict() for call in bundle.steps],
        "retention_removed": removed,
    }


def _incident(incident: Incident) -> dict[str, Any]:
    return {
        "id": incident.id,
        "kind": incident.kind.value,
        "status": incident.status.value,
        "summary": incident.summary,
        "signals": jsonable(incident.signals),
    }
