"""What the guardian cannot do on this node, each said once: the capabilities it lacks.

Decided at start from the guardian's own effective capabilities (``CapEff`` of
``<proc root>/self/status``, read through ``ProcFS``): without CAP_SYS_PTRACE py-spy cannot
attach to other users' servers, without CAP_KILL it cannot signal them (stop, restart). Where an
NVIDIA driver is loaded, an NVML or kernel-log backend that ``accelerators:`` asks for and that
could not be opened is missing too. The fd tables of other users' processes (which socket a
server holds) are found unreadable later, on the first EACCES of a discovery pass
(``discovery.scan``). Each missing capability is logged once, listed in ``guardian status``
(``capabilities.missing``) and exported (``guardian_capability_missing{capability}``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from enum import Enum

from vllm_guardian.errors import GuardianError
from vllm_guardian.host.procfs import ProcFS


class Capability(str, Enum):
    READ_SOCKETS = "read_other_users_sockets"
    PTRACE = "ptrace"
    SIGNAL = "signal_other_users"
    KMSG = "kmsg"
    NVML = "nvml"


@dataclass(frozen=True)
class MissingCapability:
    capability: str  # a Capability value
    why: str  # what shows it is missing
    consequence: str  # what the guardian does instead, and how to grant it


CAP_KILL = 5
CAP_SYS_PTRACE = 19

_CONSEQUENCE = {
    Capability.READ_SOCKETS: (
        "match.port falls back to the port in the server's command line (port not verified: never "
        "restarted automatically); run as root or with CAP_SYS_PTRACE/CAP_DAC_READ_SEARCH"
    ),
    Capability.PTRACE: "no py-spy stacks of other users' servers in evidence; grant CAP_SYS_PTRACE",
    Capability.SIGNAL: "other users' servers cannot be stopped or restarted; grant CAP_KILL or run as their user",
    Capability.KMSG: "no kernel-log Xids (accel_fault sees NVML events only); grant CAP_SYSLOG or read access",
    Capability.NVML: "no accelerator memory or health from NVML; check the driver and libnvidia-ml",
}


def cap_eff(status_text: str) -> int | None:
    """The effective capability mask of a ``/proc/<pid>/status`` text; None when absent."""
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            try:
                return int(line.split(":", 1)[1].strip(), 16)
            except ValueError:
                return None
    return None


def from_privileges(mask: int | None) -> list[MissingCapability]:
    """What an effective capability mask leaves out (nothing is said of an unknown mask)."""
    if mask is None:
        return []
    out = []
    if not mask >> CAP_SYS_PTRACE & 1:
        out.append(missing(Capability.PTRACE, "no CAP_SYS_PTRACE in the guardian's effective capabilities"))
    if not mask >> CAP_KILL & 1:
        out.append(missing(Capability.SIGNAL, "no CAP_KILL in the guardian's effective capabilities"))
    return out


def missing(capability: Capability, why: str) -> MissingCapability:
    return MissingCapability(capability.value, why, _CONSEQUENCE[capability])


class Capabilities:
    """The missing capabilities found so far; each logged once when first found. Noted from the
    loop thread and the discovery worker's results (applied on the loop thread)."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self._missing: dict[str, MissingCapability] = {}
        self._lock = threading.Lock()

    def note(self, m: MissingCapability) -> bool:
        """Record a missing capability; True (and one log line) the first time it is found."""
        with self._lock:
            if m.capability in self._missing:
                return False
            self._missing[m.capability] = m
        self.log.warning("capability missing: %s (%s): %s", m.capability, m.why, m.consequence)
        return True

    def missing(self) -> tuple[MissingCapability, ...]:
        with self._lock:
            return tuple(sorted(self._missing.values(), key=lambda m: m.capability))

    def lacks(self, capability: Capability) -> bool:
        with self._lock:
            return capability.value in self._missing


def read_own_mask(proc: ProcFS) -> int | None:
    """``CapEff`` of the guardian itself through the ``ProcFS`` seam; None when unreadable."""
    try:
        return cap_eff(proc.read_text("self/status"))
    except (GuardianError, OSError, ValueError):
        return None
