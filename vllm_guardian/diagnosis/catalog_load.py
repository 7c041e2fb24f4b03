"""Loads and validates signature catalogs (YAML) into ``Catalog`` objects.

Reads: the catalogs shipped in ``guardian/diagnosis/catalog/*.yaml`` (package data)
and any extra files named by config ``diagnosis.catalogs`` (a file or a folder of
``*.yaml``). Decides: whether each file is a valid catalog. Every problem is a
``"<file>: signatures[3].hot_thread.frames[0].file: what is wrong"`` line, all of
them raised at once in one ``CatalogError``; nothing is half-loaded.

The format (``schema: 1``)::

    schema: 1
    name: vllm-known-bugs
    version: "2026.12.1"
    signatures:
      - id: vllm-mm-cache-lru-busy-loop        # unique over all catalogs loaded
        title: ...
        kinds: [busy_loop, engine_stall]
        confidence: 0.9                          # 0..1 when every required clause holds
        source: "vLLM #43941, #47958; PR #43595"
        confirmed: [...]                         # what the sources show
        inferred: [...]                          # what the author concluded
        require: all                             # or any
        hot_thread: {name: REGEX, state: any|active|idle|gil,
                     frames: [{function: NAME | [NAMES] | function_regex: RE,
                               file: SUFFIX | [SUFFIXES] | file_regex: RE,
                               within: N, optional: bool}]}
        threads: [{name: REGEX, state: ..., frames: [...], absent: bool, optional: bool}]
        logs: [{regex: RE, optional: bool}]
        metrics: [{metric: SERIES_NAME (the guardian's, e.g. vllm.num_requests_waiting), op: ">"|">="|"<"|"<="|"=="|flat|rising|falling, value: N, optional: bool}]
        exception: {type: NAME | [NAMES], message: RE, frames: [...], optional: bool}
        cmdline: RE
        role: api_server | engine_core | worker | [..]
        device_idle: required | optional
        versions: {min: "0.10.0", below: "0.26.0"}
        fixed_in: "0.26.0"
        references: [...]
        workaround: "..."
        workaround_apply: {args: ["--mm-processor-cache-gb", "0"], env: {NAME: value}}  # diagnosis/workaround.py
        advice: "..."

A later catalog may not reuse an id (an error names both files). Pure but for the reads.
"""  # noqa: E501

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

from vllm_guardian.errors import CatalogError
from vllm_guardian.model import Kind, Role
from vllm_guardian.diagnosis.signature import (
    METRIC_OPS,
    THREAD_STATES,
    Catalog,
    ExceptionPattern,
    FramePattern,
    LogPattern,
    MetricPattern,
    Signature,
    ThreadPattern,
)
from vllm_guardian.diagnosis.version import is_version
from vllm_guardian.diagnosis.workaround import Workaround, parse_workaround

SCHEMA = 1
KINDS = tuple(k.value for k in Kind)
ROLES = tuple(r.value for r in Role)
_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_SIG_KEYS = {
    "id",
    "title",
    "kinds",
    "confidence",
    "source",
    "confirmed",
    "inferred",
    "require",
    "hot_thread",
    "threads",
    "logs",
    "metrics",
    "exception",
    "cmdline",
    "role",
    "device_idle",
    "versions",
    "fixed_in",
    "references",
    "workaround",
    "workaround_apply",
    "advice",
}
_TOP_KEYS = {"schema", "name", "version", "description", "signatures"}


class _Problems:
    def __init__(self, where: str) -> None:
        self.where = where
        self.lines: list[str] = []

    def add(self, path: str, what: str) -> None:
        self.lines.append(f"{self.where}: {path}: {what}" if path else f"{self.where}: {what}")


# ---------------------------------------------------------------- small typed readers
def _str(v: Any, path: str, p: _Problems, *, required: bool = False) -> str | None:
    if v is None:
        if required:
            p.add(path, "required")
        return None
    if not isinstance(v, str) or not v.strip():
        p.add(path, f"must be a non-empty string, got {v!r:.60}")
        return None
    return v


def _strs(v: Any, path: str, p: _Problems) -> tuple[str, ...]:
    if v is None:
        return ()
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(x, str) and x for x in items):
        p.add(path, f"must be a string or a list of strings, got {v!r:.60}")
        return ()
    return tuple(items)


