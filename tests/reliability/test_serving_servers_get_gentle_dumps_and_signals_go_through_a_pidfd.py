"""Fault 20: a leak or a failing probe leaves the server serving, so its stacks are read with
``py-spy dump --nonblocking`` only (a blocking dump pauses every thread); and a signal goes to
the snapshotted process through a pidfd, so a pid reused between the identity check and the
kill is never signalled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import replace

import pytest

from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.process_control import OsProcessControl
from vllm_guardian.model import Kind, ProcKey

from tests.support.evidence_world import World as EvidenceWorld  # the component tier's evidence world


@pytest.mark.parametrize(
    "kind", [Kind.HOST_MEMORY_LEAK, Kind.ACCEL_MEMORY_LEAK, Kind.KV_CACHE_LEAK, Kind.PROBE_FAILURE]
)
def test_a_leak_or_a_blind_probe_never_pauses_the_server_for_a_dump(tmp_path, kind):
    w = EvidenceWorld(tmp_path)
    w.incident = replace(w.incident, kind=kind)
    w.capture()
    dumps = [a for a in w.runner.argvs() if a[1] == "dump"]
    assert dumps and all("--nonblocking" in a for a in dumps)


def test_a_busy_loop_still_gets_one_blocking_dump(tmp_path):
    w = EvidenceWorld(tmp_path)
    w.capture()
    dumps = [a for a in w.runner.argvs() if a[1] == "dump"]
    assert dumps and not any("--nonblocking" in a for a in dumps)


class PidReusedAfterFirstCheck(ProcFS):
    """/proc whose second read of the process's stat shows another start time: the pid was
    reused after the first identity check."""

    def __init__(self, pid: int):
        super().__init__("/proc")
        self.pid, self.reads = pid, 0

    def stat(self, pid):
        st = super().stat(pid)
        if pid == self.pid:
            self.reads += 1
            if self.reads >= 2:
                return replace(st, starttime=st.starttime + 12345)
        return st


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="pidfd needs Linux 5.3 and Python 3.9")
def test_a_pid_reused_between_the_check_and_the_kill_is_never_signalled():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        procfs = PidReusedAfterFirstCheck(child.pid)
        key = ProcKey(child.pid, ProcFS("/proc").stat(child.pid).starttime)
        assert OsProcessControl(procfs).signal(key, signal.SIGTERM) is False
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()
