"""Where an incident transition goes: the evidence hook, the counters, the log line and the sinks.

``TransitionFanout.emit(tr)``: an incident that opened is first handed to ``opened`` (the
responder's ``incident_opened``: evidence before any action), then counted in the self-stats
(opened / resolved per kind), then handed to every sink in order, the log line first. A sink
that raises is logged once per episode (``sink:<name>``) and never takes the loop down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from vllm_guardian.clock import Clock
from vllm_guardian.model import Incident, Transition
from vllm_guardian.state.episodes import EpisodeLog
from vllm_guardian.state.selfstats import SelfStats

Sink = Callable[[Transition], None]


class TransitionFanout:
    def __init__(
        self,
        opened: Callable[[Incident], None],
        sinks: Iterable[Sink],
        stats: SelfStats,
        episodes: EpisodeLog,
        clock: Clock,
        log: logging.Logger,
    ) -> None:
        self.opened = opened
        self.sinks: tuple[Sink, ...] = (self._log_transition, *sinks)
        self.stats, self.episodes, self.clock, self.log = stats, episodes, clock, log

    def emit(self, tr: Transition) -> None:
        if tr.previous is None:
            self.opened(tr.incident)
        counter = self.stats.incidents_opened if tr.previous is None else self.stats.incidents_resolved
        counter[tr.incident.kind.value] = counter.get(tr.incident.kind.value, 0) + 1
        for sink in self.sinks:
            try:
                sink(tr)
            except Exception as e:  # noqa: BLE001 - a sink must never take the loop down: logged once
                self.episodes.fail(
                    f"sink:{getattr(sink, '__name__', type(sink).__name__)}", repr(e), self.clock.monotonic()
                )

    def _log_transition(self, tr: Transition) -> None:
        inc = tr.incident
        fields = {"target": inc.target.name, "incident": inc.id, "kind": inc.kind.value}  # json/logfmt keys
        if tr.previous is None:
            self.log.warning(
                "INCIDENT %s %s on %s: %s", inc.id, inc.kind.value, inc.target.name, inc.summary, extra=fields
            )
            return
        self.log.warning("RESOLVED %s %s on %s", inc.id, inc.kind.value, inc.target.name, extra=fields)
