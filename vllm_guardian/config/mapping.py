"""The generic walk of loaded data onto the config dataclasses (``dataclasses.fields`` +
``typing.get_type_hints``): each value checked against its type and rule, every problem collected as
a ``"key.path: what is wrong"`` line; a value that failed is ``INVALID`` so the walk goes on."""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from typing import Any, Union

from vllm_guardian.store.url import problem as store_url_problem
from vllm_guardian.config.rules import (
    EXTRA_CHECKS,
    FORBIDDEN_KEYS,
    RULES,
    Rules,
    describe,
    join_path,
    range_problem,
    regex_problem,
    show,
)


class Invalid:
    """Stands in for a value that failed validation, so checking can go on."""

    def __repr__(self) -> str:
        return "<invalid>"


INVALID = Invalid()


def _is_optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp)


def _strip_optional(tp: Any) -> Any:
    inner = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(inner) != 1:
        raise TypeError(f"unsupported config type {tp!r}")
    return inner[0]


class Parser:
    """One parse: walks the data against the dataclasses, collecting problems. ``rules``: more
    rules by name, for another document declared the same way (the diagnosis catalog)."""

    def __init__(self, rules: Rules | None = None) -> None:
        self.problems: list[str] = []
        self.rules: Rules = {**RULES, **rules} if rules else RULES

    def wrong(
        self, path: str, tp: Any, check: str | None, value: Any, nullable: bool = False, detail: str = ""
    ) -> Invalid:
        expected = describe(tp, check, self.rules) + (" or null" if nullable else "")
        self.problems.append(f"{path}: expected {expected}, got {show(value)}{detail}")
        return INVALID

    def value(self, tp: Any, value: Any, path: str, check: str | None = None, many: bool = False) -> Any:
        nullable = _is_optional(tp)
        if nullable:
            if value is None:
                return None
            tp = _strip_optional(tp)
        if dataclasses.is_dataclass(tp):
            return self.section(tp, value, path, nullable)
        origin = typing.get_origin(tp)
        if origin is tuple:
            return self.sequence(tp, value, path, nullable, check, many)
        if origin is dict:
            return self.mapping(tp, value, path, nullable)
        return self.scalar(tp, value, path, check, nullable)

    def scalar(self, tp: Any, value: Any, path: str, check: str | None, nullable: bool) -> Any:
        if tp is bool:
            ok = isinstance(value, bool)
        elif tp is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif tp is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        elif tp is str:
            ok = isinstance(value, str)
        elif isinstance(tp, type) and issubclass(tp, enum.Enum):
            ok = isinstance(value, str) and value in {m.value for m in tp}
        else:
            raise TypeError(f"unsupported config type {tp!r} at {path}")
        if not ok:
            return self.wrong(path, tp, check, value, nullable)
        if check and not self.rules[check][1](value):
            detail = f" ({regex_problem(value)})" if check in ("regex", "expect") else ""
            if check == "redis_url":
                detail = f" ({store_url_problem(value)})"
            return self.wrong(path, tp, check, value, nullable, detail)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return tp(value)
        return float(value) if tp is float else value

    def sequence(
        self, tp: Any, value: Any, path: str, nullable: bool = False, check: str | None = None, many: bool = False
    ) -> Any:
        """A list; each item checked against ``check``. ``many``: one item alone stands for a list of one."""
        if value is None:
            return ()
        item_tp = typing.get_args(tp)[0]
        if many and not isinstance(value, list):
            return (self.value(item_tp, value, path, check),)
        if not isinstance(value, list):
            return self.wrong(path, tp, None, value, nullable)
        return tuple(self.value(item_tp, item, f"{path}[{i}]", check) for i, item in enumerate(value))

    def mapping(self, tp: Any, value: Any, path: str, nullable: bool = False) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            return self.wrong(path, tp, None, value, nullable)
        key_tp, value_tp = typing.get_args(tp)
        out = {}
        for key, item in value.items():
            if not isinstance(key, key_tp):
                self.problems.append(f"{join_path(path, key)}: expected a string key, got {show(key)}")
                continue
            out[key] = self.value(value_tp, item, join_path(path, key))
        return out

    def section(self, cls: Any, value: Any, path: str, nullable: bool = False) -> Any:
        if value is None:
            value = {}
        if not isinstance(value, dict):
            return self.wrong(path, cls, None, value, nullable)
        fields = dataclasses.fields(cls)
        known = [f.name for f in fields]
        for key in value:
            if (cls, key) in FORBIDDEN_KEYS:
                self.problems.append(f"{join_path(path, key)}: {FORBIDDEN_KEYS[(cls, key)]}")
            elif key not in known:
                self.problems.append(f"{join_path(path, key)}: unknown key (known: {', '.join(known)})")
        hints = typing.get_type_hints(cls)
        kwargs = {}
        for f in fields:
            where = join_path(path, f.name)
            if f.name in value:
                check = f.metadata.get("check") or EXTRA_CHECKS.get((cls, f.name))
                kwargs[f.name] = self.value(hints[f.name], value[f.name], where, check, bool(f.metadata.get("many")))
                bound = range_problem(f, kwargs[f.name])
                if bound:
                    self.problems.append(f"{where}: expected {bound}, got {show(value[f.name])}")
                    kwargs[f.name] = INVALID
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                self.problems.append(f"{where}: required")
                kwargs[f.name] = INVALID
        return cls(**kwargs)
