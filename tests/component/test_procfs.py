"""ProcFS against fake /proc trees written into a temp dir (FakeProcTree)."""

from __future__ import annotations

import pytest

from vllm_guardian.errors import AccessDenied, ProbeFailed, TargetGone
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.procfs_parse import Listener
from vllm_guardian.model import ProcKey
from vllm_guardian.testing.fake_proc import FakeProcTree


@pytest.fixture
def tree(tmp_path):
    return FakeProcTree(tmp_path / "proc")


@pytest.fixture
def procfs(tree):
    return tree.procfs()


SERVER = ("python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000")


# ---------------------------------------------------------------- happy path
def test_pids_lists_only_numeric_entries_sorted(tree, procfs):
    for pid in (300, 12, 4000):
        tree.add_process(pid)
    assert procfs.pids() == [12, 300, 4000]  # "net" is not a pid


def test_stat_status_cmdline_round_trip(tree, procfs):
    tree.add_process(100, ppid=1, cmdline=SERVER, starttime=5000, utime=40, stime=2, rss_pages=3000)
    st = procfs.stat(100)
    assert (st.pid, st.comm, st.ppid, st.utime, st.stime, st.starttime, st.rss_pages) == (
        100,
        "python3",
        1,
        40,
        2,
        5000,
        3000,
    )
    assert procfs.status(100).vm_rss_bytes == 3000 * 4096
    assert procfs.cmdline(100) == SERVER


def test_identity_is_pid_and_starttime(tree, procfs):
    tree.add_process(100, starttime=5000)
    assert procfs.identity(100) == ProcKey(100, 5000)


def test_pid_reuse_gives_a_different_identity(tree, procfs):
    tree.add_process(100, cmdline=SERVER, starttime=5000)
    before = procfs.identity(100)
    tree.remove(100)
    tree.add_process(100, cmdline=("bash",), starttime=9000)
    after = procfs.identity(100)
    assert before.pid == after.pid
    assert before != after


def test_process_stat_sums_threads_while_status_counters_are_the_leaders(tree, procfs):
    tree.add_process(100, cmdline=("VLLM::EngineCore",), threads=[(101, "input_thread")])
    tree.set_thread(100, 100, utime=5, voluntary=40, nonvoluntary=3)
    tree.set_thread(100, 101, utime=300, stime=4, voluntary=0, nonvoluntary=230, state="R")
    st = procfs.stat(100)
    assert (st.utime, st.stime, st.num_threads, st.state) == (305, 4, 2, "S")
    status = procfs.status(100)
    assert (status.voluntary_ctxt_switches, status.nonvoluntary_ctxt_switches) == (40, 3)
    worker = procfs.thread_status(100, 101)
    assert (worker.name, worker.tgid, worker.pid, worker.nonvoluntary_ctxt_switches) == ("input_thread", 100, 101, 230)


def test_threads_and_their_files(tree, procfs):
    tree.add_process(100, cmdline=("VLLM::EngineCore",), threads=[(101, "evil) R 1 2 (x")])
    tree.set_thread(100, 101, state="R", utime=151)
    assert procfs.tids(100) == [100, 101]
    st = procfs.thread_stat(100, 101)
    assert (st.pid, st.comm, st.utime) == (101, "evil) R 1 2 (x", 151)
    assert procfs.thread_syscall(100, 101).running
    assert procfs.thread_wchan(100, 101) is None
    assert procfs.thread_syscall(100, 100).nr == 202
    assert procfs.thread_wchan(100, 100) == "futex_do_wait"
    assert "futex" in procfs.thread_stack(100, 100)


def test_explicit_syscall_and_wchan(tree, procfs):
    tree.add_process(100)
    tree.set_thread(100, 100, syscall="-1 0x7ffdddaf5f20 0x7f57df2fcc77", wchan="do_signal_stop", state="T")
    sc = procfs.thread_syscall(100, 100)
    assert sc.blocked_outside_syscall and sc.nr is None and not sc.running
    assert procfs.thread_wchan(100, 100) == "do_signal_stop"


