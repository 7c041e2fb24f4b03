"""A real ``guardian run`` beside a real simulated vLLM, for the chaos scenarios."""

from __future__ import annotations

import os
import signal
import sys

import psutil

from vllm_guardian.sim.control import SimServer, free_port
from guardian_harness import GuardianProcess, poll

SIM = "vllm_guardian.sim.vllm.api_server"


def sweep(port: int) -> None:
    """Kill every simulated server on ``port`` (and its session) left running."""
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


__all__ = ["GuardianProcess", "SimServer", "command_restart", "free_port", "poll", "sims_on", "sweep"]
