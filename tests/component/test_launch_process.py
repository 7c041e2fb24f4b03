"""A real launch (``OsProcessControl.start_spec``): the child sees only the spec's environment,
writes to the log file, and runs as the spec's user and groups."""

from __future__ import annotations

import os
import time

import pytest

from vllm_guardian.host.launch import build_launch_spec
from vllm_guardian.config.loader import parse_config
from vllm_guardian.host.process_control import OsProcessControl
from vllm_guardian.host.procfs import ProcFS


def restart(tmp_path, argv, **kw):
    cfg = parse_config(
        {
            "targets": [
                {
                    "name": "t",
                    "match": {"port": 8000},
                    "restart": {"mode": "command", "command": argv, "log_file": str(tmp_path / "server.log"), **kw},
                }
            ]
        }
    )
    return cfg.targets[0].restart


def run(spec, tmp_path) -> str:
    pid = OsProcessControl(ProcFS()).start_spec(spec)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            break
        if done:
            break
        time.sleep(0.02)
    return (tmp_path / "server.log").read_text()


def test_the_child_sees_only_the_configured_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("REDIS_PASSWORD", "guardian-secret")
    spec = build_launch_spec(restart(tmp_path, ["/usr/bin/env"], env={"VLLM_LOGGING_LEVEL": "INFO"}))
    lines = set(run(spec, tmp_path).splitlines())
    assert lines == {
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG=C.UTF-8",
        "HOME=/",
        "VLLM_LOGGING_LEVEL=INFO",
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root (CAP_SETUID/CAP_SETGID)")
def test_the_child_runs_as_the_configured_user_and_group(tmp_path):
    spec = build_launch_spec(restart(tmp_path, ["/usr/bin/id"], user="nobody", group="nogroup"))
    out = run(spec, tmp_path)
    assert out.startswith("uid=65534(nobody) gid=65534(nogroup)"), out
