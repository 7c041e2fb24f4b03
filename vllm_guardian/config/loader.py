"""Loads the YAML configuration and validates it strictly.

Reads: one YAML file (or nothing: the built-in defaults of ``vllm_guardian.config.schema``).
Decides: whether the data is a valid ``Config``. The mapping onto the dataclasses is
generic (``dataclasses.fields`` + ``typing.get_type_hints``); every problem is
collected as a ``"key.path: what is wrong"`` line and all of them are raised at once
in one ``ConfigError``. Also renders the effective config for ``guardian
check-config`` and names the configured features this version accepts but does not
act on yet.

YAML is read with YAML 1.2 booleans (only ``true``/``false``): ``off``, ``on``,
``yes`` and ``no`` stay strings, so ``nvml: off`` means "off" and ``autodiscover:
yes`` is an error instead of a silent guess. Duplicate keys are errors. An empty
section (``detectors:`` with everything below commented out) means its defaults.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import re
import socket
import types
import typing
from typing import Any, Callable, Union

import yaml

from vllm_guardian.config.schema import (
    AlertsConfig,
    Config,
    DiscoveryConfig,
    FleetConfig,
    KubernetesMatch,
    MatchConfig,
    TargetConfig,
)
from vllm_guardian.errors import ConfigError
from vllm_guardian.netaddr import is_hostport

DEFAULT_PATH = "/etc/guardian/guardian.yaml"

# Configured features this version accepts but does not act on yet: (key, what).
# Later work removes an entry when it wires the feature; nothing else lists them.
INACTIVE_FEATURES: tuple[tuple[str, str], ...] = ()

# Rules for fields whose schema metadata carries no 'check' (kept out of the schema).
_EXTRA_CHECKS: typing.Mapping[tuple[type, str], str] = types.MappingProxyType(
    {
        (TargetConfig, "name"): "target_name",
        (FleetConfig, "when_redis_down"): "allow_deny",
        (AlertsConfig, "redis_url"): "redis_url",
    }
)

# Keys refused with a message of their own (instead of "unknown key"): (class, key) -> why.
_FORBIDDEN_KEYS: typing.Mapping[tuple[type, str], str] = types.MappingProxyType(
    {
        (TargetConfig, "api_key"): "an API key is never written in the config (it would leak through "
        "check-config, backups and version control); name where to read it: "
        "api_key_env (a variable of the guardian's environment) or api_key_file "
        "(a file readable by the guardian); when neither is set the key is read "
        "from the server's own --api-key / VLLM_API_KEY",
    }
)

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
_BOOL_TAG = "tag:yaml.org,2002:bool"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Invalid:
    """Stands in for a value that failed validation, so checking can go on."""

    def __repr__(self) -> str:
        return "<invalid>"


_INVALID = _Invalid()


# ---------------------------------------------------------------- value rendering
def _show(value: Any) -> str:
    """The value as it would read in YAML/JSON, shortened."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:  # a self-referencing structure built with YAML anchors
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


# ---------------------------------------------------------------- rules
def _choice(*options: str) -> tuple[str, Callable[[Any], bool]]:
    return "one of " + ", ".join(options), lambda v: v in options


def _regex_problem(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        return str(exc)
    return ""


_TAINT_KEY = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"(?=.{1,63}$)[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


# check name -> (expectation, "{base}" = "a number" | "an integer"; predicate)
_RULES: typing.Mapping[str, tuple[str, Callable[[Any], bool]]] = types.MappingProxyType(
    {
        "positive": ("{base} > 0", lambda v: v > 0),
        "nonneg": ("{base} >= 0", lambda v: v >= 0),
        "ratio": ("a number between 0 and 1", lambda v: 0 <= v <= 1),
        "port": ("a port number (1..65535)", lambda v: 1 <= v <= 65535),
        "mode": _choice("observe", "alert", "remediate"),
        "onoff": _choice("auto", "off"),
        "restart_mode": _choice("systemd", "command", "kubernetes", "signal"),
        "allow_deny": _choice("allow", "deny"),
        "log_format": _choice("text", "json", "logfmt"),
        "log_level": _choice("debug", "info", "warning", "error", "critical"),
        "pod_removal": _choice("evict", "delete"),
        "taint_key": (
            "a Kubernetes taint key ([prefix/]name: a DNS subdomain, a name of at most 63 letters, digits, '-_.')",
            lambda v: _TAINT_KEY.fullmatch(v) is not None and len(v.rpartition("/")[0]) <= 253,
        ),
        "regex": ("a valid regular expression", lambda v: not _regex_problem(v)),
        "expect": (
            'the word "baseline" or a valid regular expression',
            lambda v: v == "baseline" or not _regex_problem(v),
        ),
        "hostport": ('a "host:port" address', is_hostport),
        "target_name": ("a name of letters, digits, '_', '.', '-'", lambda v: _NAME_RE.fullmatch(v) is not None),
        "redis_url": (
            '"embedded" or a redis://, rediss:// or unix:// URL',
            lambda v: v == "embedded" or v.startswith(_REDIS_SCHEMES),
        ),
    }
)


# ---------------------------------------------------------------- generic mapping
def _is_optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp)


