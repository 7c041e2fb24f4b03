"""The vocabulary of the guardian: what it sees, concludes and remembers.

Stdlib only, frozen dataclasses. Nothing here touches the machine.

- ``ProcKey``: a process identity, ``(pid, starttime)`` (docs/design.md, Vocabulary): PIDs are reused.
- ``ProcessInfo`` / ``Target``: one supervised vLLM server and its snapshotted tree.
- ``Sample``: one number at a monotonic time; an absent value is simply not emitted.
- ``Finding``: what one detector concludes on one tick (stateless).
- ``Incident``: the stateful, deduplicated condition built from findings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Mapping


class Kind(str, Enum):
    """The incident kinds (config keys, metric labels, alert kinds): the built-in ones below, and
    any a detector's own file declares (``Kind.declare``) for its row of ``detectors/kinds.py``."""

    BUSY_LOOP = "busy_loop"
    ENGINE_STALL = "engine_stall"
    ENGINE_DEAD = "engine_dead"
    KV_CACHE_LEAK = "kv_cache_leak"
    ACCEL_MEMORY_LEAK = "accel_memory_leak"
    HOST_MEMORY_LEAK = "host_memory_leak"
    OUTPUT_CORRUPTION = "output_corruption"
    PROBE_FAILURE = "probe_failure"
    ACCEL_FAULT = "accel_fault"  # one per device (the incident's target is the device), not per server
    RESTART_BUDGET_EXHAUSTED = "restart_budget_exhausted"
    STARTUP_TIMEOUT = "startup_timeout"
    PAUSE_TOO_LONG = "pause_too_long"
    CHECKPOINT_FAILED = "checkpoint_failed"

    @classmethod
    def declare(cls, value: str) -> Kind:
        """The kind named ``value``, declared once by the file of the detector that finds it (the
        same object on every call, and ``Kind(value)`` finds it, as it finds a built-in one)."""
        if value in cls._value2member_map_:
            return cls(value)
        if not re.fullmatch(r"[a-z][a-z0-9_]*", value):
            raise ValueError(f"a kind is a lowercase name, got {value!r}")
        member = str.__new__(cls, value)
        member._name_ = value.upper()
        member._value_ = value
        cls._value2member_map_[value] = member
        return member


