"""The guardian config as a JSON Schema (draft 2020-12), derived from the same dataclasses and rules
the parser walks (``config/mapping.py``): editors get completion and types, the Helm chart's
``values.schema.json`` embeds it under ``config``, and a config the schema refuses is one the parser
refuses too (tests/unit/test_config_json_schema.py holds them to it).

What the schema cannot say is left to the parser, never guessed: rules that are code (a regular
expression that compiles, a taint key, a restart method's name) are described, not enforced; the
bounds a field declares (``setting(..., bound=...)``) are stated as ``minimum``/``maximum``; only
the parser's words for them (``rules.range_problem``) are its own. Pure: types in, a dict out.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any, Union

from vllm_guardian.config.rules import EXTRA_CHECKS, FORBIDDEN_KEYS, RULES, describe
from vllm_guardian.config.schema import Config

DIALECT = "https://json-schema.org/draft/2020-12/schema"
# rules whose words are bounds a schema can state (the parser's predicates are the same numbers)
_NUMERIC: dict[str, dict[str, Any]] = {
    "positive": {"exclusiveMinimum": 0},
    "nonneg": {"minimum": 0},
    "ratio": {"minimum": 0, "maximum": 1},
    "port": {"minimum": 1, "maximum": 65535},
}
_SCALARS: dict[Any, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _nullable(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return inner, True
    return tp, False


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    t = schema.get("type")
    if isinstance(t, str):
        return {**schema, "type": [t, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def _rule(check: str, tp: Any) -> dict[str, Any]:
    words = RULES[check][0].format(base="an integer" if tp is int else "a number")
    if check in _NUMERIC:
        return dict(_NUMERIC[check])
    if words.startswith("one of "):
        return {"enum": words.removeprefix("one of ").split(", ")}
    return {"description": words}


def _bounded(out: dict[str, Any], bound: tuple[Any, ...]) -> dict[str, Any]:
    """The limits a field declares (``Limit``: ``low``/``high``) as ``minimum``/``maximum``."""
    for limit in bound:
        if limit.low is not None:
            out["minimum"] = max(limit.low, out.get("minimum", limit.low))
        if limit.high is not None:
            out["maximum"] = min(limit.high, out.get("maximum", limit.high))
    return out


def _value(tp: Any, check: str | None, doc: str, bound: tuple[Any, ...] = ()) -> dict[str, Any]:
    tp, nullable = _nullable(tp)
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        out = section(tp)
        nullable = True  # a section left null takes its defaults, as an absent one
    elif origin is tuple:
        out = {"type": "array", "items": _value(typing.get_args(tp)[0], None, "")}
        nullable = True
    elif origin is dict:
        out = {"type": "object", "additionalProperties": _value(typing.get_args(tp)[1], None, "")}
        nullable = True
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        out = {"type": "string", "enum": [m.value for m in tp]}
    else:
        out = {"type": _SCALARS[tp]}
        if check:
            out.update(_rule(check, tp))
        _bounded(out, bound)
    if doc:
        out["description"] = f"{doc} ({out['description']})" if "description" in out else doc
    elif "description" not in out and check:
        out["description"] = describe(tp, check)
    return _or_null(out) if nullable else out


def section(cls: Any) -> dict[str, Any]:
    """The schema of one config section: its keys, each typed and bounded; no other key."""
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    required = []
    for f in dataclasses.fields(cls):
        check = f.metadata.get("check") or EXTRA_CHECKS.get((cls, f.name))
        props[f.name] = _value(hints[f.name], check, str(f.metadata.get("doc") or ""), f.metadata.get("bound", ()))
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = required
    forbidden = [key for (c, key) in FORBIDDEN_KEYS if c is cls]
    if forbidden:  # refused with a reason of their own by the parser; never allowed here either
        out["not"] = {"anyOf": [{"required": [key]} for key in forbidden]}
    return out


def config_schema() -> dict[str, Any]:
    """The whole guardian config (``guardian.yaml``) as a JSON Schema document."""
    return {
        "$schema": DIALECT,
        "title": "vllm-guardian configuration (guardian.yaml)",
        **section(Config),
    }
