"""Crash forensics for ``engine_dead``: the log tail → the last traceback → the catalog (pure assembly).

``crash_report(tail, signatures, observation)`` turns a ``LogTail`` (already read, bounded,
redacted) into a ``CrashReport``: where the log came from, the parsed ``Crash`` (None without a
traceback, and ``error`` says why: no source, read failed, no traceback in N lines) and the
catalog's matches (a log line alone can identify a signature, e.g. "Failed to advance FSM").
``CrashReport.to_dict()`` is the incident's ``crash`` document::

    {"source": "file /var/log/vllm.log", "lines_read": 812, "truncated": false,
     "exception": "AssertionError", "message": "...", "process": "EngineCore_DP0", "pid": 123,
     "frames": [{"file", "line", "function", "code"}, ...], "chain": [...], "text": "...",
     "error": null, "followed_by": [...]}
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from vllm_guardian.diagnosis.log_tail import LogTail
from vllm_guardian.diagnosis.matcher import Crash, Observation, diagnose
from vllm_guardian.diagnosis.signature import Match, Signature
from vllm_guardian.diagnosis.traceback_parse import parse_last_traceback, strip_line


@dataclass(frozen=True)
class CrashReport:
    """What the log tail says about a dead engine."""

    source: str | None  # the log source, in words
    lines_read: int
    truncated: bool
    crash: Crash | None  # the last Python traceback; None: see ``error``
    matches: tuple[Match, ...]  # the catalog's, over the traceback and the log lines
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        """The incident's ``crash`` document (the matches go to its ``diagnosis``)."""
        doc: dict[str, Any] = {
            "source": self.source,
            "lines_read": self.lines_read,
            "truncated": self.truncated,
            "exception": None,
            "message": None,
            "process": None,
            "pid": None,
            "frames": [],
            "chain": [],
            "text": "",
            "error": self.error,
        }
        if self.crash is not None:
            doc.update(self.crash.to_dict())
        return doc


def crash_report(tail: LogTail, signatures: Sequence[Signature], obs: Observation) -> CrashReport:
    crash = parse_last_traceback(tail.lines) if tail.lines else None
    clean = tuple(strip_line(x)[2] for x in tail.lines)
    matches = diagnose(signatures, replace(obs, crash=crash, log_lines=clean + tuple(obs.log_lines)))
    error = tail.error
    if crash is None and error is None:
        error = f"no Python traceback in the last {len(tail.lines)} log lines"
    return CrashReport(
        tail.source.describe() if tail.source else None,
        len(tail.lines),
        tail.truncated,
        crash,
        tuple(matches),
        error,
    )


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
