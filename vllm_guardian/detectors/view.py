"""What a detector is handed: the facts the daemon tracks about one target plus its series.

Read only. The daemon builds one ``TargetView`` per target per tick; detectors
are pure functions of it and of the detectors config.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_guardian.config.schema import LifecycleConfig
from vllm_guardian.gates.ledger import LedgerView
from vllm_guardian.model import Target
from vllm_guardian.series.store import SeriesStore


@dataclass(frozen=True)
class TargetState:
    """Facts the daemon tracks per target."""

    target: Target  # latest snapshot
    now: float  # monotonic now
    ready: bool  # the current API-server process has answered a canary (startup grace over)
    ever_ready: bool  # this target name has been ready at some point (survives restarts)
    api_alive: bool  # the API server of the snapshot still exists
    gone_since: float | None  # monotonic time the API server vanished
    engine_alive: bool | None  # None when no engine_core was ever seen in this target's tree
    canary_in_flight_since: float | None
    probe_interval: float = 1.0  # procfs/http sampling interval (seconds), for coverage math
    ready_since: float | None = None  # monotonic time the current API server became ready (warm-up)
    starting_since: float | None = None  # monotonic time this API-server incarnation was first seen
    lifecycle: LifecycleConfig = LifecycleConfig()  # startup limit, pause limit, resume grace
    hold: str | None = None  # "paused" / "sleeping" on purpose, as the server says
    hold_since: float | None = None
    hold_ended: float | None = None  # when the last pause or sleep ended
    # while held or in the resume grace after: when the run of holds began (a pause begun within
    # the grace of the last one, or a pause turned sleep, continues it); None otherwise
    held_since: float | None = None
    drained: bool = False  # taken out of rotation by the operator (`guardian drain`), until `guardian undrain`
    drain_ended: float | None = None  # when the operator's last drain ended
    # vLLM's own states (state/vllm_states.py): retired | checkpointing | checkpoint_failed | recovering | None
    vllm_phase: str | None = None
    recovering: tuple[tuple[int, float], ...] = ()  # engines within vLLM's own FT round, seconds in it
    overdue: tuple[tuple[int, float], ...] = ()  # engines whose round outlasted its timeout + grace (judged)
    ft_dead: tuple[int, ...] = ()  # engines vLLM's fault tolerance reports DEAD
    grpc: bool = False  # a --grpc server: no /metrics, no canary; progress read from /proc (detectors/grpc_spin.py)

    @property
    def on_purpose(self) -> bool:
        """Paused or asleep on purpose, drained by the operator, or within the resume grace after
        either: no hang is judged (a paused engine makes no progress by design; a drained one may
        be under an operator's hands; a resumed one works through its queue)."""
        if self.hold is not None or self.drained:
            return True
        ends = [t for t in (self.hold_ended, self.drain_ended) if t is not None]
        return bool(ends) and self.now - max(ends) < self.lifecycle.resume_grace

    @property
    def drained_by_operator(self) -> bool:
        """Drained by the operator, or within the resume grace after the undrain (the operator's
        own act, unlike a hold the server reports: ``detectors/hold.py``)."""
        if self.drained:
            return True
        return self.drain_ended is not None and self.now - self.drain_ended < self.lifecycle.resume_grace


@dataclass(frozen=True)
class TargetView:
    state: TargetState
    series: SeriesStore  # read only
    gates: LedgerView | None = None  # the output-correctness gates' recent verdicts, when gates run

    @property
    def name(self) -> str:
        return self.state.target.name

    @property
    def now(self) -> float:
        return self.state.now