def _strip_optional(tp: Any) -> Any:
    inner = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(inner) != 1:
        raise TypeError(f"unsupported config type {tp!r}")
    return inner[0]


def _describe(tp: Any, check: str | None) -> str:
    if check:
        return _RULES[check][0].format(base="an integer" if tp is int else "a number")
    origin = typing.get_origin(tp)
    if origin is tuple:
        item = typing.get_args(tp)[0]
        return "a list of " + ("strings" if item is str else "mappings" if dataclasses.is_dataclass(item) else "values")
    if origin is dict:
        return "a mapping of strings to strings"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[tp]


# ---------------------------------------------------------------- upper bounds
MAX_NUMBER = 10**12  # no count, size or rate of this product comes near it
MAX_SECONDS = 30 * 86400.0  # no duration of this product is longer than a month
MIN_INTERVAL = 0.05  # a shorter loop or probe interval only spins a core
MAX_TICK = 3600.0
MAX_PASS_WAIT = 5.0  # the loop waits this long for a discovery pass: longer would stall the tick
MAX_YAML_DEPTH = 32
MAX_YAML_NODES = 100_000  # nodes after expanding aliases (an anchor bomb expands to billions)
_DURATION_NAMES = frozenset(
    {
        "window",
        "period",
        "initial",
        "max",
        "warmup",
        "forget_after",
        "record_seconds",
        "deadline",
        "confirm_cooldown",
        "pass_wait",
        "stuck_after",
    }
)


def _range_problem(cls: Any, name: str, value: Any) -> str:
    """What is wrong with a number that passed its type and rule, judged by its size."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    if abs(value) > MAX_NUMBER:
        return f"at most {MAX_NUMBER:.0e}"
    if not isinstance(value, float):
        return ""
    if cls is Config and name == "interval" and not MIN_INTERVAL <= value <= MAX_TICK:
        return f"between {MIN_INTERVAL:g} and {MAX_TICK:g} seconds"
    if (name == "interval" or name.endswith("_interval")) and value < MIN_INTERVAL:
        return f"at least {MIN_INTERVAL:g} seconds"
    if cls is DiscoveryConfig and name == "pass_wait" and value > MAX_PASS_WAIT:
        return f"at most {MAX_PASS_WAIT:g} seconds (the loop waits that long)"
    if cls is DiscoveryConfig and name == "stuck_after" and value < 1.0:
        return "at least 1 second (a pass of a busy node takes tens of milliseconds)"
    is_duration = name == "interval" or name.endswith(("_interval", "timeout", "_ttl")) or name in _DURATION_NAMES
    if is_duration and value > MAX_SECONDS:
        return f"at most {MAX_SECONDS:g} seconds (30 days)"
    return ""


class _Parser:
    """One parse: walks the data against the dataclasses, collecting problems."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def wrong(
        self, path: str, tp: Any, check: str | None, value: Any, nullable: bool = False, detail: str = ""
    ) -> _Invalid:
        expected = _describe(tp, check) + (" or null" if nullable else "")
        self.problems.append(f"{path}: expected {expected}, got {_show(value)}{detail}")
        return _INVALID

    def value(self, tp: Any, value: Any, path: str, check: str | None = None) -> Any:
        nullable = _is_optional(tp)
        if nullable:
            if value is None:
                return None
            tp = _strip_optional(tp)
        if dataclasses.is_dataclass(tp):
            return self.section(tp, value, path, nullable)
        origin = typing.get_origin(tp)
        if origin is tuple:
            return self.sequence(tp, value, path, nullable)
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
        if check and not _RULES[check][1](value):
            detail = f" ({_regex_problem(value)})" if check in ("regex", "expect") else ""
            return self.wrong(path, tp, check, value, nullable, detail)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return tp(value)
        return float(value) if tp is float else value

    def sequence(self, tp: Any, value: Any, path: str, nullable: bool = False) -> Any:
        if value is None:
            return ()
        if not isinstance(value, list):
            return self.wrong(path, tp, None, value, nullable)
        item_tp = typing.get_args(tp)[0]
        return tuple(self.value(item_tp, item, f"{path}[{i}]") for i, item in enumerate(value))

    def mapping(self, tp: Any, value: Any, path: str, nullable: bool = False) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            return self.wrong(path, tp, None, value, nullable)
        key_tp, value_tp = typing.get_args(tp)
        out = {}
        for key, item in value.items():
            if not isinstance(key, key_tp):
                self.problems.append(f"{_join(path, key)}: expected a string key, got {_show(key)}")
                continue
            out[key] = self.value(value_tp, item, _join(path, key))
        return out

    def section(self, cls: Any, value: Any, path: str, nullable: bool = False) -> Any:
        if value is None:
            value = {}
        if not isinstance(value, dict):
            return self.wrong(path, cls, None, value, nullable)
        fields = dataclasses.fields(cls)
        known = [f.name for f in fields]
        for key in value:
            if (cls, key) in _FORBIDDEN_KEYS:
                self.problems.append(f"{_join(path, key)}: {_FORBIDDEN_KEYS[(cls, key)]}")
            elif key not in known:
                self.problems.append(f"{_join(path, key)}: unknown key (known: {', '.join(known)})")
        hints = typing.get_type_hints(cls)
        kwargs = {}
        for f in fields:
            where = _join(path, f.name)
            if f.name in value:
                check = f.metadata.get("check") or _EXTRA_CHECKS.get((cls, f.name))
                kwargs[f.name] = self.value(hints[f.name], value[f.name], where, check)
                bound = _range_problem(cls, f.name, kwargs[f.name])
                if bound:
                    self.problems.append(f"{where}: expected {bound}, got {_show(value[f.name])}")
                    kwargs[f.name] = _INVALID
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                self.problems.append(f"{where}: required")
                kwargs[f.name] = _INVALID
        return cls(**kwargs)


