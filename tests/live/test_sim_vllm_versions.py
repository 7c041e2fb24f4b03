"""The simulated vLLM's 0.32 / 0.33 / 0.34 modes answer like those releases, and the capability table reads them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from vllm_guardian import vllm_versions as vv
from vllm_guardian.sim.control import SimServer

pytestmark = pytest.mark.live


def call(server: SimServer, path: str, body: object | None = None, method: str | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(server.url + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def serve(version: str, *flags: str) -> SimServer:
    server = SimServer(startup_delay=0.3, extra_args=("--vllm-version", version, *flags)).start()
    server.wait_ready(30)
    return server


@pytest.fixture(scope="module")
def v034():
    with serve("0.34.0", "--enable-sleep-mode", "--enable-fault-tolerance") as server:
        yield server


@pytest.mark.parametrize(
    ("version", "checkpoint_code", "ft_paths"),
    [
        ("0.32.0", 404, {"/fault_tolerance/status": 200, "/v1/fault_tolerance/status": 404}),
        ("0.33.0", 404, {"/fault_tolerance/status": 200, "/v1/fault_tolerance/status": 404}),
        ("0.34.0", 503, {"/fault_tolerance/status": 404, "/v1/fault_tolerance/status": 200}),
    ],
    ids=["0.32", "0.33", "0.34"],
)
def test_each_version_mode_registers_its_rows_endpoints(version, checkpoint_code, ft_paths):
    with serve(version, "--enable-sleep-mode", "--enable-fault-tolerance") as server:
        code, answer = call(server, "/version")
        assert code == 200 and vv.capabilities_for(answer["version"]).row.since == version
        assert call(server, "/checkpoint/status")[0] == checkpoint_code
        assert {p: call(server, p)[0] for p in ft_paths} == ft_paths


def test_checkpoint_cycle_prepare_prepared_restore_reads_as_checkpointing_then_running(v034):
    assert vv.checkpoint_phase(*call(v034, "/checkpoint/status")) == vv.RUNNING  # 503 while running
    code, answer = call(v034, "/checkpoint/prepare?mode=wait", method="POST")
    assert (code, answer) == (200, {"state": "prepared"})
    assert vv.checkpoint_phase(*call(v034, "/checkpoint/status")) == vv.CHECKPOINTING
    assert call(v034, "/health")[0] == 200
    assert call(v034, "/checkpoint/restore", method="POST") == (200, {"state": "running"})
    assert vv.checkpoint_phase(*call(v034, "/checkpoint/status")) == vv.RUNNING


def test_a_failed_checkpoint_reads_as_checkpoint_failed_and_refuses_prepare(v034):
    call(v034, "/sim/vllm_state", {"checkpoint": "failed"}, "POST")
    try:
        assert vv.checkpoint_phase(*call(v034, "/checkpoint/status")) == vv.CHECKPOINT_FAILED
        assert call(v034, "/checkpoint/prepare?mode=wait", method="POST")[0] == 400
    finally:
        call(v034, "/sim/vllm_state", {"checkpoint": "running"}, "POST")


@pytest.mark.parametrize(
    ("status", "phase"),
    [("diagnosing", vv.RECOVERING), ("unhealthy", vv.RECOVERING), ("dead", vv.ENGINE_DEAD), ("healthy", vv.RUNNING)],
    ids=["diagnosing", "unhealthy", "dead", "healthy"],
)
def test_fault_tolerance_status_of_the_engine_reads_as_its_phase(v034, status, phase):
    call(v034, "/sim/vllm_state", {"engine_status": {"0": status}}, "POST")
    try:
        assert vv.fault_tolerance_phases(call(v034, "/v1/fault_tolerance/status")[1]) == {0: phase}
    finally:
        call(v034, "/sim/vllm_state", {"engine_status": {"0": "healthy"}}, "POST")


def test_a_retired_rank_keeps_health_200_and_answers_the_retired_503_elsewhere(v034):
    call(v034, "/sim/vllm_state", {"retired": True}, "POST")
    try:
        assert call(v034, "/health")[0] == 200
        assert vv.is_retired_answer(*call(v034, "/v1/models"))
        assert vv.is_retired_answer(*call(v034, "/v1/completions", {"prompt": "x", "max_tokens": 1}, "POST"))
    finally:
        call(v034, "/sim/vllm_state", {"retired": False}, "POST")
    assert call(v034, "/v1/models")[0] == 200


def test_checkpoint_endpoints_need_sleep_mode_on_034():
    with serve("0.34.0") as server:
        assert call(server, "/checkpoint/status")[0] == 404
        assert call(server, "/checkpoint/prepare?mode=wait", method="POST")[0] == 404
