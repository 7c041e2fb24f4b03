"""The gates' typed status sections: one target's gates (``TargetGatesStatus``, built by
``GatesShared.status_of``), the node's intake of external reports (``GatesSummary``) and the
trust keys in force with the control channel's messages (``TrustStatus``, ``gates.control``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vllm_guardian.gates.judge import GateFailure


@dataclass(frozen=True)
class TargetGatesStatus:
    """A target's ``gates`` section: health score, baseline, the latest round's failures and notes."""

    health_score: int | None  # 0..100 (detectors.output_corruption.health_score); None before a round
    model: str | None
    version: str | None
    baseline: str  # none | taking k/n | complete
    agreement: str | None  # L4 status of the latest round
    rounds: int
    requests: int
    failed_rounds: int
    incomplete_rounds: int
    tie_flips: int
    confirmation_rounds: int
    confirming: int | None
    failures_by_level: Mapping[str, int]
    last_round_age_s: float | None
    failures: tuple[GateFailure, ...]  # excerpts (GateFailure.excerpt)
    reports: int  # external reports the ledger holds for the target
    notes: tuple[str, ...]


@dataclass(frozen=True)
class GatesSummary:
    """The node's ``gates`` section: external reports by outcome, and peers' dropped fingerprints."""

    reports: Mapping[str, int]  # outcome -> messages (accepted, other_node, or a drop reason)
    reports_dropped: Mapping[str, int]  # drop reason -> messages
    unknown_targets: tuple[str, ...]  # recent target names no server here has
    trust: str  # signed | unsigned
    fingerprints_dropped: Mapping[str, int] | None = None  # reason -> entries; None: no exchange
    fingerprints_deleted: Mapping[str, int] | None = None  # reason -> hash fields deleted; None: no exchange


@dataclass(frozen=True)
class TrustStatus:
    """The node's ``trust`` section: the keys in force, by id only (never a secret), the last
    reload of them, and what came in on the control channel."""

    source: str  # where the keys come from: "file <path>", "env <NAME>" or "none"
    kids: tuple[str, ...]  # the key ids in force, the signing one first
    last_reload: str | None  # the last reload's outcome, in words (None: none since the start)
    control_messages: Mapping[str, int] | None  # outcome -> messages; None: not checked (no keys)