def _regex(v: Any, path: str, p: _Problems) -> re.Pattern[str] | None:
    s = _str(v, path, p)
    if s is None:
        return None
    try:
        return re.compile(s)
    except re.error as e:
        p.add(path, f"not a valid regular expression: {e}")
        return None


def _bool(v: Any, path: str, p: _Problems) -> bool:
    if v is None:
        return False
    if not isinstance(v, bool):
        p.add(path, f"must be true or false, got {v!r:.60}")
        return False
    return v


def _map(v: Any, path: str, p: _Problems, keys: set[str]) -> Mapping[str, Any] | None:
    if not isinstance(v, Mapping):
        p.add(path, f"must be a mapping, got {type(v).__name__}")
        return None
    for k in v:
        if k not in keys:
            p.add(f"{path}.{k}", f"unknown key (known: {', '.join(sorted(keys))})")
    return v


def _list(v: Any, path: str, p: _Problems) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        p.add(path, f"must be a list, got {type(v).__name__}")
        return []
    return v


def _workaround_apply(v: Any, path: str, p: _Problems) -> Workaround | None:
    if v is None:
        return None
    found, problems = parse_workaround(v)
    for line in problems:
        key, _, what = line.partition(": ")
        p.add(f"{path}.{key}" if what else path, what or line)
    return found


# ---------------------------------------------------------------- clauses
def _frame(v: Any, path: str, p: _Problems) -> FramePattern | None:
    d = _map(v, path, p, {"function", "function_regex", "file", "file_regex", "within", "optional"})
    if d is None:
        return None
    within = d.get("within")
    if within is not None and (not isinstance(within, int) or isinstance(within, bool) or within < 1):
        p.add(f"{path}.within", f"must be a positive integer, got {within!r}")
        within = None
    fp = FramePattern(
        _strs(d.get("function"), f"{path}.function", p),
        _regex(d.get("function_regex"), f"{path}.function_regex", p),
        tuple(f.replace("\\", "/") for f in _strs(d.get("file"), f"{path}.file", p)),
        _regex(d.get("file_regex"), f"{path}.file_regex", p),
        within,
        _bool(d.get("optional"), f"{path}.optional", p),
    )
    if not (fp.functions or fp.function_regex or fp.files or fp.file_regex):
        p.add(path, "a frame needs function/function_regex or file/file_regex")
    return fp


def _frames(v: Any, path: str, p: _Problems) -> tuple[FramePattern, ...]:
    out = (_frame(x, f"{path}[{i}]", p) for i, x in enumerate(_list(v, path, p)))
    return tuple(f for f in out if f is not None)


def _thread(v: Any, path: str, p: _Problems) -> ThreadPattern | None:
    d = _map(v, path, p, {"name", "state", "frames", "absent", "optional"})
    if d is None:
        return None
    state = d.get("state", "any")
    if state not in THREAD_STATES:
        p.add(f"{path}.state", f"must be one of {', '.join(THREAD_STATES)}, got {state!r}")
        state = "any"
    tp = ThreadPattern(
        _regex(d.get("name"), f"{path}.name", p),
        state,
        _frames(d.get("frames"), f"{path}.frames", p),
        _bool(d.get("absent"), f"{path}.absent", p),
        _bool(d.get("optional"), f"{path}.optional", p),
    )
    if tp.name is None and not tp.frames and state == "any":
        p.add(path, "a thread pattern needs a name, a state or frames")
    return tp


def _metric(v: Any, path: str, p: _Problems) -> MetricPattern | None:
    d = _map(v, path, p, {"metric", "op", "value", "optional"})
    if d is None:
        return None
    name = _str(d.get("metric"), f"{path}.metric", p, required=True)
    op = d.get("op")
    if op not in METRIC_OPS:
        p.add(f"{path}.op", f"must be one of {', '.join(METRIC_OPS)}, got {op!r}")
        return None
    value = d.get("value", 0)
    if op not in ("flat", "rising", "falling") and (isinstance(value, bool) or not isinstance(value, (int, float))):
        p.add(f"{path}.value", f"must be a number for op {op!r}, got {value!r}")
        return None
    return MetricPattern(name or "?", op, float(value or 0), _bool(d.get("optional"), f"{path}.optional", p))


