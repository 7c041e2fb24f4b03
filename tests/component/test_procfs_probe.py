"""The procfs probe on a fake /proc tree: rates from two readings, two stages, identities."""

from __future__ import annotations

import pytest

from vllm_guardian.config.schema import ProcfsProbeConfig
from vllm_guardian.model import ProcessInfo, Role, Target
from vllm_guardian.probes.procfs import ProcfsReader
from vllm_guardian.series import metrics as m
from vllm_guardian.testing.fake_proc import FakeProcTree

API, ENGINE = 100, 110


@pytest.fixture
def tree(tmp_path):
    t = FakeProcTree(tmp_path / "proc")
    t.add_process(API, 1, ("python3", "-m", "vllm.entrypoints.openai.api_server"))
    t.add_process(ENGINE, API, ("VLLM::EngineCore",), threads=[(111, "ZMQbg/IO/0")])
    return t


def target(tree) -> Target:
    procs = (
        ProcessInfo(tree.procfs().identity(API), 1, Role.API_SERVER, ("x",)),
        ProcessInfo(tree.procfs().identity(ENGINE), API, Role.ENGINE_CORE, ("VLLM::EngineCore",)),
    )
    return Target("llm", procs[0].key, procs, 8000, "http://127.0.0.1:8000")


def samples(res, metric, subject=None):
    return {s.subject: s.value for s in res.samples if s.metric == metric and (subject is None or s.subject == subject)}


def test_the_first_reading_gives_no_rate_only_levels(tree):
    probe = ProcfsReader(tree.procfs(), ProcfsProbeConfig(), page_size=4096)
    res = probe.collect([target(tree)], set(), now=10.0)
    assert samples(res, m.PROC_CPU) == {}
    assert samples(res, m.PROC_RSS)["p100"] == 2500 * 4096


def test_cpu_ratio_is_ticks_over_wall_time_and_hot_processes_get_thread_reads(tree):
    probe = ProcfsReader(tree.procfs(), ProcfsProbeConfig(hot_cpu_ratio=0.5), page_size=4096)
    t = target(tree)
    probe.collect([t], set(), 10.0)
    tree.set_thread(ENGINE, ENGINE, utime=100, state="R", voluntary=5)
    res = probe.collect([t], set(), 11.0)
    assert samples(res, m.PROC_CPU) == {"p100": 0.0, "p110": 1.0}
    assert samples(res, m.THREAD_CPU) == {}  # stage two starts on the tick the process turns hot
    tree.set_thread(ENGINE, ENGINE, utime=200, voluntary=5, wait_ns=400_000_000)
    res = probe.collect([t], set(), 12.0)
    assert samples(res, m.THREAD_CPU) == {"p110/t110": 1.0, "p110/t111": 0.0}
    assert samples(res, m.THREAD_VOL_RATE)["p110/t110"] == 0.0
    assert samples(res, m.THREAD_RUNNING)["p110/t110"] == 1.0
    assert samples(res, m.THREAD_DEMAND)["p110/t110"] == pytest.approx(1.4)  # on CPU + runqueue wait
    assert "p100/t100" not in samples(res, m.THREAD_CPU)  # a cold process: no per-thread reads


def test_a_suspected_target_gets_thread_reads_and_wchan_even_when_cold(tree):
    probe = ProcfsReader(tree.procfs(), ProcfsProbeConfig(), page_size=4096)
    t = target(tree)
    probe.collect([t], {"llm"}, 10.0)
    res = probe.collect([t], {"llm"}, 11.0)
    engine = res.processes[t.processes[1].key]
    assert {th.tid for th in engine.threads} == {110, 111}
    assert engine.threads[0].wchan == "futex_do_wait" and engine.threads[0].syscall == "202"


@pytest.mark.parametrize("how", ["remove", "zombie", "reuse"])
def test_a_vanished_zombie_or_reused_pid_is_reported_gone(tree, how):
    probe = ProcfsReader(tree.procfs(), ProcfsProbeConfig(), page_size=4096)
    t = target(tree)
    if how == "remove":
        tree.remove(ENGINE)
    elif how == "zombie":
        tree.zombie(ENGINE)
    else:
        tree.remove(ENGINE)
        tree.add_process(ENGINE, 1, ("sleep", "100"), starttime=999_999)  # the pid now names a stranger
    res = probe.collect([t], set(), 10.0)
    assert res.gone == {t.processes[1].key}


def test_an_unreadable_syscall_file_is_reported_and_the_rest_still_read(tree):
    tree.deny(f"{ENGINE}/task/{ENGINE}/syscall")
    probe = ProcfsReader(tree.procfs(), ProcfsProbeConfig(), page_size=4096)
    t = target(tree)
    probe.collect([t], {"llm"}, 10.0)
    res = probe.collect([t], {"llm"}, 11.0)
    assert any("CAP_SYS_PTRACE" in d for d in res.denied)
    assert "p110/t110" in samples(res, m.THREAD_CPU) and "p110/t110" not in samples(res, m.THREAD_RUNNING)