class Severity(str, Enum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class Role(str, Enum):
    """A process's place in a vLLM tree, classified by cmdline prefix."""

    API_SERVER = "api_server"
    ENGINE_CORE = "engine_core"
    WORKER = "worker"
    OTHER = "other"


class Status(str, Enum):
    FIRING = "firing"
    RESOLVED = "resolved"


@dataclass(frozen=True, order=True)
class ProcKey:
    """Identity of a process: pid plus starttime (clock ticks since boot, stat field 22)."""

    pid: int
    starttime: int

    def __str__(self) -> str:
        return f"{self.pid}@{self.starttime}"


@dataclass(frozen=True)
class ProcessInfo:
    key: ProcKey
    ppid: int
    role: Role
    cmdline: tuple[str, ...]

    @property
    def pid(self) -> int:
        return self.key.pid

    @property
    def title(self) -> str:
        return " ".join(self.cmdline)


@dataclass(frozen=True)
class Target:
    """One supervised vLLM server: its API server and every descendant, as of one snapshot.

    ``name`` is stable across restarts (config name, or ``vllm-<port>`` when
    autodiscovered); ``key`` is the API server's identity in this snapshot.
    """

    name: str
    key: ProcKey
    processes: tuple[ProcessInfo, ...]
    port: int | None = None
    api_url: str | None = None
    source: str = "autodiscover"  # or "config"
    # autodiscovered: "owned" (its tree holds the socket serving the URL's address), "starting"
    # (nothing listens on the port yet), "unverified" (no permission to tell); "" when not checked
    # (config); "argv": a ``match.port`` target found by the port its command line names, its fds
    # unreadable; "assumed": found through an IPv6 [::] socket taken to serve the IPv4 URL though
    # its IPV6_V6ONLY flag could not be read (nothing else serves the URL)
    socket: str = ""
    # sockets listening on its port that do not serve its URL (another address or family: a
    # neighbour's, ignored); 0 when not checked
    other_listeners: int = 0
    # the Kubernetes pod it runs in, when matched through the API (match.kubernetes); else None
    namespace: str | None = None
    pod: str | None = None

    @property
    def port_verified(self) -> bool:
        """Is its claim on its port seen in its sockets (not taken from its argv alone)?"""
        return self.socket not in ("argv", "unverified", "assumed")

    @property
    def api_server(self) -> ProcessInfo | None:
        for p in self.processes:
            if p.key == self.key:
                return p
        return None

    def by_role(self, role: Role) -> tuple[ProcessInfo, ...]:
        return tuple(p for p in self.processes if p.role is role)

    def has(self, key: ProcKey) -> bool:
        return any(p.key == key for p in self.processes)


@dataclass(frozen=True)
class Sample:
    """One value of one metric for one subject of one target at monotonic time ``t``.

    ``subject`` names what was measured inside the target: ``""`` for the
    target as a whole, ``"p<pid>"`` for a process, ``"p<pid>/t<tid>"`` for a thread: a
    ``Subject``'s key.
    """

    target: str
    subject: str
    metric: str
    value: float
    t: float


@dataclass(frozen=True, order=True)
class Subject:
    """What a sample measures inside a target: the target itself (no pid), one process, or one
    thread of it. Its ``key`` is the form series, findings and alerts carry: ``""``, ``"p<pid>"``,
    ``"p<pid>/t<tid>"``; ``parse`` reads it back."""

    pid: int | None = None
    tid: int | None = None

    @property
    def key(self) -> str:
        if self.pid is None:
            return ""
        return f"p{self.pid}" if self.tid is None else f"p{self.pid}/t{self.tid}"

    def __str__(self) -> str:
        return self.key

    @property
    def threads_prefix(self) -> str:
        """The start of the keys of this process's threads."""
        return f"p{self.pid}/"

    @classmethod
    def parse(cls, key: str) -> Subject | None:
        """The subject a key names; None for a string that is not one."""
        m = _SUBJECT.fullmatch(key)
        if m is None:
            return None
        pid, tid = m.group(1), m.group(2)
        return cls(int(pid) if pid else None, int(tid) if tid else None)


_SUBJECT = re.compile(r"(?:p(\d+)(?:/t(\d+))?)?")


@dataclass(frozen=True)
class Finding:
    """A detector's conclusion about one target on one tick.

    ``confirmed`` is False for a *suspect* (e.g. a hot thread whose lack of
    progress is not yet proven): the daemon then asks for a canary to confirm;
    only confirmed findings count towards opening an incident.
    """

    kind: Kind
    target: str
    severity: Severity
    summary: str
    signals: Mapping[str, Any] = field(default_factory=dict)
    confirmed: bool = True
    subject: str = ""


@dataclass(frozen=True)
class Action:
    """One step taken (or that would have been taken) for an incident."""

    name: str
    status: str  # ok | failed | skipped | dry_run | running
    at: float  # wall time
    detail: str = ""


@dataclass(frozen=True)
class TargetRef:
    """The target as recorded in an incident: enough to act on it or reason about it later."""

    name: str
    pid: int
    starttime: int
    port: int | None = None
    model: str | None = None
    role: str | None = None  # role of the process the finding points at, when any
    namespace: str | None = None  # the Kubernetes pod it runs in (match.kubernetes), else None
    pod: str | None = None


@dataclass(frozen=True)
class Incident:
    id: str
    kind: Kind
    severity: Severity
    node: str
    target: TargetRef
    status: Status
    summary: str
    opened_at: float  # wall time
    signals: Mapping[str, Any] = field(default_factory=dict)
    resolved_at: float | None = None
    evidence_dir: str | None = None
    actions: tuple[Action, ...] = ()
    diagnosis: tuple[Mapping[str, Any], ...] = ()  # catalog matches, best first (vllm_guardian.diagnosis)
    crash: Mapping[str, Any] | None = None  # engine_dead: the last traceback of the target's log

    @property
    def fingerprint(self) -> str:
        return f"{self.node}/{self.target.name}/{self.kind.value}"

    def resolve(self, at: float, reason: str) -> Incident:
        return replace(
            self,
            status=Status.RESOLVED,
            resolved_at=at,
            actions=self.actions + (Action("resolve", "ok", at, reason),),
        )

    def with_action(self, action: Action) -> Incident:
        return replace(self, actions=self.actions + (action,))


@dataclass(frozen=True)
class Transition:
    """An incident changed state (opened, resolved): what sinks and actions react to."""

    incident: Incident
    previous: Status | None  # None when newly opened
