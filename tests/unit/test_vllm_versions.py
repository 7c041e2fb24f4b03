"""The vLLM capability table: one row per version range, and vLLM's own states turned into phases."""

from __future__ import annotations

import pytest

from vllm_guardian import vllm_versions as vv
from vllm_guardian.probes.vllm_metrics_parse import WATCHED


@pytest.mark.parametrize(
    ("version", "since", "notice_has"),
    [
        ("0.32.0", "0.32.0", None),
        ("0.32.1", "0.32.0", None),
        ("0.33.0", "0.33.0", None),
        ("v0.33.2", "0.33.0", None),
        ("0.34.0", "0.34.0", None),
        ("0.34.0rc1", "0.34.0", None),
        ("0.34.0+cu128", "0.34.0", None),
        ("0.34.3", "0.34.0", None),
        ("0.35.0", "0.34.0", "newer than known"),
        ("1.0.0", "0.34.0", "newer than known"),
        ("0.31.4", "0.32.0", "older than"),
        ("dev", "0.32.0", "not read"),
        (None, "0.32.0", "not read"),
    ],
    ids=lambda v: str(v),
)
def test_a_version_gets_its_row_and_a_notice_only_when_guessed(version, since, notice_has):
    match = vv.capabilities_for(version)
    assert match.row.since == since
    if notice_has is None:
        assert match.notice is None
    else:
        assert match.notice is not None and notice_has in match.notice and "\n" not in match.notice


ROW = {r.since: r for r in vv.ROWS}


@pytest.mark.parametrize(
    ("since", "checkpoint", "ft_status", "retire", "dumps", "grpc"),
    [
        ("0.32.0", None, "/fault_tolerance/status", False, False, True),
        ("0.33.0", None, "/fault_tolerance/status", True, True, True),
        ("0.34.0", "/checkpoint/status", "/v1/fault_tolerance/status", True, True, True),
    ],
    ids=["0.32", "0.33", "0.34"],
)
def test_each_row_says_which_endpoints_and_features_its_version_has(since, checkpoint, ft_status, retire, dumps, grpc):
    row = ROW[since]
    assert (row.checkpoint_status_path, row.fault_tolerance_status_path) == (checkpoint, ft_status)
    assert (row.elastic_ep_retire, row.watchdog_dumps, row.grpc_server) == (retire, dumps, grpc)
    assert row.health_path == "/health" and row.metrics_path == "/metrics"


@pytest.mark.parametrize("row", vv.ROWS, ids=lambda r: r.since)
def test_every_row_lists_the_metrics_the_parser_watches_and_the_process_titles(row):
    assert set(row.metrics) == set(WATCHED)
    assert row.titles == ("VLLM::APIServer", "VLLM::EngineCore", "VLLM::Worker")
    assert row.sources, "every row names the vLLM source files it came from"


def test_rows_are_in_version_order():
    from packaging.version import Version

    assert [Version(r.since) for r in vv.ROWS] == sorted(Version(r.since) for r in vv.ROWS)


@pytest.mark.parametrize(
    ("code", "body", "phase"),
    [
        (503, {"state": "running"}, vv.RUNNING),
        (503, {"state": "preparing"}, vv.CHECKPOINTING),
        (200, {"state": "prepared"}, vv.CHECKPOINTING),
        (503, {"state": "restoring"}, vv.CHECKPOINTING),
        (500, {"state": "failed", "error": "cuda-checkpoint failed"}, vv.CHECKPOINT_FAILED),
        (200, {"state": "running"}, None),  # a code vLLM never gives that state: not believed
        (503, {"state": "sleeping"}, None),
        (503, {"state": 3}, None),
        (503, None, None),
        (502, {}, None),
    ],
    ids=[
        "running-503",
        "preparing",
        "prepared",
        "restoring",
        "failed",
        "wrong-code",
        "unknown",
        "not-str",
        "no-body",
        "empty",
    ],
)
def test_checkpoint_status_answers_map_to_phases(code, body, phase):
    assert vv.checkpoint_phase(code, body) == phase


