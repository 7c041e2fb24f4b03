"""The signature catalog's file format, declared the way the config is (``config/schema_fields.py``):
one frozen dataclass per mapping, each field with its type, its rule and its doc. The config's
parser (``config/mapping.py``) walks a catalog document onto them with the rules below, so types,
unknown keys, required keys, regular expressions and choices are judged by the same code as the
config's; ``catalog_load.py`` then checks what spans fields and builds the ``Signature``s.
Decides nothing itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from vllm_guardian.config.schema_fields import required, setting
from vllm_guardian.diagnosis.signature import METRIC_OPS, THREAD_STATES
from vllm_guardian.diagnosis.version import is_version
from vllm_guardian.model import Kind, Role

SCHEMA = 1
KINDS = tuple(k.value for k in Kind)
ROLES = tuple(r.value for r in Role)
_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def _one_of(what: str, options: tuple[str, ...]) -> tuple[str, Callable[[Any], bool]]:
    return f"{what}one of " + ", ".join(options), lambda v: v in options


# check name -> (expectation, predicate): the catalog's rules, beside the config's (config/rules.py)
CATALOG_RULES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "catalog_schema": (f"{SCHEMA} (the catalog format this guardian reads)", lambda v: v == SCHEMA),
    "text": ("a non-empty string", lambda v: bool(v.strip())),
    "catalog_id": ("lower-case letters, digits, '.', '_' or '-'", lambda v: _ID.match(v) is not None),
    "incident_kind": _one_of("an incident kind: ", KINDS),
    "process_role": _one_of("a process role: ", ROLES),
    "thread_state": _one_of("", THREAD_STATES),
    "metric_op": _one_of("", METRIC_OPS),
    "require": _one_of("", ("all", "any")),
    "device_idle": _one_of("", ("required", "optional")),
    "confidence": ("a number in (0, 1]", lambda v: 0 < v <= 1),
    "within": ("an integer >= 1", lambda v: v >= 1),
    "version": ('a version like "0.26.0"', is_version),
}


@dataclass(frozen=True)
class FrameDoc:
    function: tuple[str, ...] = setting((), "text", "a function name, or a list of them", many=True)
    function_regex: str | None = setting(None, "regex")
    file: tuple[str, ...] = setting((), "text", "a file name's end, or a list of them", many=True)
    file_regex: str | None = setting(None, "regex")
    within: int | None = setting(None, "within", "the frame is among the innermost N")
    optional: bool = False


@dataclass(frozen=True)
class ThreadDoc:
    name: str | None = setting(None, "regex", "the thread's name")
    state: str = setting("any", "thread_state")
    frames: tuple[FrameDoc, ...] = ()
    absent: bool = setting(False, doc="no thread matches")
    optional: bool = False


@dataclass(frozen=True)
class LogDoc:
    regex: str = required("regex")
    optional: bool = False


@dataclass(frozen=True)
class MetricDoc:
    metric: str = required("text", "a series name of the guardian, e.g. vllm.num_requests_waiting")
    op: str = required("metric_op")
    value: float = setting(0.0, doc="the number compared (not for flat, rising, falling)")
    optional: bool = False


@dataclass(frozen=True)
class ExceptionDoc:
    type: tuple[str, ...] = setting((), "text", "an exception type's name, or a list of them", many=True)
    message: str | None = setting(None, "regex")
    frames: tuple[FrameDoc, ...] = ()
    optional: bool = False


@dataclass(frozen=True)
class VersionsDoc:
    min: str | None = setting(None, "version", "the first vLLM version affected")
    below: str | None = setting(None, "version", "the first vLLM version not affected")


@dataclass(frozen=True)
class WorkaroundDoc:
    args: tuple[str, ...] = setting((), doc="server arguments added on the restart (diagnosis/workaround.py)")
    env: dict[str, str] = setting(dict, doc="environment set on the restart")


@dataclass(frozen=True)
class SignatureDoc:
    id: str = required("catalog_id", "unique over all catalogs loaded")
    title: str = required("text")
    source: str = required("text", "where it is known from (issues, PRs)")
    confidence: float = required("confidence", "when every required clause holds")
    kinds: tuple[str, ...] = setting((), "incident_kind", "one or more incident kinds", many=True)
    confirmed: tuple[str, ...] = setting((), "text", "what the sources show", many=True)
    inferred: tuple[str, ...] = setting((), "text", "what the author concluded", many=True)
    require: str = setting("all", "require", "all required clauses, or any one")
    hot_thread: ThreadDoc | None = None
    threads: tuple[ThreadDoc, ...] = ()
    logs: tuple[LogDoc, ...] = ()
    metrics: tuple[MetricDoc, ...] = ()
    exception: ExceptionDoc | None = None
    cmdline: str | None = setting(None, "regex")
    role: tuple[str, ...] = setting((), "process_role", many=True)
    device_idle: str | None = setting(None, "device_idle")
    versions: VersionsDoc | None = None
    fixed_in: str | None = setting(None, "version")
    references: tuple[str, ...] = setting((), "text", many=True)
    workaround: str | None = setting(None, "text")
    workaround_apply: WorkaroundDoc | None = None
    advice: str | None = setting(None, "text")


@dataclass(frozen=True)
class CatalogDoc:
    schema: int = required("catalog_schema")
    name: str = required("text")
    version: str = required("text", 'the catalog\'s version, a string such as "2026.12.1"')
    signatures: tuple[SignatureDoc, ...] = required()
    description: str | None = None