def _exception(v: Any, path: str, p: _Problems) -> ExceptionPattern | None:
    d = _map(v, path, p, {"type", "message", "frames", "optional"})
    if d is None:
        return None
    ep = ExceptionPattern(
        _strs(d.get("type"), f"{path}.type", p),
        _regex(d.get("message"), f"{path}.message", p),
        _frames(d.get("frames"), f"{path}.frames", p),
        _bool(d.get("optional"), f"{path}.optional", p),
    )
    if not (ep.types or ep.message or ep.frames):
        p.add(path, "an exception pattern needs a type, a message or frames")
    return ep


def _version(v: Any, path: str, p: _Problems) -> str | None:
    if v is None:
        return None
    s = str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
    if not isinstance(s, str) or not is_version(s):
        p.add(path, f'must be a version like "0.26.0", got {v!r}')
        return None
    return s


def _signature(v: Any, path: str, p: _Problems, label: str) -> Signature | None:
    d = _map(v, path, p, _SIG_KEYS)
    if d is None:
        return None
    n = len(p.lines)
    sid = _str(d.get("id"), f"{path}.id", p, required=True)
    if sid and not _ID.match(sid):
        p.add(f"{path}.id", "must be lower-case letters, digits, '.', '_' or '-'")
    title = _str(d.get("title"), f"{path}.title", p, required=True)
    source = _str(d.get("source"), f"{path}.source", p, required=True)
    kinds = _strs(d.get("kinds"), f"{path}.kinds", p)
    if not kinds:
        p.add(f"{path}.kinds", f"required: one or more of {', '.join(KINDS)}")
    for k in kinds:
        if k not in KINDS:
            p.add(f"{path}.kinds", f"unknown incident kind {k!r} (known: {', '.join(KINDS)})")
    conf = d.get("confidence")
    if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not 0 < conf <= 1:
        p.add(f"{path}.confidence", f"must be a number in (0, 1], got {conf!r}")
        conf = 0.5
    require = d.get("require", "all")
    if require not in ("all", "any"):
        p.add(f"{path}.require", f"must be all or any, got {require!r}")
    hot = _thread(d["hot_thread"], f"{path}.hot_thread", p) if "hot_thread" in d else None
    if hot is not None and hot.absent:
        p.add(f"{path}.hot_thread.absent", "the hot thread cannot be absent (use threads)")
    threads = tuple(
        t
        for t in (
            _thread(x, f"{path}.threads[{i}]", p) for i, x in enumerate(_list(d.get("threads"), f"{path}.threads", p))
        )
        if t
    )
    logs = []
    for i, x in enumerate(_list(d.get("logs"), f"{path}.logs", p)):
        lm = _map(x, f"{path}.logs[{i}]", p, {"regex", "optional"})
        rx = _regex(lm.get("regex"), f"{path}.logs[{i}].regex", p) if lm is not None else None
        if lm is not None and rx is None and "regex" not in lm:
            p.add(f"{path}.logs[{i}].regex", "required")
        if rx is not None and lm is not None:
            logs.append(LogPattern(rx, _bool(lm.get("optional"), f"{path}.logs[{i}].optional", p)))
    metrics = tuple(
        mp
        for mp in (
            _metric(x, f"{path}.metrics[{i}]", p) for i, x in enumerate(_list(d.get("metrics"), f"{path}.metrics", p))
        )
        if mp
    )
    exc = _exception(d["exception"], f"{path}.exception", p) if "exception" in d else None
    roles = _strs(d.get("role"), f"{path}.role", p)
    for r in roles:
        if r not in ROLES:
            p.add(f"{path}.role", f"unknown role {r!r} (known: {', '.join(ROLES)})")
    idle = d.get("device_idle")
    if idle not in (None, "required", "optional"):
        p.add(f"{path}.device_idle", f"must be required or optional, got {idle!r}")
        idle = None
    versions = d.get("versions") or {}
    vmap = _map(versions, f"{path}.versions", p, {"min", "below"}) if versions else {}
    refs = _strs(d.get("references"), f"{path}.references", p)
    apply = _workaround_apply(d.get("workaround_apply"), f"{path}.workaround_apply", p)
    sig = Signature(
        id=sid or "?",
        title=title or "?",
        kinds=kinds,
        confidence=float(conf),
        source=source or "?",
        confirmed=_strs(d.get("confirmed"), f"{path}.confirmed", p),
        inferred=_strs(d.get("inferred"), f"{path}.inferred", p),
        hot_thread=hot,
        threads=threads,
        logs=tuple(logs),
        metrics=metrics,
        exception=exc,
        cmdline=_regex(d.get("cmdline"), f"{path}.cmdline", p),
        roles=roles,
        device_idle=True if idle else None,
        device_idle_optional=idle != "required",
        require=require if require in ("all", "any") else "all",
        versions_min=_version((vmap or {}).get("min"), f"{path}.versions.min", p),
        versions_below=_version((vmap or {}).get("below"), f"{path}.versions.below", p),
        fixed_in=_version(d.get("fixed_in"), f"{path}.fixed_in", p),
        references=refs,
        workaround=_str(d.get("workaround"), f"{path}.workaround", p),
        advice=_str(d.get("advice"), f"{path}.advice", p),
        catalog=label,
        workaround_apply=apply,
    )
    if not _evidence_clauses(sig):
        p.add(
            path,
            "needs at least one clause besides kinds (hot_thread, threads, logs, metrics, exception, "
            "cmdline, role, device_idle)",
        )
    return sig if len(p.lines) == n else None