def test_a_cool_thread_of_a_hot_process_costs_one_schedstat_read_and_gives_its_cpu_only(tree):
    opened: list[str] = []

    def opener(path: str) -> bytes:
        opened.append(path.rsplit("/proc/", 1)[-1])
        return tree.opener(path)

    probe = ProcfsReader(tree.procfs(opener=opener), ProcfsProbeConfig(hot_cpu_ratio=0.5), page_size=4096)
    t = target(tree)
    ticks = 0
    for now in (10.0, 11.0, 12.0):
        ticks += 100
        tree.set_thread(ENGINE, ENGINE, utime=ticks, state="R")
        opened.clear()
        res = probe.collect([t], set(), now)
    assert [p for p in opened if "/task/111/" in p] == ["110/task/111/schedstat"]
    assert samples(res, m.THREAD_CPU, "p110/t111") == {"p110/t111": 0.0}
    assert not any(s.subject == "p110/t111" and s.metric != m.THREAD_CPU for s in res.samples)
    assert samples(res, m.THREAD_RUNNING) == {"p110/t110": 1.0}  # the hot thread: every file, every tick
    # it heats up: read in full at once, its first full reading gives no rates (no average over the gap)
    tree.set_thread(ENGINE, 111, utime=100, state="R", voluntary=7)
    res = probe.collect([t], set(), 13.0)
    assert "p110/t111" in samples(res, m.THREAD_RUNNING) and "p110/t111" not in samples(res, m.THREAD_VOL_RATE)
    tree.set_thread(ENGINE, 111, utime=200, state="R", voluntary=7)
    res = probe.collect([t], set(), 14.0)
    assert samples(res, m.THREAD_VOL_RATE, "p110/t111") == {"p110/t111": 0.0}
    assert samples(res, m.THREAD_CPU, "p110/t111") == {"p110/t111": 1.0}


def test_a_process_whose_main_thread_wants_a_core_gets_thread_reads_though_starved_of_cpu(tree):
    """A spinner on a saturated node gets a sliver of a core (cool as a process), and waits on the
    runqueue for the rest: its schedstat says it wants a whole core."""
    probe = ProcfsReader(tree.procfs(), ProcfsProbeConfig(hot_cpu_ratio=0.5), page_size=4096)
    t = target(tree)
    probe.collect([t], set(), 10.0)
    tree.set_thread(ENGINE, ENGINE, utime=20, state="R", wait_ns=800_000_000)  # 20 % on a CPU, 80 % waiting
    res = probe.collect([t], set(), 11.0)
    assert samples(res, m.PROC_CPU)["p110"] == pytest.approx(0.2)  # cool as a process
    assert res.processes[t.processes[1].key].threads  # but it wants a core: its threads are read


def test_a_process_that_only_sips_cpu_is_not_followed(tree):
    probe = ProcfsReader(tree.procfs(), ProcfsProbeConfig(hot_cpu_ratio=0.5), page_size=4096)
    t = target(tree)
    probe.collect([t], set(), 10.0)
    tree.set_thread(ENGINE, ENGINE, utime=20, wait_ns=50_000_000)  # 20 % on a CPU, 5 % waiting
    res = probe.collect([t], set(), 11.0)
    assert not res.processes[t.processes[1].key].threads


def _heat(tree, pid, now_ticks):
    tree.set_thread(pid, pid, utime=now_ticks, state="R", syscr=now_ticks * 3)


def test_a_hot_api_server_thread_has_its_syscall_count_read_and_a_hot_engine_thread_does_not(tree):
    probe = ProcfsReader(tree.procfs(), ProcfsProbeConfig(hot_cpu_ratio=0.5), page_size=4096)
    t = target(tree)
    res = None
    for n, now in enumerate((10.0, 11.0, 12.0), start=1):
        _heat(tree, API, 100 * n)
        _heat(tree, ENGINE, 100 * n)
        res = probe.collect([t], set(), now)
    assert res is not None
    assert samples(res, m.THREAD_SYSCALLS) == {"p100/t100": 900.0}  # syscr + syscw of the API server's hot thread


def test_an_unreadable_io_file_leaves_the_syscall_count_absent_and_is_reported(tree):
    tree.deny(f"{API}/task/{API}/io")
    probe = ProcfsReader(tree.procfs(), ProcfsProbeConfig(hot_cpu_ratio=0.5), page_size=4096)
    t = target(tree)
    res = None
    for n, now in enumerate((10.0, 11.0, 12.0), start=1):
        _heat(tree, API, 100 * n)
        res = probe.collect([t], set(), now)
    assert res is not None
    assert samples(res, m.THREAD_SYSCALLS) == {} and "p100/t100" in samples(res, m.THREAD_CPU)
    assert any("task io" in d for d in res.denied)


def test_a_cool_api_server_thread_has_no_io_read(tree):
    opened: list[str] = []

    def opener(path: str) -> bytes:
        opened.append(path.rsplit("/proc/", 1)[-1])
        return tree.opener(path)

    probe = ProcfsReader(tree.procfs(opener=opener), ProcfsProbeConfig(hot_cpu_ratio=0.5), page_size=4096)
    t = target(tree)
    for now in (10.0, 11.0, 12.0):
        probe.collect([t], {"llm"}, now)  # suspected: every thread read in full, none of them hot
    assert not [p for p in opened if p.endswith("/io")]


def test_an_api_server_main_threads_time_on_a_cpu_is_sampled_every_tick_and_an_engines_is_not(tree):
    probe = ProcfsReader(tree.procfs(), ProcfsProbeConfig(), page_size=4096)
    t = target(tree)
    first = samples(probe.collect([t], set(), 10.0), m.PROC_MAIN_RUN_S)
    tree.set_thread(API, API, utime=3)  # 3 ticks more on a CPU: 30 ms
    second = samples(probe.collect([t], set(), 11.0), m.PROC_MAIN_RUN_S)
    assert set(first) == set(second) == {"p100"}  # cold, not followed: read anyway
    assert second["p100"] - first["p100"] == pytest.approx(0.03)
