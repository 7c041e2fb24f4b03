"""A known bug's machine-readable workaround (a catalog signature's ``workaround_apply``): the
arguments to add to the server's command line and the environment to set, e.g.
``{args: ["--mm-processor-cache-gb", "0"]}``. Only applied when a profile opts in
(docs/policy.md, Workarounds). A catalog can come from an operator's file, so what it may say is
bounded here: flags of vLLM's shape and plain values, at most ``MAX_ARGS`` of them; environment names
in upper case, never one that changes what program or library runs. Pure: data in, problems out."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_ARGS = 16
MAX_LEN = 128
_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")
_VALUE = re.compile(r"[A-Za-z0-9_.,:/=+-]+")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
# Names that decide which program or library runs, or where Python imports from: never set by a catalog.
FORBIDDEN_ENV = frozenset(
    {"PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "HOME"}
)


@dataclass(frozen=True)
class Workaround:
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"args": list(self.args), "env": dict(self.env)}


def parse_workaround(value: Any) -> tuple[Workaround | None, list[str]]:
    """The workaround and the problems (``"<key>: what is wrong"``) of a ``workaround_apply`` value."""
    problems: list[str] = []
    if not isinstance(value, dict):
        return None, [f"must be a mapping with args and/or env, got {type(value).__name__}"]
    for k in value:
        if k not in ("args", "env"):
            problems.append(f"{k}: unknown key (known: args, env)")
    args = value.get("args") or []
    env = value.get("env") or {}
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        problems.append("args: must be a list of strings")
        args = []
    if len(args) > MAX_ARGS:
        problems.append(f"args: at most {MAX_ARGS} items")
    for i, a in enumerate(args):
        if len(a) > MAX_LEN or not (_FLAG.fullmatch(a) or (_VALUE.fullmatch(a) and not a.startswith("-"))):
            problems.append(f"args[{i}]: {a[:40]!r} is neither a --flag nor a plain value")
    if args and not _FLAG.fullmatch(args[0]):
        problems.append("args[0]: must be a --flag")
    if not isinstance(env, dict):
        problems.append("env: must be a mapping of names to strings")
        env = {}
    for k, v in env.items():
        if not isinstance(k, str) or not _ENV_NAME.fullmatch(k) or k in FORBIDDEN_ENV or k.startswith("LD_"):
            problems.append(f"env.{k}: not a name a catalog may set")
        elif not isinstance(v, str) or len(v) > MAX_LEN or "\n" in v or "\0" in v:
            problems.append(f"env.{k}: must be a one-line string of at most {MAX_LEN} characters")
    if not args and not env:
        problems.append("needs args or env")
    if problems:
        return None, problems
    return Workaround(tuple(args), tuple(sorted(env.items()))), []
