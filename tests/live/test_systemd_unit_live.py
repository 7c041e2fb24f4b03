"""Live: match.systemd_unit against a real transient unit (``systemd-run``), where systemd is PID 1.

The simulated vLLM server runs as ``guardian-live-<n>.service``; discovery with the real
``systemctl`` and the real /sys/fs/cgroup must find its API server. Skipped, with the reason,
where systemd does not run as PID 1 (containers, CI runners without systemd).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.discovery.scan import discover, is_api_server
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.runner import SubprocessRunner
from vllm_guardian.discovery.platform_match import PlatformMatcher
from vllm_guardian.sim.control import API_SERVER_MODULE, free_port

pytestmark = pytest.mark.live


def _pid1() -> str:
    try:
        with open("/proc/1/comm") as fh:
            return fh.read().strip()
    except OSError as e:
        return f"unreadable ({e.strerror})"


PID1 = _pid1()


@pytest.mark.skipif(
    PID1 != "systemd", reason=f"systemd is not PID 1 here (PID 1 is {PID1!r}): no transient unit can be started"
)
def test_a_transient_unit_is_matched_by_its_cgroup():
    unit = f"guardian-live-{os.getpid()}.service"
    port = free_port()
    subprocess.run(
        [
            "systemd-run",
            "--unit",
            unit,
            "--collect",
            f"--setenv=PYTHONPATH={os.getcwd()}",
            sys.executable,
            "-m",
            API_SERVER_MODULE,
            "--port",
            str(port),
            "--startup-delay",
            "0.5",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    try:
        cfg = parse_config({"autodiscover": False, "targets": [{"name": "u", "match": {"systemd_unit": unit}}]})
        procfs = ProcFS()
        platform = PlatformMatcher(procfs, runner=SubprocessRunner(), is_api_server=is_api_server)
        deadline = time.monotonic() + 30
        while True:
            res = discover(procfs, cfg, platform=platform)
            if res.targets or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert res.targets, res.unmatched
        main_pid = int(
            subprocess.run(
                ["systemctl", "show", "-p", "MainPID", "--value", unit], capture_output=True, text=True, check=True
            ).stdout
        )
        (t,) = res.targets
        assert t.key.pid == main_pid and t.api_url == f"http://127.0.0.1:{port}"
    finally:
        subprocess.run(["systemctl", "stop", unit], capture_output=True, timeout=30)
