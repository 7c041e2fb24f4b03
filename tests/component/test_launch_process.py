"""A real launch (``OsProcessControl.start_spec``): the child sees only the spec's environment,
writes to the log file, and runs as the spec's user and groups; a log path the server's user
pointed at a root-only file (a real ``ln -s`` run as nobody) is refused, by the command method's
check before anything is stopped and by the start itself, and the file is left as it was."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from vllm_guardian.host.launch import build_launch_spec
from vllm_guardian.config.loader import parse_config
from vllm_guardian.host.process_control import OsProcessControl
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.server_files import UnsafePath
from vllm_guardian.remediation.methods.command import CommandMethod
from tests.support.other_user import NOBODY, as_nobody, needs_root, root_only, snapshot, users_dir, world_dir


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


# ---------------------------------------------------------------- a log file its user swapped
def swapped_log(world: Path, secret_dir: Path, swap: str) -> tuple[str, Path]:
    """The server's user (nobody) points its log path at a root-only file: the file itself replaced
    by a symbolic link, or a directory on the way. Returns the configured log_file and that file."""
    logs = users_dir(world)
    if swap == "file":
        secret = root_only(secret_dir)
        as_nobody("ln", "-sfn", str(secret), str(logs / "server.log"))
        return str(logs / "server.log"), secret
    secret = root_only(secret_dir, "server.log")  # a root-only file of the log's own name elsewhere
    as_nobody("ln", "-sfn", str(secret_dir), str(logs / "current"))
    return str(logs / "current" / "server.log"), secret


def command_restart(log_file: str, argv=("/bin/echo", "text the server's user chose")):
    cfg = parse_config(
        {
            "targets": [
                {
                    "name": "t",
                    "match": {"port": 8000},
                    "restart": {"mode": "command", "command": list(argv), "user": "nobody", "log_file": log_file},
                }
            ]
        }
    )
    return cfg.targets[0].restart


def wait_exit(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                return
        except ChildProcessError:  # reaped already (by the control's own bookkeeping)
            return
        time.sleep(0.02)


@needs_root
@pytest.mark.parametrize("swap", ["file", "directory"])
def test_a_launch_through_a_log_path_its_user_swapped_writes_nothing_to_the_linked_file(tmp_path, swap):
    with world_dir() as world:
        log_file, secret = swapped_log(world, tmp_path, swap)
        before = snapshot(secret)
        control = OsProcessControl(ProcFS())
        refused = ""
        try:
            wait_exit(control.start_spec(build_launch_spec(command_restart(log_file))))
        except UnsafePath as e:
            refused = str(e)
        assert snapshot(secret) == before
        assert "symbolic link" in refused
        assert control.files.status_section().refused == {"restart.log_file": 1}


@needs_root
@pytest.mark.parametrize("swap", ["file", "directory"])
def test_the_command_method_refuses_the_restart_before_stopping_anything(tmp_path, swap):
    with world_dir() as world:
        log_file, secret = swapped_log(world, tmp_path, swap)
        before = snapshot(secret)
        ctx = SimpleNamespace(control=OsProcessControl(ProcFS()))
        problem = CommandMethod().start_problem(command_restart(log_file), ctx) or ""
        assert snapshot(secret) == before
        assert "restart.log_file" in problem and "symbolic link" in problem
        assert problem.endswith("not stopping a server that could not be started again")


@needs_root
def test_a_log_file_the_guardian_creates_belongs_to_the_servers_user(tmp_path):
    with world_dir() as world:
        log = users_dir(world) / "server.log"
        pid = OsProcessControl(ProcFS()).start_spec(build_launch_spec(command_restart(str(log), ["/usr/bin/id", "-u"])))
        wait_exit(pid)
        st = log.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, 0o640)
        assert log.read_text() == f"{NOBODY}\n"
