"""Live remediation (``restart.mode: command``) against the simulated vLLM server.

The guardian itself launches the replacement server (it then owns it), so
cleanup sweeps every session whose leader serves our port.
"""

from __future__ import annotations

import sys
import time

import psutil
import pytest

from vllm_guardian.netaddr import free_port
from vllm_guardian.sim.control import SimServer
from tests.support.guardian_process import SIM, GuardianProcess, config, sweep, trip
from tests.support.wait import poll

pytestmark = pytest.mark.live


def ready_code(http_port: int, name: str = "sim") -> int | None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/targets/{name}/ready", timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def resolved(g: GuardianProcess, kind: str):
    return next((i for i in g.incidents() if i["kind"] == kind and i["status"] == "resolved"), None)


@pytest.fixture
def port():
    p = free_port("127.0.0.1")
    yield p
    sweep(p)


def test_busy_loop_is_restarted_with_a_new_identity_then_the_budget_stops_a_second_restart(tmp_path, port):
    first = SimServer(port=port, startup_delay=1.0).start()
    first.wait_ready(60)
    hp = free_port("127.0.0.1")
    g = GuardianProcess(
        tmp_path,
        port,
        extra=config(port, tmp_path, http_port=hp, policy={"budget": {"max_restarts": 1, "period": 3600}}),
    )
    g.start()
    try:
        assert g.wait_ready(30), g.log_text()
        assert poll(lambda: ready_code(hp) == 200, 10)
        old = (first.pid, g.require_target()["starttime"])
        trip(port, "busy_loop")
        assert g.wait_incident("busy_loop", 40), g.log_text()
        # the readiness endpoint an LB or readinessProbe polls turns 503 during the sequence
        assert poll(lambda: ready_code(hp) == 503, 20, every=0.1), g.log_text()
        inc = poll(lambda: resolved(g, "busy_loop"), 90)
        assert inc is not None, g.log_text()
        names = [a["name"] for a in inc["actions"]]
        assert {"draining", "stopping", "starting", "verifying"} <= set(names), names
        t = poll(lambda: (t := g.target()) and t["serving"] and t, 30)
        assert t and (t["pid"], t["starttime"]) != old
        assert ready_code(hp) == 200
        assert not psutil.pid_exists(first.pid) or psutil.Process(first.pid).status() == "zombie"
        # the second fault of the hour is not restarted: budget 1/hour
        trip(port, "busy_loop")
        assert g.wait_incident("restart_budget_exhausted", 40), g.log_text()
        time.sleep(3)
        t = g.require_target()
        assert t["pid"] not in (old[0],) and t["remediation"]["outcome"] == "done"
        assert g.require_target()["budget_left"] == 0
    finally:
        first.stop()
        assert g.stop() == 0


def test_a_server_ignoring_sigterm_is_killed_with_its_engine_after_stop_timeout(tmp_path, port):
    first = SimServer(port=port, startup_delay=1.0, extra_args=("--ignore-sigterm",)).start()
    first.wait_ready(60)
    engine = first.engine_pid()
    g = GuardianProcess(tmp_path, port, extra=config(port, tmp_path, stop_timeout=3)).start()
    try:
        assert g.wait_ready(30), g.log_text()
        trip(port, "stall")
        inc = poll(lambda: resolved(g, "engine_stall"), 120)
        assert inc is not None, g.log_text()
        kill = next(a for a in inc["actions"] if a["name"] == "kill")
        assert str(first.pid) in kill["detail"] and str(engine) in kill["detail"]

        def gone(pid):
            return not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"

        assert poll(lambda: gone(first.pid) and gone(engine), 10)
    finally:
        first.stop()
        assert g.stop() == 0


def test_a_replacement_that_never_becomes_ready_fails_verify_and_is_not_retried(tmp_path, port):
    first = SimServer(port=port, startup_delay=1.0).start()
    first.wait_ready(60)
    never = [sys.executable, "-m", SIM, "--port", str(port), "--startup-delay", "600"]
    g = GuardianProcess(tmp_path, port, extra=config(port, tmp_path, command=never, ready_timeout=8)).start()
    try:
        assert g.wait_ready(30), g.log_text()
        trip(port, "busy_loop")
        failed = poll(lambda: (t := g.target()) and (r := t.get("remediation")) and r["outcome"] == "failed" and r, 90)
        assert failed and "ready_timeout" in failed["detail"], g.log_text()
        inc = next(i for i in g.incidents() if i["kind"] == "busy_loop")
        assert inc["status"] == "firing"
        assert ("verifying", "failed") in [(a["name"], a["status"]) for a in inc["actions"]]
        assert g.require_target()["serving"] is False
    finally:
        first.stop()
        assert g.stop() == 0


def test_dry_run_signals_nothing_and_says_what_it_would_have_done(tmp_path, port):
    first = SimServer(port=port, startup_delay=1.0).start()
    first.wait_ready(60)
    g = GuardianProcess(tmp_path, port, extra=config(port, tmp_path, policy={"dry_run": True})).start()
    try:
        assert g.wait_ready(30), g.log_text()
        trip(port, "busy_loop")
        inc = g.wait_incident("busy_loop", 40)
        assert inc is not None
        acted = poll(
            lambda: next((a for i in g.incidents() for a in i["actions"] if a["status"] == "dry_run"), None), 10
        )
        assert acted and "would have" in acted["detail"]
        time.sleep(5)
        assert first.poll() is None and g.require_target()["pid"] == first.pid  # untouched
    finally:
        first.stop()
        assert g.stop() == 0


def test_drain_and_undrain_from_the_cli_flip_readiness_and_signal_nothing(tmp_path, port):
    import subprocess

    first = SimServer(port=port, startup_delay=1.0).start()
    first.wait_ready(60)
    hp = free_port("127.0.0.1")
    g = GuardianProcess(tmp_path, port, extra=config(port, tmp_path, http_port=hp)).start()
    cli = [sys.executable, "-m", "vllm_guardian.cli.main"]
    try:
        assert g.wait_ready(30), g.log_text()
        assert poll(lambda: ready_code(hp) == 200, 10)
        out = subprocess.run(cli + ["drain", "sim", "-c", str(g.config_path)], capture_output=True, text=True)
        assert out.returncode == 0 and "drain started" in out.stdout, out
        assert poll(lambda: ready_code(hp) == 503, 10)
        out = subprocess.run(cli + ["undrain", "sim", "-c", str(g.config_path)], capture_output=True, text=True)
        assert out.returncode == 0, out
        assert poll(lambda: ready_code(hp) == 200, 10)
        assert first.poll() is None and first.health() == 200  # nothing was signalled
        out = subprocess.run(cli + ["restart", "nope", "-c", str(g.config_path)], capture_output=True, text=True)
        assert out.returncode == 1 and "no target named 'nope'" in out.stderr
    finally:
        first.stop()
        assert g.stop() == 0
