"""Crash forensics for ``engine_dead``: the log tail → the last traceback → the catalog (pure assembly).

``crash_report(tail, signatures, observation)`` turns a ``LogTail`` (already read,
bounded, redacted) into the incident's ``crash`` document::

    {"source": "file /var/log/vllm.log", "lines_read": 812, "truncated": false,
     "exception": "AssertionError", "message": "...", "process": "EngineCore_DP0", "pid": 123,
     "frames": [{"file", "line", "function", "code"}, ...], "chain": [...], "text": "...",
     "diagnosis": [ {match}, ... ], "error": null}

With no traceback, ``exception`` is null and ``error`` says why (no source, read
failed, no traceback in N lines); the catalog still sees the log lines (a log
line alone can identify a signature, e.g. "Failed to advance FSM").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from vllm_guardian.diagnosis.log_tail import LogTail
from vllm_guardian.diagnosis.matcher import Observation, diagnose
from vllm_guardian.diagnosis.signature import Signature
from vllm_guardian.diagnosis.traceback_parse import parse_last_traceback, strip_line


def crash_report(tail: LogTail, signatures: Sequence[Signature], obs: Observation) -> dict[str, Any]:
    crash = parse_last_traceback(tail.lines) if tail.lines else None
    clean = tuple(strip_line(x)[2] for x in tail.lines)
    matches = diagnose(signatures, replace(obs, crash=crash, log_lines=clean + tuple(obs.log_lines)))
    doc: dict[str, Any] = {
        "source": tail.source.describe() if tail.source else None,
        "lines_read": len(tail.lines),
        "truncated": tail.truncated,
        "exception": None,
        "message": None,
        "process": None,
        "pid": None,
        "frames": [],
        "chain": [],
        "text": "",
        "diagnosis": [m.to_dict() for m in matches],
        "error": tail.error,
    }
    if crash is not None:
        doc.update({k: v for k, v in crash.to_dict().items()})
    elif tail.error is None:
        doc["error"] = f"no Python traceback in the last {len(tail.lines)} log lines"
    return doc


def crash_headline(doc: dict[str, Any]) -> str:
    """One line for summaries and alerts: ``AssertionError: msg (EngineCore_DP0, at scheduler.py:123 in f)``."""
    if not doc or not doc.get("exception"):
        return f"no traceback found ({doc.get('error') or 'no log'})" if doc else "no crash data"
    msg = (doc.get("message") or "").splitlines()[0][:160] if doc.get("message") else ""
    where = ""
    frames = doc.get("frames") or []
    if frames:
        f = frames[-1]
        where = f"at {f['file'].rsplit('/', 1)[-1]}:{f['line']} in {f['function']}"
    who = ", ".join(x for x in (doc.get("process"), where) if x)
    return f"{doc['exception']}" + (f": {msg}" if msg else "") + (f" ({who})" if who else "")
