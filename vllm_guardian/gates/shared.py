"""What the gates share with the rest of the guardian: the ledger, per-target status lines,
the intake of external reports, rebaseline and confirmation requests.

Built by the gates probe and published in the loop's ``Readings``; the detector reads
``view``, the status document ``status_of``, the report listener calls ``accept_report``
(from its own thread; ``gates.intake`` decides what is let in) and remediation
``request_rebaseline`` after a verified restart. ``keys`` are the trust keys in force
(``gates.trust``, a ``KeyRing`` a reload re-reads): without them external reports and peers' fingerprints may raise an
alert, never a restart (``remediation/external.py``). ``exchange`` (L4 across nodes) is handed
in built, or None without Redis; its dropped and deleted entries are counted in ``summary``.
``started`` is the wall time the guardian began listening (reports stamped before it are refused:
``gates.intake``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from typing import Callable

from vllm_guardian.config.schema import TrustConfig
from vllm_guardian.config.schema_detectors import OutputCorruptionConfig
from vllm_guardian.gates.exchange import PeerFingerprints
from vllm_guardian.gates.intake import ReportIntake
from vllm_guardian.gates.judge import GateFailure
from vllm_guardian.gates.ledger import GateLedger, LedgerView
from vllm_guardian.gates.status import GatesSummary, TargetGatesStatus
from vllm_guardian.gates.trust import KeyRing


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
    def __init__(
        self,
        node: str,
        interval: float,
        log: logging.Logger,
        trust: TrustConfig | None = None,
        keys: KeyRing | None = None,
        exchange: PeerFingerprints | None = None,
        *,
        started: float | None = None,
    ) -> None:
        self.node, self.interval, self.log = node, interval, log
        self.keys = keys or KeyRing.fixed()
        self.ledger = GateLedger()
        self.targets: dict[str, TargetGates] = {}
        self._rebaseline: set[str] = set()
        self._asked: dict[str, str] = {}  # target -> why a confirmation round was requested
        self._lock = threading.Lock()
        self.exchange = exchange  # L4 across nodes, when Redis is wired
        # an accepted report asks for a round of our own
        self.intake = ReportIntake(
            node,
            trust or TrustConfig(),
            self.keys,
            self.ledger.add_report,
            log,
            confirm=self.request_confirmation,
            started=started,
        )
        self.report_counts = self.intake.counts

    # ---------------------------------------------------------------- confirmation
    def request_confirmation(self, target: str, reason: str) -> None:
        """Ask for a quick own gate round of ``target`` (the probe takes it next tick). Any thread."""
        with self._lock:
            self._asked.setdefault(target, reason)

    def take_confirmations(self) -> dict[str, str]:
        """The confirmation rounds asked for since the last call: target -> why."""
        with self._lock:
            asked, self._asked = self._asked, {}
        return asked

    @property
    def trusted(self) -> bool:
        """Are external messages authenticated (trust keys configured)?"""
        return self.keys.enabled

    @property
    def known_targets(self) -> frozenset[str]:
        return self.intake.known_targets

    @known_targets.setter
    def known_targets(self, names: frozenset[str]) -> None:
        if names != self.intake.known_targets:
            self.intake.known_targets = names
            self.intake.forget_targets()

    # ---------------------------------------------------------------- detector, status
    def view(self, target: str) -> LedgerView:
        return self.ledger.view(target, self.interval)

    def status_of(
        self,
        target: str,
        now: float,
        cfg: OutputCorruptionConfig,
        score: Callable[[LedgerView, float, OutputCorruptionConfig], int | None],
    ) -> TargetGatesStatus | None:
        """The target's gates as status shows them; ``score``: the detector's health reading
        (``detectors.output_corruption.health_score``: the gates do not judge)."""
        tg = self.targets.get(target)
        view = self.view(target)
        if tg is None and view.empty:
            return None
        tg = tg or TargetGates()
        return TargetGatesStatus(
            health_score=score(view, now, cfg),
            model=tg.model,
            version=tg.version,
            baseline=tg.baseline,
            agreement=tg.agreement,
            rounds=tg.rounds,
            requests=tg.requests,
            failed_rounds=tg.failed_rounds,
            incomplete_rounds=tg.incomplete_rounds,
            tie_flips=tg.tie_flips,
            confirmation_rounds=tg.confirmation_rounds,
            confirming=tg.confirming,
            failures_by_level=dict(tg.failures_by_level),
            last_round_age_s=None if tg.last_round_mono is None else round(now - tg.last_round_mono, 1),
            failures=tuple(f.excerpt() for f in tg.failures),
            reports=len(view.reports),
            notes=tuple(tg.notes),
        )

    def summary(self) -> GatesSummary:
        """The node's ``gates`` status section."""
        out = self.intake.summary()
        if self.exchange is None:
            return out
        return replace(out, fingerprints_dropped=self.exchange.dropped(), fingerprints_deleted=self.exchange.deleted())

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
    def accept_report(self, raw: bytes | str, mono: float, wall: float) -> str:
        """One message from the reports channel (``gates.intake``); returns its outcome."""
        return self.intake.accept(raw, mono, wall)
