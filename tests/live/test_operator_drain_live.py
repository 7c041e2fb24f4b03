"""Live: an operator's drain is on purpose. A real guardian process beside a real (simulated) vLLM
server: drained with ``guardian drain``, its engine hangs and nothing opens; after ``guardian
undrain`` and the resume grace, the hang is judged as usual."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.support.guardian_process import GuardianProcess, fire
from tests.support.wait import poll
from vllm_guardian.sim.control import SimServer

pytestmark = pytest.mark.live

HANGS = ("busy_loop", "engine_stall")  # a spin on a starved CPU may read as a stall: a hang either way
CLI = [sys.executable, "-m", "vllm_guardian.cli.main"]


@pytest.fixture
def sim():
    server = SimServer(startup_delay=1.0).start()
    try:
        server.wait_ready(60)
        yield server
    finally:
        server.stop()


def cli(g: GuardianProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args, "-c", str(g.config_path)], capture_output=True, text=True, timeout=30)


def test_a_server_drained_by_the_operator_hangs_without_an_incident_until_after_undrain(tmp_path, sim):
    for _ in range(3):
        sim.complete("warm traffic", max_tokens=2, timeout=30)
    g = GuardianProcess(tmp_path, sim.port, extra={"lifecycle": {"resume_grace": 5}}).start()
    try:
        assert g.wait_ready(30), g.log_text()
        out = cli(g, "drain", "sim")
        assert out.returncode == 0 and "drain started" in out.stdout, out
        assert poll(lambda: (t := g.target()) and t["phase"] == "drained", 30), g.target()
        fire(sim, "busy_loop")
        time.sleep(30)  # the scenario: longer than busy_loop's window and engine_stall's 20 s
        assert [i["kind"] for i in g.incidents() if i["kind"] in HANGS] == [], g.log_text()
        assert g.require_target()["phase"] == "drained"
        assert cli(g, "undrain", "sim").returncode == 0
        inc = poll(lambda: next((i for i in g.incidents() if i["kind"] in HANGS), None), 90)
        assert inc is not None, g.log_text()
    finally:
        assert g.stop() == 0, g.log_text()
