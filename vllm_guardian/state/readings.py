"""What the probes last read, kept for status, evidence and remediation: their readings' types.

The probes (``vllm_guardian/probes/``) make these; the tracker keeps the latest per target, the
status, the evidence bundles and remediation read them. They live here, below the probes, so
what is known (``state/``) never imports the probes that fill it.

- ``ThreadState`` / ``ProcessState``: a process's latest /proc reading (procfs probe);
- ``HttpScrape``: one ``/health`` + ``/metrics`` scrape (vllm_http probe);
- ``CanaryResult``: one canary completion (canary probe);
- ``TargetDevice`` / ``AccelResult``: the accelerators read (accel probe).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from vllm_guardian.host.accel import AccelEvent, Refused
from vllm_guardian.model import ProcKey, Sample
from vllm_guardian.series import metrics as m


@dataclass(frozen=True)
class ThreadState:
    """The latest per-thread reading, for status and evidence (not a series)."""

    tid: int
    comm: str
    state: str
    cpu_ratio: float | None
    voluntary_per_s: float | None
    involuntary_per_s: float | None
    cpu_demand: float | None
    syscall: str | None  # "running", "blocked", a syscall number, or None when unreadable
    wchan: str | None


@dataclass(frozen=True)
class ProcessState:
    key: ProcKey
    state: str
    cpu_ratio: float | None
    rss_bytes: int
    num_threads: int
    threads: tuple[ThreadState, ...] = ()

    @property
    def hottest(self) -> ThreadState | None:
        scored = [t for t in self.threads if t.cpu_ratio is not None]
        return max(scored, key=lambda t: t.cpu_ratio or 0.0) if scored else None


@dataclass(frozen=True)
class HttpScrape:
    target: str
    samples: tuple[Sample, ...]
    health_status: int | None = None  # HTTP status, None when no answer
    health_error: str | None = None  # "refused: ...", "timeout: ...", or None
    metrics_error: str | None = None
    values: dict[str, float] = field(default_factory=dict)
    page: str | None = None  # the last /metrics text, for evidence bundles
    served: str | None = None  # the first model of /v1/models, when asked (not ready yet) and answered
    key: ProcKey | None = None  # the API-server incarnation scraped (set by the probe)
    dropped: Mapping[str, int] = field(default_factory=dict)  # reason -> count: what the page lost


@dataclass(frozen=True)
class CanaryResult:
    target: str
    started: float
    ended: float
    ok: bool
    timed_out: bool
    model: str | None
    error: str | None = None
    auth_status: int | None = None  # 401/403 from a /v1 endpoint
    dp_rank: int | None = None  # the data-parallel rank it was sent to (None: the server chose)

    @property
    def latency(self) -> float:
        return self.ended - self.started

    def samples(self) -> list[Sample]:
        t = self.ended
        out = [
            Sample(self.target, "", m.CANARY_OK, 1.0 if self.ok else 0.0, t),
            Sample(self.target, "", m.CANARY_TIMEOUT, 1.0 if self.timed_out else 0.0, t),
            Sample(self.target, "", m.CANARY_STARTED, self.started, t),
        ]
        if self.ok or self.timed_out:
            out.append(Sample(self.target, "", m.CANARY_LATENCY, self.latency, t))
        if self.dp_rank is not None:
            out.append(Sample(self.target, "", m.CANARY_RANK, float(self.dp_rank), t))
        return out


@dataclass(frozen=True)
class TargetDevice:
    """A device a target's processes hold memory on, in the target's ``accelerators`` status section."""

    device: str
    backend: str
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    utilization_ratio: float | None
    health: str | None
    target_memory_bytes: float | None  # the target's own processes on the device


@dataclass
class AccelResult:
    samples: list[Sample] = field(default_factory=list)
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)  # device id -> numbers (latest read)
    per_target: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # status rows per target
    errors: dict[str, str] = field(default_factory=dict)  # backend name -> why this read failed
    events: list[AccelEvent] = field(default_factory=list)  # XIDs seen this call
    read: tuple[str, ...] = ()  # backends read this call
    process_memory: dict[int, int] = field(default_factory=dict)  # pid -> bytes, latest read of all backends
    notes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # backend -> what it cannot see (latest read)
    node: list[dict[str, Any]] = field(default_factory=list)  # every device of the node, owners named (node_view)
    refused: dict[str, dict[str, int]] = field(default_factory=dict)  # backend -> reason -> input refused since start
    refused_now: list[tuple[str, Refused]] = field(default_factory=list)  # (backend, what) refused this call

    def target_section(self, target: str) -> tuple[TargetDevice, ...]:
        """The target's ``accelerators`` status section."""
        return tuple(
            TargetDevice(
                r["device"],
                r["backend"],
                r["memory_used_bytes"],
                r["memory_total_bytes"],
                r["utilization_ratio"],
                r["health"],
                r["target_memory_bytes"],
            )
            for r in self.per_target.get(target, ())
        )
