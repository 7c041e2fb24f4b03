"""The restart methods, one file each, behind one protocol (``base.RestartMethod``) and one table.

``METHODS`` has one row per method: ``(name, make)``, where ``name`` is the value of
``restart.mode`` that picks it and ``make(unit_for)`` builds it (``unit_for``: the systemd unit each
configured target was matched by). ``restart.mode`` is looked up once (``RemediationParts.method``);
nothing else branches on it. The config schema only checks that a mode is a name; which names
exist is this table's to say (``restart_mode_problems``, checked when the config is loaded and when
the daemon is assembled). Adding a method is one file and one row here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

from vllm_guardian.config.schema import Config
from vllm_guardian.remediation.methods.base import RestartMethod
from vllm_guardian.remediation.methods.command import CommandMethod
from vllm_guardian.remediation.methods.kubernetes import KubernetesMethod
from vllm_guardian.remediation.methods.signal import SignalMethod
from vllm_guardian.remediation.methods.systemd import SystemdMethod

MakeMethod = Callable[[Mapping[str, "str | None"]], RestartMethod]
MethodRow = tuple[str, MakeMethod]

METHODS: tuple[MethodRow, ...] = (
    ("systemd", lambda unit_for: SystemdMethod(dict(unit_for))),
    ("command", lambda unit_for: CommandMethod()),
    ("kubernetes", lambda unit_for: KubernetesMethod()),
    ("signal", lambda unit_for: SignalMethod()),
)


def method_names(table: Sequence[MethodRow] = METHODS) -> tuple[str, ...]:
    return tuple(name for name, _ in table)


def build_methods(unit_for: Mapping[str, str | None], table: Sequence[MethodRow] = METHODS) -> dict[str, RestartMethod]:
    """One instance of each method of the table, by name."""
    return {name: make(unit_for) for name, make in table}


def restart_mode_problems(cfg: Config, table: Sequence[MethodRow] = METHODS) -> list[str]:
    """A ``targets[i].restart.mode`` that names no method of the table, each with its key path."""
    names = method_names(table)
    return [
        f"targets[{i}].restart.mode: expected one of {', '.join(names)}, got {json.dumps(t.restart.mode)}"
        for i, t in enumerate(cfg.targets)
        if t.restart.mode not in names
    ]


__all__ = ["METHODS", "MethodRow", "RestartMethod", "build_methods", "method_names", "restart_mode_problems"]
