"""The catalog's vocabulary: a known-bug signature and what a match of it says (pure).

A ``Signature`` is a set of *clauses*; each clause tests one kind of evidence:

- ``kinds``: the incident kinds it applies to (always required);
- ``hot_thread``: the hot (busy_loop) or blocked (stall) thread — its name,
  state and frames (function + file suffix);
- ``threads``: other threads' states (``absent: true``: no such thread);
- ``logs``: a regex searched in the target's log lines;
- ``metrics``: a metric window's pattern (``>``, ``<``, ``==``, ``flat``, ``rising``…);
- ``exception``: the crash's exception type, message and frames;
- ``cmdline``: a regex on the server's command line; ``role``: the focus process's role;
- ``device_idle``: the target's accelerator at ~0 % while the engine spins;
- ``versions``: the vLLM version range it applies to (``/version``).

A clause is required unless ``optional: true`` (optional ones raise the confidence);
``require: any`` makes one required clause enough instead of all of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from vllm_guardian.diagnosis.workaround import Workaround

THREAD_STATES = ("any", "active", "idle", "gil")
METRIC_OPS = (">", ">=", "<", "<=", "==", "flat", "rising", "falling")


@dataclass(frozen=True)
class FramePattern:
    """One frame: a function name (``popitem`` also matches ``LRUCache.popitem``) or a regex,
    and a file path suffix (aligned on ``/``) or a regex. ``within``: only the innermost N frames."""

    functions: tuple[str, ...] = ()
    function_regex: re.Pattern[str] | None = None
    files: tuple[str, ...] = ()
    file_regex: re.Pattern[str] | None = None
    within: int | None = None
    optional: bool = False

    def describe(self) -> str:
        fn = "|".join(self.functions) or (self.function_regex.pattern if self.function_regex else "*")
        fl = "|".join(self.files) or (self.file_regex.pattern if self.file_regex else "")
        return f"{fn} ({fl})" if fl else fn


@dataclass(frozen=True)
class ThreadPattern:
    name: re.Pattern[str] | None = None  # searched in the thread's name
    state: str = "any"  # any | active | idle | gil (active and holding the GIL)
    frames: tuple[FramePattern, ...] = ()
    absent: bool = False  # the clause holds when NO thread of the process matches
    optional: bool = False


@dataclass(frozen=True)
class LogPattern:
    regex: re.Pattern[str]
    optional: bool = False


@dataclass(frozen=True)
class MetricPattern:
    metric: str
    op: str
    value: float = 0.0
    optional: bool = False

    def describe(self) -> str:
        return f"{self.metric} {self.op}" + ("" if self.op in ("flat", "rising", "falling") else f" {self.value:g}")


@dataclass(frozen=True)
class ExceptionPattern:
    types: tuple[str, ...] = ()  # last dotted component compared: EngineDeadError matches vllm.….EngineDeadError
    message: re.Pattern[str] | None = None
    frames: tuple[FramePattern, ...] = ()
    optional: bool = False


@dataclass(frozen=True)
class Signature:
    id: str
    title: str
    kinds: tuple[str, ...]
    confidence: float  # when every required clause holds
    source: str  # where the knowledge comes from
    confirmed: tuple[str, ...] = ()  # what the sources confirm
    inferred: tuple[str, ...] = ()  # what the catalog's author inferred
    hot_thread: ThreadPattern | None = None
    threads: tuple[ThreadPattern, ...] = ()
    logs: tuple[LogPattern, ...] = ()
    metrics: tuple[MetricPattern, ...] = ()
    exception: ExceptionPattern | None = None
    cmdline: re.Pattern[str] | None = None
    roles: tuple[str, ...] = ()
    device_idle: bool | None = None  # True: a required clause; None: not tested
    device_idle_optional: bool = True
    require: str = "all"  # all | any
    versions_min: str | None = None  # applies from this version on (inclusive)
    versions_below: str | None = None  # applies below this version
    fixed_in: str | None = None
    references: tuple[str, ...] = ()
    workaround: str | None = None
    advice: str | None = None
    catalog: str = ""  # "<catalog name> <version>"
    workaround_apply: Workaround | None = None  # machine-readable; applied only when a profile opts in


@dataclass(frozen=True)
class Match:
    """A signature that fits the observation: what goes on the incident as ``diagnosis``."""

    id: str
    title: str
    confidence: float
    matched: tuple[str, ...]  # one line per clause that held, in words
    references: tuple[str, ...]
    workaround: str | None
    fixed_in: str | None
    advice: str | None = None
    source: str = ""
    confirmed: tuple[str, ...] = ()
    inferred: tuple[str, ...] = ()
    catalog: str = ""
    notes: tuple[str, ...] = ()  # e.g. "this server runs 0.33.0, fixed in 0.26.0"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "confidence": round(self.confidence, 2),
            "matched": list(self.matched),
            "references": list(self.references),
            "workaround": self.workaround,
            "fixed_in": self.fixed_in,
            "advice": self.advice,
            "source": self.source,
            "confirmed": list(self.confirmed),
            "inferred": list(self.inferred),
            "catalog": self.catalog,
            "notes": list(self.notes),
        }


def match_from_dict(d: Mapping[str, Any]) -> Match:
    return Match(
        str(d.get("id", "")),
        str(d.get("title", "")),
        float(d.get("confidence", 0.0)),
        tuple(d.get("matched") or ()),
        tuple(d.get("references") or ()),
        d.get("workaround"),
        d.get("fixed_in"),
        d.get("advice"),
        str(d.get("source", "")),
        tuple(d.get("confirmed") or ()),
        tuple(d.get("inferred") or ()),
        str(d.get("catalog", "")),
        tuple(d.get("notes") or ()),
    )


@dataclass(frozen=True)
class Catalog:
    name: str
    version: str
    path: str
    signatures: tuple[Signature, ...] = field(default_factory=tuple)
