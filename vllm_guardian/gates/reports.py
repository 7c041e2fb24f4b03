"""Reports from gates that run elsewhere (a gateway checking live traffic). Pure parser.

The message (JSON, one per Redis pub/sub message on ``gates.reports_channel``)::

    {"instance_id": "vllm-8000" | "node-a/vllm-8000",
     "request_id": "req-123",
     "timestamp": 1767225600.5 | "2026-01-01T00:00:00Z",
     "check_level": "L1" .. "L5" (or 1..5),
     "type": "repeated_chars",          # what the check found, free text
     "details": {...} | "text"}         # shown in the incident

Every report is a failure at ``check_level``. ``parse_report`` returns a ``Report`` or
raises ``ReportError`` naming the field; ``for_node`` tells whether an
``instance_id`` addresses this node (a bare target name does; ``node/target`` only
when ``node`` is this one).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vllm_guardian.gates.judge import EXCERPT, GateFailure

FIELDS = ("instance_id", "request_id", "timestamp", "check_level", "details", "type")
MAX_BYTES = 64 * 1024


class ReportError(ValueError):
    """A message that is not a valid report; the text says which field and why."""


@dataclass(frozen=True)
class Report:
    node: str | None  # None: a bare target name
    target: str
    request_id: str
    timestamp: float  # wall time (unix seconds)
    level: str  # L1..L5
    type: str
    details: Any

    def failure(self) -> GateFailure:
        d = self.details if isinstance(self.details, dict) else {"details": self.details}
        prompt = str(d.get("prompt", "")) if isinstance(self.details, dict) else ""
        output = str(d.get("output", "")) if isinstance(self.details, dict) else str(self.details)
        expected = str(d.get("expected", "")) if isinstance(self.details, dict) else ""
        figures = {k: v for k, v in d.items() if k not in ("prompt", "output", "expected")}
        figures["reported_by"] = self.request_id
        return GateFailure(self.level, self.type, prompt[:EXCERPT], output[:EXCERPT], expected, figures)


def _level(value: Any) -> str:
    if isinstance(value, bool):
        raise ReportError("check_level: expected L1..L5 or 1..5, got a boolean")
    if isinstance(value, int) and 1 <= value <= 5:
        return f"L{value}"
    if isinstance(value, str):
        v = value.strip().upper()
        if v in ("L1", "L2", "L3", "L4", "L5"):
            return v
        if v in ("1", "2", "3", "4", "5"):
            return "L" + v
    raise ReportError(f"check_level: expected L1..L5 or 1..5, got {value!r}"[:200])


def _timestamp(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        t = float(value)
        if t > 1e12:  # milliseconds
            t /= 1000.0
        if math.isfinite(t) and t > 0:
            return t
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            if dt.tzinfo is not None:
                return dt.timestamp()
            raise ReportError("timestamp: an ISO 8601 time needs a time zone (e.g. Z)")
    raise ReportError(f"timestamp: expected unix seconds or an ISO 8601 time, got {value!r}"[:200])


def parse_report(raw: bytes | str) -> Report:
    if isinstance(raw, bytes):
        if len(raw) > MAX_BYTES:
            raise ReportError(f"message of {len(raw)} bytes (at most {MAX_BYTES})")
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ReportError("message is not UTF-8") from None
    try:
        msg = json.loads(raw)
    except ValueError as e:
        raise ReportError(f"not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise ReportError(f"expected a JSON object, got {type(msg).__name__}")
    missing = [f for f in FIELDS if f not in msg]
    if missing:
        raise ReportError("missing field(s): " + ", ".join(missing))
    inst = msg["instance_id"]
    if not isinstance(inst, str) or not inst.strip() or inst.count("/") > 1:
        raise ReportError(f"instance_id: expected 'target' or 'node/target', got {inst!r}"[:200])
    node, _, target = inst.strip().rpartition("/")
    if not target or (inst.count("/") == 1 and not node):
        raise ReportError(f"instance_id: expected 'target' or 'node/target', got {inst!r}"[:200])
    if not isinstance(msg["request_id"], (str, int)) or isinstance(msg["request_id"], bool):
        raise ReportError("request_id: expected a string")
    kind = msg["type"]
    if not isinstance(kind, str) or not kind.strip():
        raise ReportError("type: expected a non-empty string")
    return Report(
        node or None,
        target,
        str(msg["request_id"]),
        _timestamp(msg["timestamp"]),
        _level(msg["check_level"]),
        kind.strip()[:80],
        msg["details"],
    )


def for_node(report: Report, node: str) -> bool:
    return report.node is None or report.node == node
