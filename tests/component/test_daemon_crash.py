"""A vLLM server that dies: the engine_dead incident gets a bundle (no live process, the series) and
its ``crash`` from the target's log_path (fake /proc, HTTP and runner; the log is vLLM's format)."""

from __future__ import annotations

import pytest

from vllm_guardian.host.http import HttpError
from vllm_guardian.incidents import IncidentStore
from vllm_guardian.model import Kind

from tests.support.daemon_world import API, ENGINE, TRACKER, World

LOG = """\
(APIServer pid=100) INFO 12-01 05:54:40 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s
(EngineCore_DP0 pid=110) ERROR 12-01 05:54:41 [core.py:1010] EngineCore encountered a fatal error.\r
(EngineCore_DP0 pid=110) ERROR 12-01 05:54:41 [core.py:1010] Traceback (most recent call last):\r
(EngineCore_DP0 pid=110) ERROR 12-01 05:54:41 [core.py:1010]   File "/v/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 1001, in run_engine_core\r
(EngineCore_DP0 pid=110) ERROR 12-01 05:54:41 [core.py:1010]     engine_core.run_busy_loop()\r
(EngineCore_DP0 pid=110) ERROR 12-01 05:54:41 [core.py:1010]   File "/v/lib/python3.11/site-packages/vllm/v1/core/sched/scheduler.py", line 1555, in schedule\r
(EngineCore_DP0 pid=110) ERROR 12-01 05:54:41 [core.py:1010]     self._update_after_schedule(scheduler_output)\r
(EngineCore_DP0 pid=110) ERROR 12-01 05:54:41 [core.py:1010] AssertionError: preempted request rescheduled
(APIServer pid=100) ERROR 12-01 05:54:41 [async_llm.py:600] AsyncLLM output_handler failed.\r
(APIServer pid=100) ERROR 12-01 05:54:41 [async_llm.py:600] Traceback (most recent call last):\r
(APIServer pid=100) ERROR 12-01 05:54:41 [async_llm.py:600]   File "/v/lib/python3.11/site-packages/vllm/v1/engine/async_llm.py", line 590, in output_handler\r
(APIServer pid=100) ERROR 12-01 05:54:41 [async_llm.py:600]     outputs = await engine_core.get_output_async()\r
(APIServer pid=100) ERROR 12-01 05:54:41 [async_llm.py:600] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
(APIServer pid=100) INFO 12-01 05:54:42 [launcher.py:110] Shutting down FastAPI HTTP server.
"""  # noqa: E501


@pytest.fixture
def world(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(LOG)
    w = World(
        tmp_path,
        config={
            "autodiscover": False,
            "targets": [{"name": "llm", "match": {"cmdline_regex": "--port 8000"}, "log_path": str(log)}],
        },
    )
    yield w
    w.d.runner.shutdown()


def test_a_dead_servers_incident_names_the_engines_assertion(world):
    world.step(4)
    assert world.target()["ready"]
    for pid in (ENGINE, TRACKER, API):  # the whole server exits, as vLLM does after its engine died
        world.proc.remove(pid)
    world.http.route("GET", "/health", HttpError("refused", "Connection refused"))
    opened = [t for t in world.step(4) if t.previous is None]
    assert [t.incident.kind for t in opened] == [Kind.ENGINE_DEAD]
    world.step(2)
    stored = IncidentStore(world.cfg.state_dir).load(opened[0].incident.id)
    assert stored is not None
    assert stored.evidence_dir is not None
    crash = stored.crash
    assert crash is not None
    assert (crash["exception"], crash["process"], crash["pid"]) == ("AssertionError", "EngineCore_DP0", 110)
    assert crash["frames"][-1]["function"] == "schedule"
    assert crash["followed_by"][0].startswith("vllm.v1.engine.exceptions.EngineDeadError")
    assert stored.diagnosis[0]["id"] == "vllm-scheduler-assertion"
