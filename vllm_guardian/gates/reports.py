"""Reports from gates that run elsewhere (a gateway checking live traffic). Pure parser.

The message (JSON, one per Redis pub/sub message on ``gates.reports_channel``)::

    {"instance_id": "vllm-8000" | "node-a/vllm-8000",
     "request_id": "req-123",
     "timestamp": 1767225600.5 | "2026-01-01T00:00:00Z",
     "check_level": "L1" .. "L5" (or 1..5),
     "type": "repeated_chars",          # what the check found, free text
     "details": {...} | "text"}         # shown in the incident

Signed reports also carry ``kid`` and ``sig`` (``gates.trust``). Every report is a
failure at ``check_level``. ``parse_message`` applies the bounds (``gates.bounds``: 64 KiB,
8 levels of nesting, a parser's RecursionError caught) and returns the object;
``report_from`` reads the fields; ``parse_report`` is both. Each raises ``ReportError``
naming the field. ``details`` is kept flattened (at most 16 ``path: scalar`` entries,
strings of 200 characters): nothing deep or huge reaches an incident. ``for_node`` tells
whether an ``instance_id`` addresses this node: only ``node/target`` with this node's name;
a bare target name addresses no node (it would reach every node that has such a target).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vllm_guardian.gates import bounds
from vllm_guardian.gates.judge import EXCERPT, GateFailure

FIELDS = ("instance_id", "request_id", "timestamp", "check_level", "details", "type")
MAX_BYTES = bounds.MAX_BYTES
MAX_ID = 200  # characters of instance_id / request_id


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
    details: dict[str, bounds.Scalar]  # flat: path -> scalar (bounds.flatten)

    @property
    def instance(self) -> str:
        return f"{self.node}/{self.target}" if self.node else self.target

    def failure(self) -> GateFailure:
        d = self.details
        prompt, output, expected = (str(d.get(k) or "") for k in ("prompt", "output", "expected"))
        if not output and "value" in d:  # details was a plain text
            output = str(d["value"])
        figures: dict[str, Any] = {k: v for k, v in d.items() if k not in ("prompt", "output", "expected", "value")}
        figures["reported_by"] = self.request_id
        return GateFailure(
            self.level, self.type, prompt[:EXCERPT], output[:EXCERPT], expected[:EXCERPT], figures, source="report"
        )


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


def parse_message(raw: bytes | str) -> dict[str, Any]:
    """The message as a JSON object, within the bounds; ``ReportError`` otherwise."""
    try:
        msg = bounds.loads(raw, MAX_BYTES)
    except bounds.BoundsError as e:
        raise ReportError(str(e)) from None
    if not isinstance(msg, dict):
        raise ReportError(f"expected a JSON object, got {type(msg).__name__}")
    return msg


def report_from(msg: dict[str, Any]) -> Report:
    missing = [f for f in FIELDS if f not in msg]
    if missing:
        raise ReportError("missing field(s): " + ", ".join(missing))
    inst = msg["instance_id"]
    if not isinstance(inst, str) or not inst.strip() or inst.count("/") > 1 or len(inst) > MAX_ID:
        raise ReportError(f"instance_id: expected 'target' or 'node/target', got {inst!r}"[:200])
    node, _, target = inst.strip().rpartition("/")
    if not target or (inst.count("/") == 1 and not node):
        raise ReportError(f"instance_id: expected 'target' or 'node/target', got {inst!r}"[:200])
    rid = msg["request_id"]
    if not isinstance(rid, (str, int)) or isinstance(rid, bool) or len(str(rid)) > MAX_ID:
        raise ReportError(f"request_id: expected a string of at most {MAX_ID} characters")
    kind = msg["type"]
    if not isinstance(kind, str) or not kind.strip():
        raise ReportError("type: expected a non-empty string")
    return Report(
        node or None,
        target,
        str(rid),
        _timestamp(msg["timestamp"]),
        _level(msg["check_level"]),
        kind.strip()[:80],
        bounds.flatten(msg["details"]),
    )


def parse_report(raw: bytes | str) -> Report:
    return report_from(parse_message(raw))


def for_node(report: Report, node: str) -> bool:
    return report.node == node