# ---------------------------------------------------------------- cross-field checks
def _matchers_set(match: MatchConfig) -> list[str]:
    return [f.name for f in dataclasses.fields(MatchConfig) if getattr(match, f.name) is not None]


def _check_target(target: TargetConfig, where: str, problems: list[str]) -> None:
    match = target.match
    if isinstance(match, MatchConfig):
        names = [f.name for f in dataclasses.fields(MatchConfig)]
        chosen = _matchers_set(match)
        if len(chosen) != 1:
            got = "none" if not chosen else f"{len(chosen)} ({', '.join(chosen)})"
            problems.append(f"{where}.match: exactly one matcher must be set (one of {', '.join(names)}), got {got}")
        kube = match.kubernetes
        if isinstance(kube, KubernetesMatch):
            if kube.namespace is None and (kube.pod is not None or kube.selector is not None):
                problems.append(
                    f"{where}.match.kubernetes.namespace: required with pod or selector (pods are listed per namespace)"
                )
            elif kube.namespace is None and kube.pod_uid is None:
                problems.append(f"{where}.match.kubernetes: set namespace (with pod or selector), or pod_uid")
    if isinstance(target.api_key_env, str) and isinstance(target.api_key_file, str):
        problems.append(f"{where}: set api_key_env or api_key_file, not both")
    restart = target.restart
    if isinstance(restart, _Invalid):
        return
    if restart.mode == "command" and restart.command == ():
        problems.append(f"{where}.restart.command: required (a non-empty argv list) when restart.mode is command")
    if (
        restart.mode == "systemd"
        and restart.unit is None
        and not (isinstance(match, MatchConfig) and match.systemd_unit is not None)
    ):
        problems.append(
            f"{where}.restart.unit: required when restart.mode is systemd (or match the target by match.systemd_unit)"
        )


def _cross_checks(cfg: Config, problems: list[str]) -> None:
    if isinstance(cfg.state_dir, str) and not cfg.state_dir.strip():
        problems.append(
            f"state_dir: expected a directory path, got {_show(cfg.state_dir)} "
            "(the control socket and every state file live there)"
        )
    if isinstance(cfg.targets, _Invalid):
        return
    first_seen: dict[str, int] = {}
    for i, target in enumerate(cfg.targets):
        if isinstance(target, _Invalid):
            continue
        where = f"targets[{i}]"
        name = target.name
        if isinstance(name, str):
            if name in first_seen:
                problems.append(f"{where}.name: duplicate target name {_show(name)} (also targets[{first_seen[name]}])")
            else:
                first_seen[name] = i
        _check_target(target, where, problems)


# ---------------------------------------------------------------- public API
def resolve_defaults(cfg: Config, hostname: Callable[[], str] = socket.gethostname) -> Config:
    """Fills the defaults that depend on the host: ``node`` = the host name."""
    if cfg.node is None:
        return dataclasses.replace(cfg, node=hostname())
    return cfg


