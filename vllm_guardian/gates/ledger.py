"""Each target's recent gate verdicts and external reports: what ``output_corruption`` reads.

The only state of the gates besides the baselines. Bounded deques, guarded by a
lock (reports arrive on the Redis listener thread, rounds are folded on the loop).
``view(name)`` hands the detector an immutable snapshot. ``reset`` forgets a
target's history (a new API server: its predecessor's failures are not its own).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from vllm_guardian.gates.judge import GateFailure

MAX_ROUNDS = 64
MAX_REPORTS = 512


@dataclass(frozen=True)
class RoundRecord:
    t: float  # monotonic time the round was judged
    failures: tuple[GateFailure, ...]
    judged: frozenset[str]  # levels judged this round (L4 included when it was)
    ambiguous: bool = False  # L4 split evenly with no baseline: alert only
    model: str = ""
    version: str = ""  # the vLLM version the round was answered by
    evidence: tuple[dict, ...] = ()  # per failing prompt: answer, tokens, logprobs, baseline (gates.evidence)


@dataclass(frozen=True)
class ReportRecord:
    t: float  # monotonic time the report was received
    failure: GateFailure
    source: str  # who reported (request id, instance)


@dataclass(frozen=True)
class LedgerView:
    rounds: tuple[RoundRecord, ...] = ()
    reports: tuple[ReportRecord, ...] = ()
    interval: float = 60.0  # seconds between the target's gate rounds

    @property
    def empty(self) -> bool:
        return not self.rounds and not self.reports


class GateLedger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rounds: dict[str, deque[RoundRecord]] = {}
        self._reports: dict[str, deque[ReportRecord]] = {}

    def add_round(self, target: str, rec: RoundRecord) -> None:
        with self._lock:
            self._rounds.setdefault(target, deque(maxlen=MAX_ROUNDS)).append(rec)

    def add_report(self, target: str, rec: ReportRecord) -> None:
        with self._lock:
            self._reports.setdefault(target, deque(maxlen=MAX_REPORTS)).append(rec)

    def view(self, target: str, interval: float = 60.0) -> LedgerView:
        with self._lock:
            return LedgerView(tuple(self._rounds.get(target, ())), tuple(self._reports.get(target, ())), interval)

    def targets(self) -> set[str]:
        with self._lock:
            return set(self._rounds) | set(self._reports)

    def reset(self, target: str) -> None:
        with self._lock:
            self._rounds.pop(target, None)
            self._reports.pop(target, None)

    def last_round(self, target: str) -> RoundRecord | None:
        with self._lock:
            rounds = self._rounds.get(target)
            return rounds[-1] if rounds else None