def _evidence_clauses(s: Signature) -> int:
    return (
        bool(s.hot_thread)
        + len(s.threads)
        + len(s.logs)
        + len(s.metrics)
        + bool(s.exception)
        + bool(s.cmdline)
        + bool(s.roles)
        + bool(s.device_idle)
    )


# ---------------------------------------------------------------- documents and files
def parse_catalog(data: Any, where: str) -> Catalog:
    """A parsed YAML document → ``Catalog``; ``CatalogError`` listing every problem."""
    p = _Problems(where)
    top = _map(data, "", p, _TOP_KEYS) if data is not None else None
    if data is None:
        p.add("", "empty file")
    if top is None:
        raise CatalogError("\n".join(p.lines))
    if top.get("schema") != SCHEMA:
        p.add("schema", f"must be {SCHEMA} (the catalog format this guardian reads), got {top.get('schema')!r}")
    name = _str(top.get("name"), "name", p, required=True) or "?"
    version = top.get("version")
    if not isinstance(version, str) or not version:
        p.add("version", f'required: a string such as "2026.12.1", got {version!r}')
        version = "?"
    label = f"{name} {version}"
    sigs: list[Signature] = []
    seen: set[str] = set()
    raw = top.get("signatures")
    if not isinstance(raw, list) or not raw:
        p.add("signatures", "required: a non-empty list")
        raw = []
    for i, item in enumerate(raw):
        s = _signature(item, f"signatures[{i}]", p, label)
        if s is None:
            continue
        if s.id in seen:
            p.add(f"signatures[{i}].id", f"duplicate id {s.id!r}")
        seen.add(s.id)
        sigs.append(s)
    if p.lines:
        raise CatalogError("\n".join(p.lines))
    return Catalog(name, version, where, tuple(sigs))


def load_catalog_file(path: str | Path) -> Catalog:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise CatalogError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise CatalogError(f"{path}: not valid YAML: {e}") from None
    return parse_catalog(data, str(path))


def builtin_catalog_paths() -> list[Path]:
    root = resources.files(__package__).joinpath("catalog")
    return sorted(Path(str(f)) for f in root.iterdir() if f.name.endswith(".yaml"))


def _expand(paths: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out.extend(sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml")))
        else:
            out.append(path)
    return out


def load_catalogs(extra: Sequence[str | Path] = (), *, builtin: bool = True) -> tuple[Catalog, ...]:
    """The shipped catalogs, then ``extra`` (files or folders). ``CatalogError`` lists every problem
    of every file, and a signature id defined twice (with both files)."""
    files = (builtin_catalog_paths() if builtin else []) + _expand(extra)
    problems: list[str] = []
    catalogs: list[Catalog] = []
    owner: dict[str, str] = {}
    for f in files:
        try:
            cat = load_catalog_file(f)
        except CatalogError as e:
            problems.append(str(e))
            continue
        for s in cat.signatures:
            if s.id in owner:
                problems.append(f"{f}: signature id {s.id!r} is already defined in {owner[s.id]}")
            owner.setdefault(s.id, str(f))
        catalogs.append(cat)
    if problems:
        raise CatalogError("\n".join(problems))
    return tuple(catalogs)


def all_signatures(catalogs: Iterable[Catalog]) -> tuple[Signature, ...]:
    return tuple(s for c in catalogs for s in c.signatures)