def parse_config(data: Any, source: str = "<config>", *, hostname: Callable[[], str] = socket.gethostname) -> Config:
    """Maps loaded YAML data onto ``Config``; raises ``ConfigError`` with every problem.

    ``None`` (an empty document) gives the defaults. ``source`` names the data in a
    problem about the document as a whole.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: expected a mapping at the top level, got {_show(data)}"])
    parser = _Parser()
    cfg = parser.section(Config, data, "")
    _cross_checks(cfg, parser.problems)
    if parser.problems:
        raise ConfigError(parser.problems)
    return resolve_defaults(cfg, hostname)


def _yaml12_bool_resolvers() -> dict:
    out = {
        ch: [r for r in resolvers if r[0] != _BOOL_TAG]
        for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    pattern = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
    for ch in "tTfF":
        out.setdefault(ch, []).append((_BOOL_TAG, pattern))
    return out


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans that records duplicate keys."""

    yaml_implicit_resolvers = _yaml12_bool_resolvers()

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    self.duplicates.append(f"line {key_node.start_mark.line + 1}: duplicate key {_show(key)}")
                seen.add(key)
            except TypeError:  # unhashable key: PyYAML itself reports it
                pass
        return super().construct_mapping(node, deep)


_OPENERS = (
    yaml.BlockMappingStartToken,
    yaml.BlockSequenceStartToken,
    yaml.FlowMappingStartToken,
    yaml.FlowSequenceStartToken,
)
_CLOSERS = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


def _check_depth(text: str, source: str) -> None:
    """Refuses nesting deeper than ``MAX_YAML_DEPTH`` from the token stream (the scanner does
    not recurse; PyYAML's composer does, and a deep document raises RecursionError there)."""
    depth = 0
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, _OPENERS):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise ConfigError(
                    [f"{source}: line {token.start_mark.line + 1}: YAML nested deeper than {MAX_YAML_DEPTH} levels"]
                )
        elif isinstance(token, _CLOSERS):
            depth -= 1


def _check_expansion(root: Any, source: str) -> None:
    """Refuses a document whose aliases expand to more than ``MAX_YAML_NODES`` nodes (an
    anchor bomb) or that refers to itself; counted on the node graph, each node once."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            mark = node.start_mark
            raise ConfigError([f"{source}: line {mark.line + 1}: an alias refers to itself"])
        active.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        active.discard(key)
        sizes[key] = total
        if total > MAX_YAML_NODES:
            mark = node.start_mark
            raise ConfigError([f"{source}: line {mark.line + 1}: aliases expand to more than {MAX_YAML_NODES} values"])
        return total

    size(root)


def load_yaml(text: str, source: str = "<config>") -> Any:
    """Parses YAML text (YAML 1.2 booleans); syntax errors and duplicate keys raise
    ``ConfigError`` naming ``source`` and the line."""
    loader = None
    try:
        loader = _StrictLoader(text)  # the reader refuses control characters here already
        _check_depth(text, source)
        node = loader.get_single_node()
        if node is not None:
            _check_expansion(node, source)
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = exc.problem or exc.context or "invalid YAML"
        raise ConfigError([f"{source}: YAML syntax error{where}: {what}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{source}: YAML syntax error: {exc}"]) from None
    finally:
        if loader is not None:
            loader.dispose()
    if loader.duplicates:
        raise ConfigError([f"{source}: {d}" for d in loader.duplicates])
    return data


def load_config(
    path: str | None = None, *, default_path: str = DEFAULT_PATH, hostname: Callable[[], str] = socket.gethostname
) -> Config:
    """Loads and validates a config file.

    ``path=None``: ``default_path`` when it exists, else the built-in defaults. An
    explicit path that does not exist is an error; an empty file gives the defaults.
    """
    if path is None:
        if not os.path.exists(default_path):
            return resolve_defaults(Config(), hostname)
        path = default_path
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{path}: is a directory, not a config file"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: not UTF-8 text (byte {exc.start})"]) from None
    return parse_config(load_yaml(text, path), source=path, hostname=hostname)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, enum.Enum):
        return value.value
    return value


def config_to_dict(cfg: Config) -> dict:
    """The config as plain data (dicts, lists, scalars) for ``yaml.safe_dump`` / json."""
    return _plain(cfg)


def inactive_sections(cfg: Config) -> list[str]:
    """One line per feature of ``INACTIVE_FEATURES``: accepted in config, not acted on yet."""
    return [f"{key}: {what}" for key, what in INACTIVE_FEATURES]


def render_check(cfg: Config) -> str:
    """What ``guardian check-config`` prints: the effective config as YAML, then a
    ``# not active yet: ...`` comment line per inactive feature."""
    text = yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False, allow_unicode=True)
    notes = inactive_sections(cfg)
    if notes:
        text += "\n" + "".join(f"# not active yet: {line}\n" for line in notes)
    return text
