"""Detectors: pure functions of a target's view and the detectors config, one file per kind.

``DETECTORS`` is the explicit table (kind -> ``evaluate(view, cfg) -> Finding | None``), drawn from
``kinds.KINDS`` (one row per kind: everything else a kind means);
``evaluate_all`` runs every one of them (``mode: observe`` still evaluates: the
mode only decides what the daemon does with an incident).
"""

from __future__ import annotations

from collections.abc import Mapping

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.model import Finding, Kind
from vllm_guardian.detectors.kinds import DETECTORS, Detector
from vllm_guardian.detectors.view import TargetState, TargetView


def evaluate_all(
    view: TargetView, cfg: DetectorsConfig, detectors: Mapping[Kind, Detector] = DETECTORS
) -> dict[Kind, Finding | None]:
    """Every detector's finding for one target on one tick (``detectors``: the kind table's)."""
    return {kind: detect(view, cfg) for kind, detect in detectors.items()}


__all__ = ["DETECTORS", "Detector", "TargetState", "TargetView", "evaluate_all"]
