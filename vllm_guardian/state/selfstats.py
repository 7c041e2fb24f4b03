"""The guardian's own counters: ticks, per-probe runs/failures/overruns/durations, incidents.

Read by the status document and the exporter; written only by the tick loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from vllm_guardian.state.tick_times import TickTimes

DISCOVERY = "discovery"  # the loop's first stage, counted like a probe


@dataclass
class ProbeStats:
    runs: int = 0
    failures: int = 0
    overruns: int = 0
    last_duration_s: float = 0.0
    total_duration_s: float = 0.0

    def record(self, seconds: float) -> None:
        self.runs += 1
        self.last_duration_s = seconds
        self.total_duration_s += seconds


@dataclass(frozen=True)
class ProbeCounters:
    """One probe in the status's ``probes`` section."""

    runs: int
    failures: int
    overruns: int
    last_duration_s: float | None
    mean_duration_s: float | None


@dataclass(frozen=True)
class GuardianSelf:
    """The status's ``guardian`` section: the guardian process and its loop."""

    pid: int
    ticks: int
    last_tick_s: float | None
    max_tick_s: float | None
    cpu_seconds: float | None
    max_rss_bytes: int
    ticks_failed: int = 0  # ticks that raised (they feed neither /healthz nor the watchdog)
    tick_p50_s: float | None = None  # over the last ticks kept (SelfStats.tick_times)
    tick_p99_s: float | None = None


def _r(x: float | None, nd: int) -> float | None:
    return None if x is None else round(float(x), nd)


@dataclass
class SelfStats:
    ticks: int = 0
    ticks_failed: int = 0  # ticks that raised: they feed neither /healthz nor the watchdog
    after_tick_failed: int = 0  # after-tick work (re-notify, heartbeat) that raised
    last_tick_s: float = 0.0
    max_tick_s: float = 0.0
    tick_times: TickTimes = field(default_factory=TickTimes)  # the last ticks, for p50/p99
    probes: dict[str, ProbeStats] = field(default_factory=dict)
    incidents_opened: dict[str, int] = field(default_factory=dict)
    incidents_resolved: dict[str, int] = field(default_factory=dict)

    def section(self, pid: int, cpu_seconds: float, max_rss_bytes: int) -> GuardianSelf:
        """The status's ``guardian`` section (the process's own CPU time and peak RSS handed in)."""
        return GuardianSelf(
            pid,
            self.ticks,
            _r(self.last_tick_s, 5),
            _r(self.max_tick_s, 5),
            _r(cpu_seconds, 2),
            max_rss_bytes,
            self.ticks_failed,
            _r(self.tick_times.quantile(0.5), 5),
            _r(self.tick_times.quantile(0.99), 5),
        )

    def probes_section(self) -> dict[str, ProbeCounters]:
        """The status's ``probes`` section."""
        return {
            name: ProbeCounters(
                s.runs,
                s.failures,
                s.overruns,
                _r(s.last_duration_s, 5),
                _r(s.total_duration_s / s.runs if s.runs else 0.0, 5),
            )
            for name, s in self.probes.items()
        }

    @classmethod
    def for_probes(cls, names: Iterable[str]) -> SelfStats:
        """Counters for discovery and every probe of the table (present from the start)."""
        return cls(probes={name: ProbeStats() for name in (DISCOVERY, *names)})
