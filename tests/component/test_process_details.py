"""psutil's per-process details, on the real /proc: this test process itself."""

import os

from vllm_guardian.host.process_details import PsutilDetails
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.model import ProcKey


def me() -> ProcKey:
    return ProcKey(os.getpid(), ProcFS("/proc").stat(os.getpid()).starttime)


def test_the_memory_breakdown_and_counters_of_a_live_process():
    d = PsutilDetails().read([me()])[str(os.getpid())]
    assert d["memory"]["uss"] > 0 and d["memory"]["pss"] > 0 and d["fds"] > 0 and d["threads"] >= 1


def test_a_reused_pid_is_reported_not_read():
    key = me()
    d = PsutilDetails().read([ProcKey(key.pid, key.starttime + 100)])[str(key.pid)]
    assert d == {"error": "pid reused by another process"}


def test_an_exited_process_is_reported():
    assert PsutilDetails().read([ProcKey(2**22 + 7, 1)]) == {str(2**22 + 7): {"error": "exited"}}