def test_socket_inodes_only_counts_socket_links(tree, procfs):
    tree.add_process(100, cmdline=SERVER)
    tree.listen(100, 8000, inode=9001)
    tree.connect(100, 8000, inode=9100)
    assert procfs.socket_inodes(100) == {9001, 9100}  # fd/0 -> /dev/null is not a socket


def test_listening_sockets_only_listen_sockets_from_tcp_and_tcp6_with_their_addresses(tree, procfs):
    tree.add_process(100, cmdline=SERVER)
    tree.listen(100, 8000, inode=9001)
    tree.listen(100, 8000, inode=9002, ip="::")
    tree.listen(100, 9464, inode=9003, ip="127.0.0.1")
    tree.connect(100, 5555, inode=9100)
    assert procfs.listening_sockets() == {
        8000: [Listener("0.0.0.0", 8000, 9001), Listener("::", 8000, 9002)],
        9464: [Listener("127.0.0.1", 9464, 9003)],
    }


def test_listening_sockets_without_tcp6(tree, procfs):
    tree.add_process(100, cmdline=SERVER)
    tree.listen(100, 8000, inode=9001)
    (tree.root / "net" / "tcp6").unlink()
    assert procfs.listening_sockets() == {8000: [Listener("0.0.0.0", 8000, 9001)]}


def test_read_text_reads_inside_the_root(tree, procfs):
    tree.add_process(100)
    assert procfs.read_text("100/task/100/wchan") == "futex_do_wait"


@pytest.mark.parametrize("relpath", ["/etc/passwd", "../outside", "100/../../outside"])
def test_read_text_refuses_paths_outside_the_root(procfs, relpath):
    with pytest.raises(ValueError):
        procfs.read_text(relpath)


def test_clk_tck_defaults_to_the_system_and_can_be_overridden(tmp_path):
    assert ProcFS(tmp_path).clk_tck > 0
    assert ProcFS(tmp_path, clk_tck=250).clk_tck == 250
    with pytest.raises(ValueError):
        ProcFS(tmp_path, clk_tck=0)


def test_default_opener_reads_real_files(tree):
    tree.add_process(100, starttime=77)
    assert ProcFS(tree.root, clk_tck=100).identity(100) == ProcKey(100, 77)


# ---------------------------------------------------------------- vanishing
@pytest.mark.parametrize(
    "call",
    [
        lambda p: p.stat(100),
        lambda p: p.status(100),
        lambda p: p.cmdline(100),
        lambda p: p.tids(100),
        lambda p: p.thread_stat(100, 100),
        lambda p: p.thread_syscall(100, 100),
        lambda p: p.thread_wchan(100, 100),
        lambda p: p.socket_inodes(100),
        lambda p: p.identity(100),
    ],
)
def test_a_pid_vanishing_between_listdir_and_read_is_target_gone(tree, procfs, call):
    tree.add_process(100)
    assert procfs.pids() == [100]
    tree.remove(100)
    with pytest.raises(TargetGone):
        call(procfs)


def test_a_thread_that_exited_is_target_gone(tree, procfs):
    tree.add_process(100, threads=[101])
    assert procfs.tids(100) == [100, 101]
    tree.remove_thread(100, 101)
    with pytest.raises(TargetGone):
        procfs.thread_stat(100, 101)


@pytest.mark.parametrize(
    "relpath, call",
    [
        ("100/stat", lambda p: p.stat(100)),
        ("100/status", lambda p: p.status(100)),
        ("100/task/100/syscall", lambda p: p.thread_syscall(100, 100)),
    ],
)
def test_a_file_emptied_by_an_exit_mid_read_is_target_gone(tree, procfs, relpath, call):
    tree.add_process(100)
    tree.write(relpath, b"")
    with pytest.raises(TargetGone):
        call(procfs)


def test_a_malformed_non_empty_file_is_probe_failed_not_target_gone(tree, procfs):
    tree.add_process(100)
    tree.write("100/stat", b"100 (python3) S 1 2 3\n")
    with pytest.raises(ProbeFailed, match="truncated"):
        procfs.stat(100)


