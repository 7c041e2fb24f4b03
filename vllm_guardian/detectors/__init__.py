"""Detectors: pure functions of a target's view and the detectors config, one file per kind.

``DETECTORS`` is the explicit table (kind -> ``evaluate(view, cfg) -> Finding | None``);
``evaluate_all`` runs every one of them (``mode: observe`` still evaluates: the
mode only decides what the daemon does with an incident).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Callable, Mapping

from vllm_guardian.config.schema import DetectorsConfig
from vllm_guardian.model import Finding, Kind
from vllm_guardian.detectors import (
    accel_memory_leak,
    busy_loop,
    engine_dead,
    engine_stall,
    host_memory_leak,
    kv_cache_leak,
    output_corruption,
    pause_too_long,
    startup_timeout,
)
from vllm_guardian.detectors.view import TargetState, TargetView

Detector = Callable[[TargetView, DetectorsConfig], "Finding | None"]

DETECTORS: Mapping[Kind, Detector] = MappingProxyType(
    {
        Kind.BUSY_LOOP: busy_loop.evaluate,
        Kind.ENGINE_STALL: engine_stall.evaluate,
        Kind.ENGINE_DEAD: engine_dead.evaluate,
        Kind.KV_CACHE_LEAK: kv_cache_leak.evaluate,
        Kind.ACCEL_MEMORY_LEAK: accel_memory_leak.evaluate,
        Kind.HOST_MEMORY_LEAK: host_memory_leak.evaluate,
        Kind.OUTPUT_CORRUPTION: output_corruption.evaluate,
        Kind.STARTUP_TIMEOUT: startup_timeout.evaluate,
        Kind.PAUSE_TOO_LONG: pause_too_long.evaluate,
    }
)


def evaluate_all(view: TargetView, cfg: DetectorsConfig) -> dict[Kind, Finding | None]:
    """Every detector's finding for one target on one tick."""
    return {kind: detect(view, cfg) for kind, detect in DETECTORS.items()}


__all__ = ["DETECTORS", "Detector", "TargetState", "TargetView", "evaluate_all"]
