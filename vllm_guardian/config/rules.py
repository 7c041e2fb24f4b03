"""The rules a config value must meet, by name: the ``check`` of a schema field (``RULES``; the fields
whose rule is kept out of the schema are in ``EXTRA_CHECKS``), the keys refused with a reason of
their own (``FORBIDDEN_KEYS``), and the bounds of a number (``range_problem``: the limits its field declares).
Also how a value reads in a problem line (``show``). Pure: data in, words out."""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import types
import typing
from typing import Any, Callable

from vllm_guardian.config.schema import (
    AlertsConfig,
    FleetConfig,
    TargetConfig,
)
from vllm_guardian.netaddr import is_hostport
from vllm_guardian.store.keys import stream_problem
from vllm_guardian.store.url import problem as store_url_problem

# Rules for fields whose schema metadata carries no 'check' (kept out of the schema).
EXTRA_CHECKS: typing.Mapping[tuple[type, str], str] = types.MappingProxyType(
    {
        (TargetConfig, "name"): "target_name",
        (FleetConfig, "when_redis_down"): "allow_deny",
        (AlertsConfig, "redis_url"): "redis_url",
        (AlertsConfig, "stream"): "stream_key",
    }
)


# Keys refused with a message of their own (instead of "unknown key"): (class, key) -> why.
FORBIDDEN_KEYS: typing.Mapping[tuple[type, str], str] = types.MappingProxyType(
    {
        (TargetConfig, "api_key"): "an API key is never written in the config (it would leak through "
        "check-config, backups and version control); name where to read it: "
        "api_key_env (a variable of the guardian's environment) or api_key_file "
        "(a file readable by the guardian); when neither is set the key is read "
        "from the server's own --api-key / VLLM_API_KEY",
    }
)


_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_FAULT_CODE = re.compile(r"[A-Za-z0-9_]+(?::(?:\*|[A-Za-z0-9_.-]+))?")


def show(value: Any) -> str:
    """The value as it would read in YAML/JSON, shortened."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:  # a self-referencing structure built with YAML anchors
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def join_path(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _choice(*options: str) -> tuple[str, Callable[[Any], bool]]:
    return "one of " + ", ".join(options), lambda v: v in options


def regex_problem(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        return str(exc)
    return ""


_TAINT_KEY = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"(?=.{1,63}$)[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


def _is_method_name(v: Any) -> bool:
    return isinstance(v, str) and re.fullmatch(r"[a-z][a-z0-9_]*", v) is not None


# check name -> (expectation, "{base}" = "a number" | "an integer"; predicate)
RULES: typing.Mapping[str, tuple[str, Callable[[Any], bool]]] = types.MappingProxyType(
    {
        "positive": ("{base} > 0", lambda v: v > 0),
        "nonneg": ("{base} >= 0", lambda v: v >= 0),
        "ratio": ("a number between 0 and 1", lambda v: 0 <= v <= 1),
        "port": ("a port number (1..65535)", lambda v: 1 <= v <= 65535),
        "mode": _choice("observe", "alert", "remediate"),
        "onoff": _choice("auto", "off"),
        # which names exist is the methods table's to say (remediation/methods: restart_mode_problems)
        "restart_mode": ("a restart method's name (lowercase letters, digits, '_')", _is_method_name),
        "allow_deny": _choice("allow", "deny"),
        "log_format": _choice("text", "json", "logfmt"),
        "log_level": _choice("debug", "info", "warning", "error", "critical"),
        "pod_removal": _choice("evict", "delete"),
        # the policy table (config/schema_policy.py)
        "device_kind": _choice("nvidia", "ascend", "none"),
        "breaker_scope": _choice("model", "group", "profile"),
        "fault_severity": _choice("critical", "warning", "info"),
        "fault_action": _choice("annotate", "alert", "refuse_restart", "taint"),
        "fault_code": (
            "a device-fault code (xid:<n>, npu_health:<status>, a condition; <prefix>:* for a family), "
            "at most 64 letters, digits, '_', '.', '-'",
            lambda v: len(v) <= 64 and _FAULT_CODE.fullmatch(v) is not None,
        ),
        # the web config of the HTTP listener (config/web.py): the exporter-toolkit names
        "client_auth_type": _choice("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"),
        "tls_version": _choice("TLS12", "TLS13"),
        "taint_key": (
            "a Kubernetes taint key ([prefix/]name: a DNS subdomain, a name of at most 63 letters, digits, '-_.')",
            lambda v: _TAINT_KEY.fullmatch(v) is not None and len(v.rpartition("/")[0]) <= 253,
        ),
        "regex": ("a valid regular expression", lambda v: not regex_problem(v)),
        "expect": (
            'the word "baseline" or a valid regular expression',
            lambda v: v == "baseline" or not regex_problem(v),
        ),
        "hostport": ('a "host:port" address', is_hostport),
        "target_name": ("a name of letters, digits, '_', '.', '-'", lambda v: _NAME_RE.fullmatch(v) is not None),
        "redis_url": (
            '"embedded" or a redis://, rediss://, unix://, redis+sentinel:// or redis+cluster:// URL',
            lambda v: v == "embedded" or store_url_problem(v) is None,
        ),
        "stream_key": (
            "a Redis key name, its braces only a {{hash tag}} (no '}}' outside one)",
            lambda v: bool(v) and stream_problem(v) is None,
        ),
    }
)


Rules = typing.Mapping[str, tuple[str, Callable[[Any], bool]]]


def describe(tp: Any, check: str | None, rules: Rules = RULES) -> str:
    if check:
        return rules[check][0].format(base="an integer" if tp is int else "a number")
    origin = typing.get_origin(tp)
    if origin is tuple:
        item = typing.get_args(tp)[0]
        return "a list of " + ("strings" if item is str else "mappings" if dataclasses.is_dataclass(item) else "values")
    if origin is dict:
        return "a mapping of strings to strings"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):  # a mode in a mapping (policy.profiles[].modes)
        return "one of " + ", ".join(str(m.value) for m in tp)
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[tp]


MAX_NUMBER = 10**12  # no count, size or rate of this product comes near it


def range_problem(f: dataclasses.Field[Any], value: Any) -> str:
    """What is wrong with a number that passed its type and rule: larger than any number of this
    product, or outside a limit its field declares (``setting(..., bound=...)``, ``config/schema_fields.py``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    if abs(value) > MAX_NUMBER:
        return f"at most {MAX_NUMBER:.0e}"
    for limit in f.metadata.get("bound", ()):
        if limit.broken_by(value):
            return str(limit.says)
    return ""
