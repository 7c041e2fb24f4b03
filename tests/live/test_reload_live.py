"""Live: SIGHUP re-reads the config of a running ``guardian run``; a valid one is applied in place
(open incidents kept, not duplicated), an invalid one is refused with its key path and the old
one kept, added and removed targets are picked up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

from vllm_guardian.sim.control import SimServer
from vllm_guardian.surface.control_socket import request
from tests.support.guardian_process import GuardianProcess
from tests.support.wait import poll

pytestmark = pytest.mark.live


@pytest.fixture
def paused_sim():
    """A simulated vLLM in dev mode, paused: a pause_too_long incident opens within seconds."""
    with SimServer(startup_delay=0.5, env=dict(os.environ, VLLM_SERVER_DEV_MODE="1")) as sim:
        sim.wait_ready(60)
        yield sim


@pytest.fixture
def guardian(tmp_path, paused_sim):
    g = GuardianProcess(tmp_path, paused_sim.port, extra={"lifecycle": {"max_pause": 2.0}}).start()
    try:
        assert g.wait_ready(30), g.log_text()
        yield g
    finally:
        assert g.stop() == 0, g.log_text()


def edit(g: GuardianProcess, change) -> None:
    cfg = yaml.safe_load(g.config_path.read_text())
    change(cfg)
    g.config_path.write_text(yaml.safe_dump(cfg))


def status(g: GuardianProcess) -> dict | None:
    """Straight from the control socket: `guardian status -c` cannot read an invalid file either."""
    try:
        return request(str(g.state_dir / "guardian.sock"), {"cmd": "status"})
    except (OSError, RuntimeError, ValueError):
        return None


def reload(g: GuardianProcess, count: int) -> dict:
    assert g.proc is not None
    g.proc.send_signal(signal.SIGHUP)
    st = poll(lambda: (s := status(g)) and s["config"]["reloads"] >= count and s, 20)
    assert st, g.log_text()
    return st["config"]["last_reload"]


def open_pause_incident(g: GuardianProcess, sim: SimServer) -> dict:
    sim.pause("keep")
    inc = g.wait_incident("pause_too_long", 30)
    assert inc is not None, g.log_text()
    return inc


def test_a_valid_config_is_applied_and_the_open_incident_is_kept(guardian, paused_sim):
    inc = open_pause_incident(guardian, paused_sim)
    edit(guardian, lambda c: c["lifecycle"].update(max_pause=3.0, resume_grace=5.0))
    out = reload(guardian, 1)
    assert out["ok"] and "applied lifecycle" in out["message"], out
    assert guardian.proc is not None and guardian.proc.poll() is None
    assert [(i["id"], i["status"]) for i in guardian.incidents()] == [(inc["id"], "firing")]
    assert guardian.require_target()["phase"] == "paused"


def test_an_invalid_config_is_refused_with_its_key_path_and_the_old_one_kept(guardian, paused_sim):
    inc = open_pause_incident(guardian, paused_sim)
    edit(guardian, lambda c: c["lifecycle"].update(max_pause=-1, max_pasue=5))
    out = reload(guardian, 1)
    assert not out["ok"], out
    assert "lifecycle.max_pause" in out["message"] and "lifecycle.max_pasue: unknown key" in out["message"]
    assert "config reload refused" in guardian.log_text()
    assert guardian.proc is not None and guardian.proc.poll() is None
    assert [(i["id"], i["status"]) for i in guardian.incidents()] == [(inc["id"], "firing")]
    sock = str(guardian.state_dir / "guardian.sock")  # the CLI still answers with the socket named
    cli = [sys.executable, "-m", "vllm_guardian.cli.main", "status", "--json", "-c", str(guardian.config_path)]
    res = subprocess.run([*cli, "--socket", sock], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and json.loads(res.stdout)["config"]["last_reload"]["ok"] is False, res.stderr


def test_added_and_removed_targets_are_picked_up_and_a_removed_ones_incidents_resolve(guardian, paused_sim, tmp_path):
    inc = open_pause_incident(guardian, paused_sim)
    with SimServer(startup_delay=0.5) as other:
        other.wait_ready(60)
        edit(guardian, lambda c: c.update(targets=[{"name": "other", "match": {"port": other.port}}]))
        out = reload(guardian, 1)
        assert out["ok"] and "targets added other" in out["message"] and "targets removed sim" in out["message"]
        assert guardian.wait_ready(30, name="other"), guardian.log_text()
        assert guardian.target("sim") is None
        resolved = poll(
            lambda: [i for i in guardian.incidents() if i["id"] == inc["id"] and i["status"] == "resolved"], 10
        )
        assert resolved, guardian.incidents()
