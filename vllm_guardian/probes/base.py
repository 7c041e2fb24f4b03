"""What a probe is to the tick loop: the ``Probe`` protocol and what flows through it.

Each tick the loop asks every probe of the table (``vllm_guardian.probes.table``) which ``Job``s are
due: ``probe.jobs(now, seen)``. An *inline* probe's jobs run at once on the loop thread, before
detection (cheap reads such as /proc); every other probe's jobs go to the ``AsyncRunner`` after
detection, one in flight per ``(probe.name, job.subject)``, and their results come back on a
later tick. Either way the result is handed to ``probe.fold(result, now)``, which updates what
the probe keeps (its latest readings, a target's readiness) and returns a ``Folded``: samples
for the series store and the failure episodes it opened or closed. The loop does the rest the
same way for every probe: it times each run, counts runs, failures and overruns under
``probe.name``, logs a failure once per episode and survives a probe that raises.

``Seen`` is what the loop knows when it asks for jobs: the latest detection pass (which
targets are suspect, the findings, the open incidents). A probe that confirms a suspicion
(the canary), or acts on an open incident (a diagnosis), reads it there.

``ProbeParts`` are the built parts a probe may be made from (seams, shared state, config);
``Readings`` holds the latest readings that are not series (process table, accelerators),
read by the status document, evidence and remediation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from vllm_guardian.config.schema import Config
from vllm_guardian.model import Action, Finding, Incident, Kind, ProcKey, Sample
from vllm_guardian.seams import Seams

if TYPE_CHECKING:  # only for annotations: the probes import this module
    from vllm_guardian.series import SeriesStore
    from vllm_guardian.state.tracker import Tracker
    from vllm_guardian.gates.shared import GatesShared
    from vllm_guardian.state.readings import AccelResult, ProcessState
    from vllm_guardian.state.device_faults import DeviceFaults


@dataclass(frozen=True)
class Job:
    """One run of a probe: for one target (``subject``: its name) or node-wide (``""``).

    ``timeout``: seconds after which the run counts as an overrun (an async job keeps its key
    busy until it really ends). ``on_start(now)`` is called once the job was started (an async
    job whose previous run is still in flight is not started, and not called).
    """

    subject: str
    run: Callable[[], Any]
    timeout: float
    on_start: Callable[[float], None] | None = None


@dataclass(frozen=True)
class Folded:
    """What one result means to the loop.

    ``failed``: episode key → message, each one counted as a failure of the probe;
    ``degraded``: episode key → message, logged once per episode but not counted (a partial
    reading, e.g. a file that needs a capability); ``cleared``: episode keys that recovered;
    ``actions``: ``(incident id, Action)`` steps to record on open incidents (a diagnosis): the
    incident's alert is sent again with them.
    Episode keys start with the target's name and a colon when they concern one target (the
    ``probe_failure`` detector reads them so).
    """

    samples: Iterable[Sample] = ()
    failed: Mapping[str, str] = field(default_factory=dict)
    degraded: Mapping[str, str] = field(default_factory=dict)
    cleared: Sequence[str] = ()
    actions: Sequence[tuple[str, Action]] = ()


@dataclass(frozen=True)
class Seen:
    """The latest detection pass, as the probes may read it when they plan their jobs."""

    suspected: frozenset[str] = frozenset()  # targets with a finding or an open incident
    findings: Mapping[str, Mapping[Kind, Finding | None]] = field(default_factory=dict)
    incidents: tuple[Incident, ...] = ()  # the open incidents

    def open_kinds(self, target: str) -> frozenset[Kind]:
        return frozenset(i.kind for i in self.incidents if i.target.name == target)


class Probe(Protocol):
    """A probe of the table. ``inline`` probes run on the loop thread before detection."""

    name: str  # the config key under ``probes:``, the ``probe`` metric label
    inline: bool

    def jobs(self, now: float, seen: Seen) -> Iterable[Job]: ...

    def fold(self, result: Any, now: float) -> Folded: ...

    def close(self) -> None: ...


@dataclass
class Readings:
    """The latest readings that are not series (replaced by the probe that reads them)."""

    processes: Mapping[ProcKey, ProcessState] = field(default_factory=dict)
    accel: AccelResult | None = None  # None: no accelerator backend, or not read yet
    gates: GatesShared | None = None  # set by the gates probe when gates are enabled
    device_faults: DeviceFaults | None = None  # the fault ledger, fed by the accelerator probe

    def device_memory_held(self, pids: set[int]) -> bool | None:
        """Whether an accelerator still shows memory held by these pids (None: no reading)."""
        if self.accel is None:
            return None
        return any(self.accel.process_memory.get(pid, 0) > 0 for pid in pids)


@dataclass(frozen=True)
class ProbeParts:
    """What a probe may be built from: the seams, the shared state and the configuration."""

    cfg: Config
    seams: Seams  # clock, proc root, HTTP client, command runner, process control, accelerator backends
    tracker: Tracker
    series: SeriesStore
    readings: Readings
    log: logging.Logger


class Schedule:
    """Per-key "next due" times: due when ``now`` reached it; ``ran(key, now)`` pushes it on."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._next: dict[str, float] = {}

    def due(self, key: str, now: float) -> bool:
        return now >= self._next.get(key, float("-inf"))

    def ran(self, key: str, now: float) -> None:
        self._next[key] = now + self.interval

    def soon(self, key: str, at: float) -> None:
        """Due at ``at`` at the latest (a confirmation that cannot wait for the interval)."""
        self._next[key] = min(self._next.get(key, float("inf")), at)

    def forget(self, keep: Iterable[str]) -> None:
        keep = set(keep)
        for key in [k for k in self._next if k not in keep]:
            del self._next[key]