def test_esrch_from_a_reaped_task_is_target_gone(tree):
    tree.add_process(100)

    def opener(path: str) -> bytes:
        raise ProcessLookupError(3, "No such process", path)

    with pytest.raises(TargetGone):
        tree.procfs(opener=opener).stat(100)


def test_fds_closed_during_the_scan_are_skipped(tree):
    tree.add_process(100, cmdline=SERVER)
    tree.listen(100, 8000, inode=9001)
    tree.connect(100, 8000, inode=9100)

    def readlink(path: str) -> str:
        if path.endswith("/fd/4"):
            raise FileNotFoundError(2, "No such file or directory", path)
        return tree.readlink(path)

    assert tree.procfs(readlink=readlink).socket_inodes(100) == {9001}


# ---------------------------------------------------------------- zombie
def test_zombie_reads_as_a_zombie_not_an_error(tree, procfs):
    tree.add_process(100, cmdline=SERVER, threads=[101])
    tree.set_thread(100, 101, utime=30)
    tree.listen(100, 8000, inode=9001)
    tree.zombie(100)
    st = procfs.stat(100)
    assert (st.state, st.utime, st.rss_pages) == ("Z", 30, 0)
    status = procfs.status(100)
    assert status.state == "Z" and status.vm_rss_bytes is None
    assert procfs.cmdline(100) == ()
    assert procfs.tids(100) == [100]
    assert procfs.socket_inodes(100) == set()
    assert procfs.listening_sockets() == {}


# ---------------------------------------------------------------- permission denied
@pytest.mark.parametrize(
    "denied, call",
    [
        ("100/task/100/syscall", lambda p: p.thread_syscall(100, 100)),
        ("100/task/100/stack", lambda p: p.thread_stack(100, 100)),
        ("100/status", lambda p: p.status(100)),
        ("100/fd", lambda p: p.socket_inodes(100)),
        ("100", lambda p: p.stat(100)),  # a whole directory
        ("net/tcp", lambda p: p.listening_sockets()),
    ],
)
def test_permission_denied_is_access_denied(tree, procfs, denied, call):
    tree.add_process(100)
    tree.deny(denied)
    with pytest.raises(AccessDenied):
        call(procfs)


def test_a_denied_file_does_not_affect_its_siblings(tree, procfs):
    tree.add_process(100)
    tree.deny("100/task/100/syscall")
    assert procfs.thread_stat(100, 100).pid == 100
    assert procfs.thread_wchan(100, 100) == "futex_do_wait"


def test_other_os_errors_are_probe_failed(tree):
    tree.add_process(100)

    def opener(path: str) -> bytes:
        raise OSError(5, "Input/output error", path)

    with pytest.raises(ProbeFailed):
        tree.procfs(opener=opener).stat(100)


# ---------------------------------------------------------------- the fake's own claims
def test_fake_stat_lines_have_52_fields(tree):
    tree.add_process(100, comm="a b) c")
    text = (tree.root / "100" / "stat").read_text()
    assert len(text[text.rindex(")") + 1 :].split()) == 50  # + pid + comm = 52
    assert (tree.root / "100" / "cmdline").read_bytes() == b"python3\x00"


# ---------------------------------------------------------------- what a watched thread reads
def test_a_watched_thread_shows_the_file_it_is_reading_while_the_read_lasts(tree):
    import threading

    tree.add_process(100, 1, ("python3",))
    inside, release, seen = threading.Event(), threading.Event(), []

    def opener(path: str) -> bytes:
        if path.endswith("100/cmdline"):
            inside.set()
            release.wait(30)
        return tree.opener(path)

    procfs = tree.procfs(opener=opener)

    def read() -> None:
        with procfs.watched() as tid:
            seen.append(tid)
            procfs.cmdline(100)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    assert inside.wait(30)
    assert procfs.reading(seen[0]) == "100/cmdline"
    release.set()
    t.join(30)
    assert procfs.reading(seen[0]) == ""


def test_a_thread_that_did_not_ask_is_not_watched(tree, procfs):
    import threading

    tree.add_process(100, 1, ("python3",))
    procfs.cmdline(100)
    assert procfs.reading(threading.get_ident()) == ""
