"""The daemon puts the diagnosis on the incident once its evidence is in (fake /proc, HTTP, runner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_guardian.bundle.evidence import default_locate
from vllm_guardian.host.http import HttpError
from vllm_guardian.incidents import IncidentStore
from vllm_guardian.model import Kind
from vllm_guardian.testing.fake_runner import result

from tests.support.daemon_world import ENGINE, World

SITE = "/opt/venv/lib/python3.11/site-packages"
INPUT_TID = 111


def frame(name, path, line=10):
    return {
        "name": name,
        "filename": path,
        "module": None,
        "short_filename": path.rsplit("/", 1)[-1],
        "line": line,
        "locals": None,
        "is_entry": False,
        "is_shim_entry": False,
    }


ENGINE_DUMP = json.dumps(
    [
        {
            "pid": ENGINE,
            "thread_id": 1,
            "thread_name": "MainThread",
            "os_thread_id": ENGINE,
            "active": False,
            "owns_gil": False,
            "process_info": None,
            "frames": [
                frame("Queue.get", "/usr/lib/python3.11/queue.py", 171),
                frame("EngineCoreProc._process_input_queue", f"{SITE}/vllm/v1/engine/core.py", 990),
            ],
        },
        {
            "pid": ENGINE,
            "thread_id": 2,
            "thread_name": "Thread-1 (process_input_sockets)",
            "os_thread_id": INPUT_TID,
            "active": True,
            "owns_gil": True,
            "process_info": None,
            "frames": [
                frame("LRUCache.popitem", f"{SITE}/vllm/utils/cache.py", 205),
                frame("EngineCoreProc.process_input_sockets", f"{SITE}/vllm/v1/engine/core.py", 1300),
            ],
        },
    ]
)


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    w.cmd.answer((default_locate("py-spy") or "py-spy", "dump", "--pid", str(ENGINE)), result(ENGINE_DUMP))
    yield w
    w.d.runner.shutdown()


def test_a_busy_loop_incident_gets_its_diagnosis_after_the_evidence(world):
    world.step(4)
    world.http.route("POST", "/v1/completions", HttpError("timeout", "no answer within 5s"))
    opened = []
    for _ in range(20):
        world.engine_ticks += 100
        world.proc.set_thread(ENGINE, INPUT_TID, utime=world.engine_ticks, state="R", syscall="running")
        opened += [t for t in world.step() if t.previous is None]
        if opened:
            break
    assert [t.incident.kind for t in opened] == [Kind.BUSY_LOOP]
    inc = opened[0].incident
    assert inc.signals["tid"] == INPUT_TID and inc.diagnosis == ()
    world.step(2)  # evidence, then the diagnosis of its bundle, off the loop
    stored = IncidentStore(world.cfg.state_dir).load(inc.id)
    assert stored is not None
    assert stored.diagnosis[0]["id"] == "vllm-mm-cache-lru-busy-loop"
    assert stored.crash is None
    bundle = Path(stored.evidence_dir or "")
    assert (bundle / "report.html").exists() and (bundle / "diagnosis.json").exists()
    assert "Diagnosis: Multi-modal processor cache" in (bundle / "summary.txt").read_text()
