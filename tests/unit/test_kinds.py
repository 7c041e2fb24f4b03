"""The kind table (``detectors/kinds.py``): one row per kind, and what the rest of the guardian reads from it."""

from __future__ import annotations

import dataclasses

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.detectors import DETECTORS
from vllm_guardian.detectors.kinds import (
    ANSWER_KINDS,
    GENTLE_EVIDENCE,
    HANG_KINDS,
    KINDS,
    NEVER_RESTART,
    longest_history,
    series_store_for,
    spec,
)
from vllm_guardian.model import Kind


def test_every_kind_has_exactly_one_row():
    assert set(KINDS) == set(Kind)


def test_every_section_named_by_a_row_is_a_section_of_the_detectors_config():
    sections = {f.name for f in dataclasses.fields(DetectorsConfig)}
    assert {row.section for row in KINDS.values() if row.section} <= sections


def test_the_per_target_detectors_are_the_rows_with_an_evaluate():
    assert set(DETECTORS) == {k for k, row in KINDS.items() if row.evaluate is not None}
    assert {Kind.PROBE_FAILURE, Kind.RESTART_BUDGET_EXHAUSTED, Kind.ACCEL_FAULT}.isdisjoint(DETECTORS)


@pytest.mark.parametrize(
    "column, kinds",
    [
        (HANG_KINDS, {Kind.BUSY_LOOP, Kind.ENGINE_STALL, Kind.ENGINE_DEAD}),
        (
            GENTLE_EVIDENCE,
            {
                Kind.HOST_MEMORY_LEAK,
                Kind.ACCEL_MEMORY_LEAK,
                Kind.KV_CACHE_LEAK,
                Kind.PROBE_FAILURE,
                Kind.STARTUP_TIMEOUT,
                Kind.PAUSE_TOO_LONG,
                Kind.CHECKPOINT_FAILED,
            },
        ),
        (
            NEVER_RESTART,
            {
                Kind.PROBE_FAILURE,
                Kind.RESTART_BUDGET_EXHAUSTED,
                Kind.PAUSE_TOO_LONG,
                Kind.ACCEL_FAULT,
                Kind.CHECKPOINT_FAILED,
            },
        ),
        (ANSWER_KINDS, {Kind.OUTPUT_CORRUPTION}),
    ],
)
def test_the_columns_name_the_kinds_the_guardian_treated_that_way_before_the_table(column, kinds):
    assert column == kinds


def test_a_kind_without_a_section_is_alert_only_and_a_configured_mode_is_read_from_its_section():
    cfg = parse_config({"detectors": {"busy_loop": {"mode": "remediate"}}}).detectors
    assert KINDS[Kind.BUSY_LOOP].mode(cfg) is Mode.REMEDIATE
    assert KINDS[Kind.RESTART_BUDGET_EXHAUSTED].mode(cfg) is Mode.ALERT


def test_a_name_that_is_no_kind_has_no_row():
    assert spec("engine_dead") is KINDS[Kind.ENGINE_DEAD] and spec("nonsense") is None


def test_the_series_keep_twice_the_longest_look_back_plus_half_a_minute():
    cfg = parse_config({"detectors": {"host_memory_leak": {"window": 500}}})
    assert longest_history(cfg.detectors) == 500
    assert series_store_for(cfg).horizon == 2 * 500 + 30
