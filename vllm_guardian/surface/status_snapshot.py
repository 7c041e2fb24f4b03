"""The status of the guardian as of one tick: frozen values, turned into JSON only at the edges.

``status_view.build_status`` builds a ``StatusSnapshot`` from the daemon's state (at most once
per tick, when first asked for); the control socket, ``guardian probe``, the node heartbeat, the
HTTP listener and the exporter read ``to_dict()``, the JSON document other tools read
(``guardian status --json``). Field names are the document's keys; ``None`` is ``null``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from vllm_guardian.host.capabilities import MissingCapability
from vllm_guardian.incidents import incident_to_dict
from vllm_guardian.model import Incident

SCHEMA = 1


@dataclass(frozen=True)
class HottestThread:
    tid: int
    comm: str
    cpu_ratio: float | None
    voluntary_per_s: float | None
    involuntary_per_s: float | None
    cpu_demand: float | None
    syscall: str | None
    wchan: str | None


@dataclass(frozen=True)
class ProcessStatus:
    pid: int
    starttime: int
    role: str
    cmdline: str
    state: str | None
    cpu_ratio: float | None
    rss_bytes: int | None
    threads: int | None
    hottest_thread: HottestThread | None


@dataclass(frozen=True)
class HealthStatus:
    status: int | None  # HTTP status of /health, None when it did not answer
    error: str | None
    latency_s: float | None


@dataclass(frozen=True)
class EngineStatus:
    requests_running: float | None
    requests_waiting: float | None
    kv_cache_usage: float | None
    steps_per_s: float | None


@dataclass(frozen=True)
class CanaryStatus:
    ok: bool
    timed_out: bool
    latency_s: float | None
    error: str | None
    age_s: float | None


@dataclass(frozen=True)
class MemoryTrend:
    bytes: int
    slope_bytes_per_s: float | None
    window_s: float


@dataclass(frozen=True)
class MemoryStatus:
    accelerator: MemoryTrend | None
    rss: MemoryTrend | None


@dataclass(frozen=True)
class TargetStatus:
    name: str
    source: str
    pid: int
    starttime: int
    port: int | None
    api_url: str | None
    model: str | None
    phase: str  # serving | warming | paused | sleeping | incident | gone | draining | drained | stopping | starting
    # | verifying | failed
    serving: bool  # should take traffic (the readiness endpoint answers 200)
    remediation: Mapping[str, Any] | None
    decision: str | None
    budget_left: int
    ready: bool
    health: HealthStatus | None
    engine: EngineStatus
    canary: CanaryStatus | None
    processes: tuple[ProcessStatus, ...]
    accelerators: tuple[Mapping[str, Any], ...]
    memory: MemoryStatus
    suspects: Mapping[str, str]  # kind -> summary of an unconfirmed finding
    incidents: tuple[str, ...]  # kinds of the open incidents
    errors: Mapping[str, str]  # episode key -> message
    gates: Mapping[str, Any] | None = None  # output-correctness gates: health score, baseline, notes
    serving_reason: str = ""  # why (not) serving, CamelCase (surface/readiness.py; the readiness gate's reason)
    serving_message: str = ""
    socket: str = ""  # how its claim on its port was checked (model.Target.socket); "argv": not verified
    port_verified: bool = True  # False: matched by its command line alone, never restarted automatically
    auto_remediation: str = "on"  # or "off (<why>)": maintenance, autodiscovered, port not verified


@dataclass(frozen=True)
class ProbeCounters:
    runs: int
    failures: int
    overruns: int
    last_duration_s: float | None
    mean_duration_s: float | None


@dataclass(frozen=True)
class GuardianSelf:
    pid: int
    ticks: int
    last_tick_s: float | None
    max_tick_s: float | None
    cpu_seconds: float | None
    max_rss_bytes: int
    ticks_failed: int = 0  # ticks that raised (they feed neither /healthz nor the watchdog)
    tick_p50_s: float | None = None  # over the last ticks kept (SelfStats.tick_times)
    tick_p99_s: float | None = None


@dataclass(frozen=True)
class StatusSnapshot:
    node: str
    version: str
    time: float  # wall
    uptime_s: float | None
    guardian: GuardianSelf
    probes: Mapping[str, ProbeCounters]
    targets: tuple[TargetStatus, ...]
    unmatched: tuple[tuple[str, str], ...]  # (configured target, why it was not found)
    incidents: tuple[Incident, ...]  # open
    actions: Mapping[str, Any]  # {"outcomes": {...}, "restarts": {target: {...}}}
    maintenance_until: float | None
    extras: Mapping[str, Any] = field(default_factory=dict)  # sections wired in by runtime (alerts)
    accelerators: tuple[Mapping[str, Any], ...] = ()  # every device of the node (diagnosis.node_view)
    errors: Mapping[str, str] = field(default_factory=dict)
    capabilities_missing: tuple[MissingCapability, ...] = ()  # what the guardian cannot do here
    schema: int = SCHEMA

    def target(self, name: str) -> TargetStatus | None:
        return next((t for t in self.targets if t.name == name), None)

    @cached_property
    def document(self) -> dict[str, Any]:
        """The JSON document (built once per snapshot; treat it as read-only)."""
        return {
            "schema": self.schema,
            "node": self.node,
            "version": self.version,
            "time": self.time,
            "uptime_s": self.uptime_s,
            "guardian": _plain(self.guardian),
            "probes": _plain(self.probes),
            "targets": _plain(self.targets),
            "unmatched": [{"target": n, "reason": r} for n, r in self.unmatched],
            "incidents": [incident_to_dict(i) for i in self.incidents],
            "actions": _plain(self.actions),
            "maintenance_until": self.maintenance_until,
            "accelerators": _plain(self.accelerators),
            "capabilities": {"missing": _plain(self.capabilities_missing)},
            **{k: _plain(v) for k, v in self.extras.items()},
            "errors": dict(self.errors),
        }

    def to_dict(self) -> dict[str, Any]:
        return self.document


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value
