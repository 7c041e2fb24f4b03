"""What the gates share with the rest of the guardian: the ledger, per-target status lines,
the intake of external reports, rebaseline and confirmation requests.

Built by the gates probe and published in the loop's ``Readings``; the detector reads
``view``, the status document ``status_of``, the report listener calls ``accept_report``
(from its own thread; an accepted report asks the probe for a confirmation round) and
remediation ``request_rebaseline`` after a verified restart.
A bad report is counted by outcome and logged once per episode (the episode of
malformed messages ends with the next good one; an unknown target's when it is known).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from vllm_guardian.config.schema import OutputCorruptionConfig
from vllm_guardian.gates.judge import GateFailure
from vllm_guardian.gates.ledger import GateLedger, LedgerView, ReportRecord
from vllm_guardian.gates.reports import ReportError, for_node, parse_report

STALE_REPORT_S = 600.0
OUTCOMES = ("accepted", "malformed", "unknown_target", "other_node", "stale")


@dataclass
class TargetGates:
    """The latest round of one target, as shown in ``guardian status``."""

    model: str | None = None
    version: str | None = None
    last_round_mono: float | None = None
    rounds: int = 0
    requests: int = 0
    failed_rounds: int = 0  # rounds with at least one failure, since the guardian started
    incomplete_rounds: int = 0  # rounds a request failed in (not judged)
    tie_flips: int = 0  # answers that left the baseline at a near tie (batching), not judged
    confirmation_rounds: int = 0  # quick rounds run to confirm a failure or a report, since the start
    confirming: int | None = None  # quick rounds left in the current failing episode; None: none
    failures_by_level: dict[str, int] = field(default_factory=dict)  # since the guardian started
    baseline: str = "none"  # none | taking k/n | complete
    agreement: str | None = None  # L4 status of the latest round
    failures: tuple[GateFailure, ...] = ()
    notes: tuple[str, ...] = ()
    logged: set[str] = field(default_factory=set)  # notes already logged (once per episode)


class GatesShared:
    def __init__(self, node: str, interval: float, log: logging.Logger) -> None:
        self.node, self.interval, self.log = node, interval, log
        self.ledger = GateLedger()
        self.targets: dict[str, TargetGates] = {}
        self.known_targets: frozenset[str] = frozenset()
        self.report_counts: dict[str, int] = {o: 0 for o in OUTCOMES}
        self._episodes: set[str] = set()
        self._rebaseline: set[str] = set()
        self._lock = threading.Lock()
        self.exchange: Any = None  # a FingerprintExchange when Redis is wired (L4 across nodes)
        self.confirmer: Callable[[str, str], None] | None = None  # the gates probe's request_confirmation

    # ---------------------------------------------------------------- confirmation
    def request_confirmation(self, target: str, reason: str) -> None:
        """A quick own gate round for ``target`` (the probe's ``request_confirmation``). Any thread."""
        if self.confirmer is not None:
            self.confirmer(target, reason)

    # ---------------------------------------------------------------- detector, status
    def view(self, target: str) -> LedgerView:
        return self.ledger.view(target, self.interval)

    def status_of(self, target: str, now: float, cfg: OutputCorruptionConfig) -> dict[str, Any] | None:
        from vllm_guardian.detectors.output_corruption import health_score  # the score is the detector's reading

        tg = self.targets.get(target)
        view = self.view(target)
        if tg is None and view.empty:
            return None
        tg = tg or TargetGates()
        return {
            "health_score": health_score(view, now, cfg),
            "model": tg.model,
            "version": tg.version,
            "baseline": tg.baseline,
            "agreement": tg.agreement,
            "rounds": tg.rounds,
            "requests": tg.requests,
            "failed_rounds": tg.failed_rounds,
            "incomplete_rounds": tg.incomplete_rounds,
            "tie_flips": tg.tie_flips,
            "confirmation_rounds": tg.confirmation_rounds,
            "confirming": tg.confirming,
            "failures_by_level": dict(tg.failures_by_level),
            "last_round_age_s": None if tg.last_round_mono is None else round(now - tg.last_round_mono, 1),
            "failures": [f.to_dict() for f in tg.failures],
            "reports": len(view.reports),
            "notes": list(tg.notes),
        }

    def summary(self) -> dict[str, Any]:
        with self._lock:
            return {"reports": dict(self.report_counts)}

    # ---------------------------------------------------------------- rebaseline
    def request_rebaseline(self, target: str) -> None:
        with self._lock:
            self._rebaseline.add(target)

    def take_rebaseline(self, target: str) -> bool:
        with self._lock:
            if target in self._rebaseline:
                self._rebaseline.discard(target)
                return True
            return False

    # ---------------------------------------------------------------- external reports
    def _count(self, outcome: str, episode: str | None, message: str) -> str:
        with self._lock:
            self.report_counts[outcome] += 1
            first = episode is not None and episode not in self._episodes
            if first:
                self._episodes.add(episode)  # type: ignore[arg-type]  # checked just above
        if first:
            self.log.warning("gate report %s: %s (further ones counted, not logged)", outcome, message)
        return outcome

    def _end_episode(self, episode: str) -> None:
        with self._lock:
            self._episodes.discard(episode)

    def accept_report(self, raw: bytes | str, mono: float, wall: float) -> str:
        """One message from the reports channel: into the ledger, or counted and (once) logged."""
        try:
            r = parse_report(raw)
        except ReportError as e:
            return self._count("malformed", "malformed", str(e))
        self._end_episode("malformed")
        if not for_node(r, self.node):
            return self._count("other_node", None, r.node or "")
        if r.target not in self.known_targets:
            return self._count("unknown_target", f"unknown:{r.target}", f"no target {r.target!r} on {self.node}")
        self._end_episode(f"unknown:{r.target}")
        if wall - r.timestamp > STALE_REPORT_S:
            return self._count("stale", "stale", f"report of {r.timestamp:.0f} is {wall - r.timestamp:.0f}s old")
        self.ledger.add_report(r.target, ReportRecord(mono, r.failure(), r.request_id))
        self.request_confirmation(r.target, f"{r.level} report {r.type!r} ({r.request_id})")
        return self._count("accepted", None, "")
