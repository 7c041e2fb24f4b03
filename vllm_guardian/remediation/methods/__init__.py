"""The restart methods, one file each, behind one protocol (``base.RestartMethod``) and one table.

``restart.mode`` is looked up here once (``method_for``); nothing else branches on it. Adding a
method is one file and one row of ``METHODS`` (and the mode's name in the config schema).
"""

from __future__ import annotations

from collections.abc import Mapping

from vllm_guardian.remediation.methods.base import RestartMethod
from vllm_guardian.remediation.methods.command import CommandMethod
from vllm_guardian.remediation.methods.kubernetes import KubernetesMethod
from vllm_guardian.remediation.methods.signal import SignalMethod
from vllm_guardian.remediation.methods.systemd import SystemdMethod


def build_methods(unit_for: Mapping[str, str | None]) -> dict[str, RestartMethod]:
    """One instance of each method; ``unit_for``: the systemd unit each configured target was matched by."""
    return {
        "signal": SignalMethod(),
        "command": CommandMethod(),
        "systemd": SystemdMethod(dict(unit_for)),
        "kubernetes": KubernetesMethod(),
    }


__all__ = ["RestartMethod", "build_methods"]
