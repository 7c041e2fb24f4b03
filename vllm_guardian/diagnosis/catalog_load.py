"""Loads and validates signature catalogs (YAML) into ``Catalog`` objects.

Reads: the catalogs shipped in ``guardian/diagnosis/catalog/*.yaml`` (package data)
and any extra files named by config ``diagnosis.catalogs`` (a file or a folder of
``*.yaml``). Decides: whether each file is a valid catalog. The format is declared in
``catalog_schema.py`` and walked by the config's own parser (``config/mapping.py``: types,
unknown and required keys, rules); what spans fields is checked here. Every problem is a
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
from typing import Any, Iterable, Sequence

import yaml

from vllm_guardian.config.mapping import Parser
from vllm_guardian.errors import CatalogError
from vllm_guardian.diagnosis.catalog_schema import (
    CATALOG_RULES,
    KINDS,
    SCHEMA,
    CatalogDoc,
    ExceptionDoc,
    FrameDoc,
    SignatureDoc,
    ThreadDoc,
)
from vllm_guardian.diagnosis.signature import (
    Catalog,
    ExceptionPattern,
    FramePattern,
    LogPattern,
    MetricPattern,
    Signature,
    ThreadPattern,
)
from vllm_guardian.diagnosis.workaround import Workaround, parse_workaround

__all__ = [
    "SCHEMA",
    "CatalogError",
    "all_signatures",
    "builtin_catalog_paths",
    "load_catalog_file",
    "load_catalogs",
    "parse_catalog",
]


class _Problems:
    def __init__(self, where: str) -> None:
        self.where = where
        self.lines: list[str] = []

    def add(self, path: str, what: str) -> None:
        self.lines.append(f"{self.where}: {path}: {what}" if path else f"{self.where}: {what}")


# ---------------------------------------------------------------- what spans fields (the types are the parser's)
def _regex(value: str | None) -> re.Pattern[str] | None:
    return None if value is None else re.compile(value)  # the parser's "regex" rule compiled it once


def _frame(d: FrameDoc, path: str, p: _Problems) -> FramePattern:
    fp = FramePattern(
        d.function,
        _regex(d.function_regex),
        tuple(f.replace("\\", "/") for f in d.file),
        _regex(d.file_regex),
        d.within,
        d.optional,
    )
    if not (fp.functions or fp.function_regex or fp.files or fp.file_regex):
        p.add(path, "a frame needs function/function_regex or file/file_regex")
    return fp


def _frames(ds: Sequence[FrameDoc], path: str, p: _Problems) -> tuple[FramePattern, ...]:
    return tuple(_frame(d, f"{path}[{i}]", p) for i, d in enumerate(ds))


def _thread(d: ThreadDoc, path: str, p: _Problems) -> ThreadPattern:
    tp = ThreadPattern(_regex(d.name), d.state, _frames(d.frames, f"{path}.frames", p), d.absent, d.optional)
    if tp.name is None and not tp.frames and d.state == "any":
        p.add(path, "a thread pattern needs a name, a state or frames")
    return tp


def _exception(d: ExceptionDoc, path: str, p: _Problems) -> ExceptionPattern:
    ep = ExceptionPattern(d.type, _regex(d.message), _frames(d.frames, f"{path}.frames", p), d.optional)
    if not (ep.types or ep.message or ep.frames):
        p.add(path, "an exception pattern needs a type, a message or frames")
    return ep


def _workaround_apply(d: SignatureDoc, path: str, p: _Problems) -> Workaround | None:
    if d.workaround_apply is None:
        return None
    found, problems = parse_workaround({"args": list(d.workaround_apply.args), "env": dict(d.workaround_apply.env)})
    for line in problems:
        key, _, what = line.partition(": ")
        p.add(f"{path}.{key}" if what else path, what or line)
    return found


def _signature(d: SignatureDoc, path: str, p: _Problems, label: str) -> Signature | None:
    n = len(p.lines)
    if not d.kinds:
        p.add(f"{path}.kinds", f"required: one or more of {', '.join(KINDS)}")
    hot = _thread(d.hot_thread, f"{path}.hot_thread", p) if d.hot_thread is not None else None
    if hot is not None and hot.absent:
        p.add(f"{path}.hot_thread.absent", "the hot thread cannot be absent (use threads)")
    versions = d.versions
    sig = Signature(
        id=d.id,
        title=d.title,
        kinds=d.kinds,
        confidence=float(d.confidence),
        source=d.source,
        confirmed=d.confirmed,
        inferred=d.inferred,
        hot_thread=hot,
        threads=tuple(_thread(t, f"{path}.threads[{i}]", p) for i, t in enumerate(d.threads)),
        logs=tuple(LogPattern(re.compile(lg.regex), lg.optional) for lg in d.logs),
        metrics=tuple(MetricPattern(m.metric, m.op, float(m.value), m.optional) for m in d.metrics),
        exception=_exception(d.exception, f"{path}.exception", p) if d.exception is not None else None,
        cmdline=_regex(d.cmdline),
        roles=d.role,
        device_idle=True if d.device_idle else None,
        device_idle_optional=d.device_idle != "required",
        require=d.require,
        versions_min=versions.min if versions is not None else None,
        versions_below=versions.below if versions is not None else None,
        fixed_in=d.fixed_in,
        references=d.references,
        workaround=d.workaround,
        advice=d.advice,
        catalog=label,
        workaround_apply=_workaround_apply(d, f"{path}.workaround_apply", p),
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
    if data is None:
        p.add("", "empty file")
    elif not isinstance(data, dict):
        p.add("", f"must be a mapping, got {type(data).__name__}")
    if p.lines:
        raise CatalogError("\n".join(p.lines))
    parser = Parser(CATALOG_RULES)
    doc = parser.section(CatalogDoc, data, "")
    for line in parser.problems:  # types, unknown and required keys, rules: the config's own walk
        path, _, what = line.partition(": ")
        p.add(path, what)
    raw = data.get("signatures")
    if isinstance(raw, list) and not raw:
        p.add("signatures", "required: a non-empty list")
    if p.lines:
        raise CatalogError("\n".join(p.lines))
    label = f"{doc.name} {doc.version}"
    sigs: list[Signature] = []
    seen: set[str] = set()
    for i, item in enumerate(doc.signatures):
        s = _signature(item, f"signatures[{i}]", p, label)
        if s is None:
            continue
        if s.id in seen:
            p.add(f"signatures[{i}].id", f"duplicate id {s.id!r}")
        seen.add(s.id)
        sigs.append(s)
    if p.lines:
        raise CatalogError("\n".join(p.lines))
    return Catalog(doc.name, doc.version, where, tuple(sigs))


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
