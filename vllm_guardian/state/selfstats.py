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

    @classmethod
    def for_probes(cls, names: Iterable[str]) -> SelfStats:
        """Counters for discovery and every probe of the table (present from the start)."""
        return cls(probes={name: ProbeStats() for name in (DISCOVERY, *names)})
