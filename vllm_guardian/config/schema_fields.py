"""What every configuration section is built from: the ``Mode`` of a kind, and ``setting``, a field
with its default, its validation rule (``check``: ``vllm_guardian.config.rules``) and its doc.
Decides nothing; read by the schema modules (``config/schema.py``, ``config/schema_detectors.py``).
"""

from __future__ import annotations

from dataclasses import field
from enum import Enum


class Mode(str, Enum):
    """What the guardian does with an incident of one kind: record it, alert, or also remediate."""

    OBSERVE = "observe"
    ALERT = "alert"
    REMEDIATE = "remediate"

    def __str__(self) -> str:
        return self.value


def setting(default, check: str | None = None, doc: str = ""):
    """A dataclass field with ``default`` (copied per instance when mutable, or made by a callable),
    its validation rule ``check`` (``config/rules.py``) and its ``doc``."""
    md = {"doc": doc}
    if check:
        md["check"] = check
    if isinstance(default, (list, dict, tuple)) or callable(default):
        factory = default if callable(default) else (lambda d=default: type(d)(d))
        return field(default_factory=factory, metadata=md)
    return field(default=default, metadata=md)
