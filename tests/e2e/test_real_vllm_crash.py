"""Crash forensics on a real vLLM 0.32 (CPU build): an AssertionError raised inside the real
scheduler's ``schedule`` path kills EngineCore; the guardian's engine_dead incident names it.

The fault plugin's ``sched_assert`` trigger makes an ``assert`` fail in
``Scheduler._update_after_schedule`` (called from ``Scheduler.schedule``), so the
exception rises through vLLM's own frames and EngineCore dies by vLLM's own
"EngineCore encountered a fatal error" path; the API server then reports
``EngineDeadError``. The guardian reads the server's log (``log_path``), takes the
EngineCore's traceback (not the API server's echo) and matches the catalog.
Runs on its own server (it dies).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.harness import FaultSwitch, GuardianRun, VllmServer, cmdline_match, ensure_model, fire
from tests.support.wait import poll

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

SERVER_READY_TIMEOUT = 900.0
GUARDIAN_READY_TIMEOUT = 180.0
DETECT_TIMEOUT = 180.0
DIAGNOSIS_TIMEOUT = 120.0
MESSAGE = "scheduler invariant broken: preempted request rescheduled"


def test_a_scheduler_assertion_gives_an_engine_dead_incident_whose_crash_names_it(tmp_path, results):
    log = tmp_path / "vllm.log"
    server = VllmServer(ensure_model(), tmp_path / "faults", log).start()
    g = None
    try:
        results["crash_vllm_server_start_s"] = server.wait_ready(SERVER_READY_TIMEOUT)
        target = {"name": "vllm", "match": cmdline_match(server.port), "log_path": str(log)}
        g = GuardianRun(tmp_path / "g", server.port, extra={"targets": [target]}).start()
        assert g.wait_ready(GUARDIAN_READY_TIMEOUT), g.log_text()
        switch = FaultSwitch(server.fault_dir)
        onset = fire(server, switch, "sched_assert")
        inc = g.wait_incident("engine_dead", DETECT_TIMEOUT)
        assert inc is not None, g.log_text() + server.log_tail()
        results["crash_onset_to_incident_s"] = round(inc["opened_at"] - onset, 2)
        done = poll(
            lambda: next((i for i in g.incidents() if i["id"] == inc["id"] and i["crash"]), None),
            DIAGNOSIS_TIMEOUT,
            every=1.0,
        )
        assert done is not None, g.log_text()
        results["crash_onset_to_diagnosis_s"] = round(time.time() - onset, 2)
        crash = done["crash"]
        assert crash["exception"] == "AssertionError", f"{crash}\n{server.log_tail(80)}"
        assert MESSAGE in crash["message"]
        assert crash["process"] and crash["process"].startswith("EngineCore"), crash
        assert any(
            f["file"].endswith("vllm/v1/core/sched/scheduler.py") and f["function"] == "schedule"
            for f in crash["frames"]
        ), crash["frames"]
        assert crash["source"] == f"file {log}"
        assert done["diagnosis"][0]["id"] == "vllm-scheduler-assertion", done["diagnosis"]
        bundle = done["evidence_dir"]
        html = Path(bundle, "report.html").read_text(encoding="utf-8")
        assert 'id="crash"' in html and "AssertionError" in html
        summary = Path(bundle, "summary.txt").read_text(encoding="utf-8")
        assert "Crash: AssertionError: " + MESSAGE in summary
    finally:
        if g is not None:
            assert g.stop() == 0, g.log_text()
        server.stop()
