"""The procfs readings as status rows: the command line redacted, the busiest thread rounded, and
every reading absent (never 0) before the first."""

from __future__ import annotations

from vllm_guardian.model import ProcessInfo, ProcKey, Role
from vllm_guardian.state.readings import ProcessState, ThreadState
from vllm_guardian.probes.procfs_status import HottestThread, ProcessStatus, process_section

ENGINE = ProcessInfo(ProcKey(110, 1020), 100, Role.ENGINE_CORE, ("vllm", "serve", "m", "--api-key", "sk-secret"))


def test_a_read_process_shows_its_busiest_thread_and_never_its_api_key():
    hot = ThreadState(111, "VLLM::EngineCor", "R", 0.98765, 0.04, 25.06, 0.99, "running", None)
    cold = ThreadState(112, "ZMQbg", "S", 0.01, 3.0, 0.0, 0.01, "blocked", None)
    row = process_section(ENGINE, ProcessState(ENGINE.key, "R", 0.991234, 2_000_000, 9, (cold, hot)))
    assert "sk-secret" not in row.cmdline
    assert (row.state, row.cpu_ratio, row.rss_bytes, row.threads) == ("R", 0.991, 2_000_000, 9)
    assert row.hottest_thread == HottestThread(111, "VLLM::EngineCor", 0.988, 0.0, 25.1, 0.99, "running", None)


def test_a_process_not_read_yet_has_every_reading_absent():
    assert process_section(ENGINE, None) == ProcessStatus(
        110, 1020, "engine_core", process_section(ENGINE, None).cmdline, None, None, None, None, None
    )
