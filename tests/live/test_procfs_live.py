"""ProcFS and discovery against the real kernel and real child processes.

Claims checked: a spinning thread's utime rises while
the main thread's /proc/PID/status counters stay flat; the spinner's syscall
reads ``running``; a thread blocked on a Lock sits in futex with a wchan; a
real ``python -m …api_server`` child with a ``VLLM::EngineCore`` grandchild is
autodiscovered with the right roles.
"""

from __future__ import annotations

import os
import platform
import selectors
import signal
import subprocess
import sys
import textwrap
import time


import psutil
import pytest

from vllm_guardian.config.schema import Config
from vllm_guardian.discovery.scan import discover
from vllm_guardian.errors import TargetGone
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.model import Role
from tests.support.wait import wait_for

pytestmark = pytest.mark.live

FUTEX_NR = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}

SPINNER = textwrap.dedent(
    """
    import threading
    def spin():
        while True:
            pass
    t = threading.Thread(target=spin, name="spinner", daemon=True)
    t.start()
    print(t.native_id, flush=True)
    threading.Event().wait()
    """
)

BLOCKED = textwrap.dedent(
    """
    import threading
    lock = threading.Lock()
    lock.acquire()
    print(threading.get_native_id(), flush=True)
    lock.acquire()
    """
)

FAKE_API_SERVER = textwrap.dedent(
    """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import setproctitle, time; setproctitle.setproctitle('VLLM::EngineCore'); time.sleep(600)"])
    time.sleep(600)
    """
)


def read_line(proc: subprocess.Popen, deadline_s: float = 20.0) -> str:
    assert proc.stdout is not None, "the child needs stdout=PIPE"
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout=deadline_s):
            pytest.fail(f"child {proc.pid} printed nothing within {deadline_s}s")
        return proc.stdout.readline().strip()
    finally:
        sel.close()


@pytest.fixture
def spawn():
    """Start children in their own session; every one is killed (with its group) at teardown."""
    children: list[subprocess.Popen] = []

    def start(argv: list[str], **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True, **kwargs)
        children.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in children:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
            if proc.stdout:
                proc.stdout.close()


@pytest.fixture
def procfs():
    return ProcFS()


def test_pids_include_this_process_with_a_stable_identity(procfs):
    me = os.getpid()
    assert me in procfs.pids()
    assert procfs.identity(me) == procfs.identity(me)
    assert procfs.stat(me).ppid == os.getppid()
    assert list(procfs.cmdline(me)) == psutil.Process(me).cmdline()


def test_spinning_thread_rises_while_the_main_threads_status_stays_flat(spawn, procfs):
    child = spawn([sys.executable, "-c", SPINNER])
    tid = int(read_line(child))
    pid = child.pid
    t0 = procfs.thread_stat(pid, tid).utime
    # settle: by the time the spinner burnt 10 ticks, the main thread is parked in Event.wait
    wait_for(lambda: procfs.thread_stat(pid, tid).utime >= t0 + 10, 20, "the spinner to start burning CPU", every=0.05)
    main0 = procfs.status(pid)
    spin0 = procfs.thread_stat(pid, tid).utime
    need = max(30, procfs.clk_tck // 3)
    wait_for(
        lambda: procfs.thread_stat(pid, tid).utime >= spin0 + need, 30, f"{need} more ticks of spinner CPU", every=0.05
    )
    main1 = procfs.status(pid)
    assert main1.voluntary_ctxt_switches - main0.voluntary_ctxt_switches <= 2
    assert main1.nonvoluntary_ctxt_switches - main0.nonvoluntary_ctxt_switches <= 2
    # the process stat sums the threads: it saw at least the spinner's CPU
    assert procfs.stat(pid).utime + procfs.stat(pid).stime >= procfs.thread_stat(pid, tid).utime
    assert procfs.thread_stat(pid, pid).utime < procfs.thread_stat(pid, tid).utime


def test_spinning_thread_syscall_reads_running(spawn, procfs):
    child = spawn([sys.executable, "-c", SPINNER])
    tid = int(read_line(child))
    samples = []
    for _ in range(20):
        samples.append(procfs.thread_syscall(child.pid, tid).running)
        time.sleep(0.01)
    assert sum(samples) >= 16, samples  # runnable-but-preempted also reads "running"


def test_thread_blocked_on_a_lock_sits_in_futex_with_a_wchan(spawn, procfs):
    child = spawn([sys.executable, "-c", BLOCKED])
    tid = int(read_line(child))
    expected = FUTEX_NR.get(platform.machine())

    def in_futex():
        sc = procfs.thread_syscall(child.pid, tid)
        if sc.running or sc.nr is None:
            return None
        return sc if expected is None or sc.nr == expected else None

    sc = wait_for(in_futex, 20, f"thread {tid} to block in futex ({expected})", every=0.05)
    assert not sc.blocked_outside_syscall
    wchan = wait_for(lambda: procfs.thread_wchan(child.pid, tid), 5, "a wchan symbol", every=0.05)
    assert "futex" in wchan
    st = procfs.thread_stat(child.pid, tid)
    assert st.state == "S"


def test_a_vanished_child_is_target_gone(spawn, procfs):
    child = spawn([sys.executable, "-c", "print(1, flush=True)"])
    read_line(child)
    child.wait(timeout=20)  # reaped: the pid directory is gone
    with pytest.raises(TargetGone):
        procfs.stat(child.pid)


def test_discovery_finds_a_real_api_server_and_its_engine_core(spawn, procfs, tmp_path):
    (tmp_path / "x_api_server.py").write_text(FAKE_API_SERVER)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    server = spawn([sys.executable, "-m", "x_api_server", "--port", "18123"], env=env)

    def found():
        for target in discover(procfs, Config()).targets:
            if target.key.pid == server.pid and target.by_role(Role.ENGINE_CORE):
                return target
        return None

    target = wait_for(found, 30, "the server and its VLLM::EngineCore child", every=0.2)
    assert (target.name, target.port, target.api_url) == ("vllm-18123", 18123, "http://127.0.0.1:18123")
    assert target.api_server is not None and target.api_server.role is Role.API_SERVER
    (core,) = target.by_role(Role.ENGINE_CORE)
    assert core.ppid == server.pid
    assert core.cmdline == ("VLLM::EngineCore",)