def test_fault_tolerance_status_gives_each_engine_its_phase():
    body = {
        "schema_version": 1,
        "total_engines": 4,
        "engines": [
            {"id": 0, "status": "healthy"},
            {"id": 1, "status": "diagnosing"},
            {"id": 2, "status": "UNHEALTHY"},
            {"id": 3, "status": "dead"},
        ],
    }
    assert vv.fault_tolerance_phases(body) == {0: vv.RUNNING, 1: vv.RECOVERING, 2: vv.RECOVERING, 3: vv.ENGINE_DEAD}


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {"engines": "x"},
        {"engines": [1, "a", {"id": "0", "status": "dead"}, {"id": True, "status": "dead"}]},
        {"engines": [{"id": -1, "status": "dead"}, {"id": 0, "status": 5}, {"id": 1, "status": "bogus"}]},
    ],
    ids=["none", "list", "engines-str", "bad-entries", "bad-values"],
)
def test_malformed_fault_tolerance_answers_give_no_phase(body):
    assert vv.fault_tolerance_phases(body) == {}


def test_a_huge_fault_tolerance_answer_is_read_only_up_to_the_bound():
    body = {"engines": [{"id": i, "status": "dead"} for i in range(5000)]}
    assert len(vv.fault_tolerance_phases(body, max_engines=16)) == 16


def test_the_guardian_stands_down_for_vllms_recovery_timeout_plus_grace():
    assert vv.recovery_deadline(1000.0, grace_s=30.0) == 1000.0 + 120.0 + 30.0


@pytest.mark.parametrize(
    ("code", "body", "retired"),
    [
        (503, {"error": vv.RETIRED_ERROR}, True),
        (503, {"error": "The model is currently scaling. Please try again later."}, False),
        (200, {"error": vv.RETIRED_ERROR}, False),
        (503, None, False),
    ],
    ids=["retired", "scaling", "not-503", "no-body"],
)
def test_only_the_retired_rank_answer_means_retired(code, body, retired):
    assert vv.is_retired_answer(code, body) is retired


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("VLLM_STACK_DUMP_for_EngineCore_DP0_4242.log", ("EngineCore_DP0", 4242)),
        ("VLLM_STACK_DUMP_for_APIServer_7.log", ("APIServer", 7)),
        ("VLLM_STACK_DUMP_for__7.log.1", None),
        ("VLLM_STACK_DUMP_for_x_notapid.log", None),
        ("other.log", None),
        ("../VLLM_STACK_DUMP_for_x_1.log", None),
    ],
    ids=["engine", "api", "rotated", "no-pid", "other", "path"],
)
def test_watchdog_dump_names_are_recognised(name, parsed):
    assert vv.is_watchdog_dump(name) == parsed


@pytest.mark.parametrize(
    ("since", "sleep_mode", "path"),
    [
        ("0.34.0", True, "/checkpoint/prepare?mode=wait"),
        ("0.34.0", False, None),
        ("0.33.0", True, None),
        ("0.32.0", True, None),
    ],
    ids=["0.34-sleep", "0.34-no-sleep", "0.33", "0.32"],
)
def test_checkpoint_drain_is_offered_only_by_034_with_sleep_mode(since, sleep_mode, path):
    assert vv.drain_via_checkpoint(ROW[since], sleep_mode=sleep_mode) == path


def test_a_grpc_server_says_it_has_no_metrics_and_no_http_canary():
    seen, unseen = vv.visibility(ROW["0.34.0"], grpc=True)
    assert "grpc.health.v1" in seen and any("/metrics" in u for u in unseen)
    assert any("canary" in u for u in unseen)


def test_an_http_034_server_shows_its_checkpoint_and_fault_tolerance_status():
    seen, unseen = vv.visibility(ROW["0.34.0"], grpc=False)
    assert "/checkpoint/status" in seen and "/v1/fault_tolerance/status" in seen and unseen == ()
