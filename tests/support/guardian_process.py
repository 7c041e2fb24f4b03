"""Run the real ``guardian run`` against a real (simulated) vLLM server, and watch what it says.

Real parts only: a real kernel, real child processes, real /proc, real HTTP.
Observation is through the guardian's own outputs: the incident files under its
state dir and ``guardian status --json`` over its control socket. The live and chaos tiers
share it, with the helpers around it: a command-mode restart target, faults tripped on the
simulated server, and the sweep of every simulated server left on a port.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

from vllm_guardian.incidents import IncidentStore, incident_to_dict
from vllm_guardian.sim.control import SimServer
from tests.support.wait import poll

SIM = "vllm_guardian.sim.vllm.api_server"


class GuardianProcess:
    def __init__(self, tmp: Path, port: int, name: str = "sim", extra: dict | None = None) -> None:
        self.state_dir = tmp / "state"
        self.config_path = tmp / "guardian.yaml"
        self.log_path = tmp / "guardian.log"
        cfg = {
            "node": "live-test",
            "state_dir": str(self.state_dir),
            "autodiscover": False,  # only our server: other tests may run servers too
            "targets": [{"name": name, "match": {"port": port}}],
            "api": {"http": None},
        }
        for key, value in (extra or {}).items():
            cfg[key] = value
        self.config_path.write_text(yaml.safe_dump(cfg))
        self.proc: subprocess.Popen | None = None

    def start(self, *args: str, journal: bool = False, wrapper: list[str] | None = None) -> GuardianProcess:
        """``guardian run -c <config> *args``; ``journal``: its stderr is announced as journald's
        stream (``JOURNAL_STREAM`` = the log file's device:inode), as systemd does; ``wrapper``: an
        argv the command runs under (a sandbox: tests/support/unit_sandbox.py)."""
        with open(self.log_path, "wb") as log:  # the child keeps its own descriptor
            env = dict(os.environ)
            env.pop("JOURNAL_STREAM", None)
            if journal:
                st = os.fstat(log.fileno())
                env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
            self.proc = subprocess.Popen(
                [*(wrapper or ()), sys.executable, "-m", "vllm_guardian.cli.main", "run", "-c", str(self.config_path)]
                + list(args),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        return self

    def stop(self) -> int | None:
        return stop_session(self.proc, grace=10)

    def incidents(self) -> list[dict]:
        return [incident_to_dict(i) for i in IncidentStore(self.state_dir).list()]

    def wait_incident(self, kind: str, timeout: float) -> dict | None:
        return poll(lambda: next((i for i in self.incidents() if i["kind"] == kind), None), timeout)

    def status(self) -> dict | None:
        out = subprocess.run(
            [sys.executable, "-m", "vllm_guardian.cli.main", "status", "--json", "-c", str(self.config_path)],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return json.loads(out.stdout) if out.returncode == 0 else None

    def target(self, name: str = "sim") -> dict | None:
        st = self.status()
        if not st:
            return None
        return next((t for t in st["targets"] if t["name"] == name), None)

    def require_target(self, name: str = "sim") -> dict:
        """The target's entry in `guardian status --json`; the test fails when it is not listed."""
        t = self.target(name)
        assert t is not None, f"{name} is not in the status\n{self.log_text()}"
        return t

    def wait_ready(self, timeout: float, name: str = "sim") -> dict | None:
        return poll(lambda: (t := self.target(name)) and t["ready"] and t, timeout, every=0.5)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def stop_session(proc: subprocess.Popen | None, grace: float) -> int | None:
    """SIGTERM a child started in its own session, SIGKILL its session after ``grace`` seconds;
    its exit status (None: never started)."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    return proc.returncode


def sweep(port: int) -> None:
    """Kill every simulated server on ``port`` (and its session: engine, worker) left running."""
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if SIM in cmd and str(port) in cmd:
            try:
                os.killpg(os.getsid(p.pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def sims_on(port: int) -> list[int]:
    """Pids of API servers of the simulated vLLM serving ``port`` (one = no double start)."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = p.info["cmdline"] or []
        if SIM in cmd and str(port) in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
            out.append(p.info["pid"])
    return out


def command_restart(port: int, tmp_path, **restart) -> dict:
    """The target ``sim`` on ``port``, restarted by the guardian itself (``restart.mode: command``)."""
    argv = [sys.executable, "-m", SIM, "--port", str(port), "--startup-delay", "1"]
    return {
        "name": "sim",
        "match": {"port": port},
        "restart": {
            "mode": "command",
            "command": argv,
            "stop_timeout": 5,
            "ready_timeout": 60,
            "log_file": str(tmp_path / "restarted.log"),
            **restart,
        },
        "drain": {"timeout": 5},
    }


def config(port: int, tmp_path, *, command=None, stop_timeout=5, ready_timeout=60, policy=None, http_port=None) -> dict:
    """The ``extra`` config of a guardian restarting ``sim`` on ``port`` by command (drain 10 s)."""
    argv = command or [sys.executable, "-m", SIM, "--port", str(port), "--startup-delay", "1"]
    extra: dict[str, Any] = {
        "targets": [
            {
                "name": "sim",
                "match": {"port": port},
                "restart": {
                    "mode": "command",
                    "command": argv,
                    "stop_timeout": stop_timeout,
                    "ready_timeout": ready_timeout,
                    "log_file": str(tmp_path / "restarted.log"),
                },
                "drain": {"timeout": 10},
            }
        ]
    }
    if policy:
        extra["policy"] = policy
    if http_port:
        extra["api"] = {"http": f"127.0.0.1:{http_port}"}
    return extra


def fire(sim: SimServer, fault: str) -> float:
    """Switch the fault on and send the request that trips it; returns the onset wall time."""
    sim.set_fault(fault)
    onset = time.time()
    _in_background(lambda: sim.complete("trip the fault", max_tokens=4, timeout=60))
    return onset


def trip(port: int, fault: str) -> None:
    """``fire`` on whichever server holds ``port`` now (a client only: nothing is started)."""
    sim = SimServer(port=port)
    sim.set_fault(fault)
    _in_background(lambda: sim.complete("x", max_tokens=4, timeout=60))


def _in_background(request) -> None:
    def quiet():
        try:
            request()
        except Exception:  # noqa: BLE001 - a hung or dead engine fails the request, which is the point
            pass

    threading.Thread(target=quiet, daemon=True).start()
