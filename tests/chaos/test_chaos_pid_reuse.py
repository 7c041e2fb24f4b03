"""A pid reused by another process between the snapshot and the signal (or the pod lookup):
the kernel is made to hand the dead process's pid to a fresh one (``ns_last_pid``, root), and
the guardian's process control and pod lookup must leave the newcomer alone."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from vllm_guardian.errors import ProbeFailed
from vllm_guardian.host.kube import pod_uid_of
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.process_control import OsProcessControl
from vllm_guardian.model import ProcKey

from tests.chaos.chaos_util import needs_root

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def spawn_with_pid(pid: int) -> subprocess.Popen | None:
    """A new process that gets exactly ``pid`` (the kernel hands out ns_last_pid + 1)."""
    for _ in range(20):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        proc = subprocess.Popen(SLEEPER)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    return None


@pytest.fixture
def reused():
    """(the snapshot of a process that died, the stranger now holding its pid)."""
    procfs = ProcFS("/proc")
    victim = subprocess.Popen(SLEEPER)
    key = ProcKey(victim.pid, procfs.stat(victim.pid).starttime)
    victim.kill()
    victim.wait()
    time.sleep(0.02)  # start times are in clock ticks: the newcomer's differs
    stranger = spawn_with_pid(key.pid)
    if stranger is None:
        pytest.skip("the kernel did not hand the pid out again (a busy machine took it first)")
    yield key, stranger
    stranger.kill()
    stranger.wait()


@needs_root
def test_a_signal_to_a_snapshot_whose_pid_was_reused_is_never_sent(reused):
    key, stranger = reused
    control = OsProcessControl(ProcFS("/proc"))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        assert control.signal(key, sig) is False
    assert stranger.poll() is None


@needs_root
def test_no_pod_is_looked_up_for_a_snapshot_whose_pid_was_reused(reused):
    key, stranger = reused
    procfs = ProcFS("/proc")
    with pytest.raises(ProbeFailed, match="no longer the snapshotted process"):
        pod_uid_of(procfs, key, OsProcessControl(procfs).alive)
    assert stranger.poll() is None
