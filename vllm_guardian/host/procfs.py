"""ProcFS: the only code that reads /proc. Each method reads one file and hands it to a parser.

Errors are domain errors (docs/design.md, Seams):
- the process or thread vanished (ENOENT, ESRCH, or a file that came back empty
  because the task died mid-read) → ``TargetGone``;
- the kernel refused the read (ptrace checks, hidepid) → ``AccessDenied``;
- anything else the kernel or a parser throws → ``ProbeFailed``.

Seams (all optional, passed at construction): ``root`` (a fake tree in tests),
``opener(path) -> bytes`` for every file read, ``listdir(path)`` and
``readlink(path)`` for the directory walks (pids, tids, fds), ``clk_tck``.
Tests use the seams to simulate EACCES, which chmod cannot do for root.

A thread that asks (``watched()``) has the file it is reading recorded while the read lasts
(``reading(thread_id)``): a read of ``cmdline`` or ``environ`` of a process whose memory map
is locked in the kernel does not return, and whoever waits on that thread can say which file
of which process holds it.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

from vllm_guardian.errors import AccessDenied, ProbeFailed, TargetGone
from vllm_guardian.host import procfs_parse as parse
from vllm_guardian.host.procfs_parse import StatInfo, StatusInfo, SyscallInfo
from vllm_guardian.model import ProcKey

T = TypeVar("T")

_SOCKET_LINK = re.compile(r"^socket:\[(\d+)\]$")


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class ProcFS:
    """Reads one /proc tree (``root``, default ``/proc``)."""

    def __init__(
        self,
        root: str | os.PathLike[str] = "/proc",
        opener: Callable[[str], bytes] | None = None,
        clk_tck: int | None = None,
        *,
        listdir: Callable[[str], list[str]] | None = None,
        readlink: Callable[[str], str] | None = None,
        byteorder: str | None = None,
    ):
        self.root = os.fspath(root)
        self._open = opener or _read_bytes
        self._listdir = listdir or os.listdir
        self._readlink = readlink or os.readlink
        self._byteorder = byteorder or sys.byteorder
        self.clk_tck = int(clk_tck) if clk_tck is not None else int(os.sysconf("SC_CLK_TCK"))
        if self.clk_tck <= 0:
            raise ValueError(f"clk_tck must be positive, got {self.clk_tck}")
        self._reading: dict[int, str] = {}  # watched thread id -> relpath being read ("" between reads)

    def __repr__(self) -> str:
        return f"ProcFS(root={self.root!r})"

    # ------------------------------------------------------------ plumbing
    def _path(self, relpath: str) -> str:
        return os.path.join(self.root, relpath)

    @contextmanager
    def watched(self) -> Iterator[int]:
        """Within: this thread's reads are recorded while they last; yields the thread id."""
        tid = threading.get_ident()
        self._reading[tid] = ""
        try:
            yield tid
        finally:
            self._reading.pop(tid, None)

    def reading(self, thread_id: int) -> str:
        """The file (relative to the root) a watched thread is reading now; "" when none."""
        return self._reading.get(thread_id, "")

    def _os(self, what: str, fn: Callable[[str], T], relpath: str) -> T:
        path = self._path(relpath)
        tid = threading.get_ident() if self._reading else 0
        if tid in self._reading:
            self._reading[tid] = relpath
            try:
                return self._os_call(what, fn, path)
            finally:
                self._reading[tid] = ""
        return self._os_call(what, fn, path)

    @staticmethod
    def _os_call(what: str, fn: Callable[[str], T], path: str) -> T:
        try:
            return fn(path)
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError) as e:
            raise TargetGone(f"{what} {path}: {e.strerror or e}") from e
        except PermissionError as e:
            raise AccessDenied(f"{what} {path}: {e.strerror or e}") from e
        except OSError as e:
            raise ProbeFailed(f"{what} {path}: {e}") from e

    def _read(self, relpath: str) -> bytes:
        return self._os("read", self._open, relpath)

    def _parsed(self, relpath: str, parser: Callable[[str], T]) -> T:
        text = self._read(relpath).decode("utf-8", errors="replace")
        try:
            return parser(text)
        except ValueError as e:
            if not text.strip():
                raise TargetGone(f"{self._path(relpath)}: empty (task exited mid-read)") from e
            raise ProbeFailed(f"{self._path(relpath)}: {e}") from e

    @staticmethod
    def _numeric(names: list[str]) -> list[int]:
        return sorted(int(n) for n in names if n.isdigit())

    # ------------------------------------------------------------ processes
    def pids(self) -> list[int]:
        """Every process (thread-group leader) visible now, ascending."""
        return self._numeric(self._os("list", self._listdir, ""))

    def stat(self, pid: int) -> StatInfo:
        return self._parsed(f"{pid}/stat", parse.parse_stat)

    def status(self, pid: int) -> StatusInfo:
        """Note: its context-switch counters are the main thread's only."""
        return self._parsed(f"{pid}/status", parse.parse_status)

    def cmdline(self, pid: int) -> tuple[str, ...]:
        """argv as the process shows it now (after setproctitle: the title). Empty for zombies/kthreads."""
        return parse.parse_cmdline(self._read(f"{pid}/cmdline"))

    def environ_var(self, pid: int, name: str) -> str | None:
        """One variable of the environment the process started with (``/proc/<pid>/environ``);
        None when unset. Readable only as the process's user (or with CAP_SYS_PTRACE). The
        rest of the environment is never kept."""
        return parse.environ_value(self._read(f"{pid}/environ"), name)

    def cgroup(self, pid: int) -> str:
        """``/proc/<pid>/cgroup`` as text: the cgroup paths a process lives in (v1 and v2 lines)."""
        return self._read_text(f"{pid}/cgroup")

    def identity(self, pid: int) -> ProcKey:
        return ProcKey(pid, self.stat(pid).starttime)

    # ------------------------------------------------------------ threads
    def tids(self, pid: int) -> list[int]:
        return self._numeric(self._os("list", self._listdir, f"{pid}/task"))

    def thread_stat(self, pid: int, tid: int) -> StatInfo:
        return self._parsed(f"{pid}/task/{tid}/stat", parse.parse_stat)

    def thread_status(self, pid: int, tid: int) -> StatusInfo:
        return self._parsed(f"{pid}/task/{tid}/status", parse.parse_status)

    def thread_syscall(self, pid: int, tid: int) -> SyscallInfo:
        """Needs ptrace access (root or CAP_SYS_PTRACE) for other users' processes."""
        return self._parsed(f"{pid}/task/{tid}/syscall", parse.parse_syscall)

    def thread_wchan(self, pid: int, tid: int) -> str | None:
        """None when running — and also when not permitted: the kernel then prints 0 silently."""
        return parse.parse_wchan(self._read_text(f"{pid}/task/{tid}/wchan"))

    def thread_schedstat(self, pid: int, tid: int) -> parse.SchedStat:
        """Time on a CPU and time waiting for one (ns): a starved spinner still *wants* the CPU."""
        return self._parsed(f"{pid}/task/{tid}/schedstat", parse.parse_schedstat)

    def thread_io(self, pid: int, tid: int) -> parse.IoCounters:
        """The thread's syscall counts; readable by root, the same uid or CAP_SYS_PTRACE."""
        return self._parsed(f"{pid}/task/{tid}/io", parse.parse_io)

    def process_io(self, pid: int) -> parse.IoCounters:
        """The whole process's syscall counts (every thread, the exited ones too); as ``thread_io``."""
        return self._parsed(f"{pid}/io", parse.parse_io)

    def thread_stack(self, pid: int, tid: int) -> str:
        """Kernel stack text; effectively root-only."""
        return self._read_text(f"{pid}/task/{tid}/stack")

    # ------------------------------------------------------------ sockets
    def _fd_links(self, pid: int) -> Iterator[str]:
        for fd in self._os("list", self._listdir, f"{pid}/fd"):
            try:
                yield self._os("readlink", self._readlink, f"{pid}/fd/{fd}")
            except TargetGone:
                continue  # the fd was closed during the scan

    def socket_inodes(self, pid: int) -> set[int]:
        """Inodes of the sockets the process holds open (from ``fd/* -> socket:[N]``)."""
        inodes: set[int] = set()
        for link in self._fd_links(pid):
            m = _SOCKET_LINK.match(link)
            if m:
                inodes.add(int(m.group(1)))
        return inodes

    def listening_sockets(self) -> dict[int, list[parse.Listener]]:
        """port → the TCP sockets listening on it, with their address (net/tcp + net/tcp6 of the
        reader's netns); IPv6 ones with ``v6only`` unknown (/proc does not show it)."""
        ports: dict[int, list[parse.Listener]] = {}
        for name in ("net/tcp", "net/tcp6"):
            try:
                raw = self._read(name)
            except TargetGone:
                continue  # no IPv6 (or no IPv4) in this kernel/netns
            for sock in parse.parse_listening_sockets(raw.decode("ascii", errors="replace"), self._byteorder):
                ports.setdefault(sock.port, []).append(sock)
        return ports

    # ------------------------------------------------------------ evidence
    def _read_text(self, relpath: str) -> str:
        return self._read(relpath).decode("utf-8", errors="replace")

    def read_text(self, relpath: str) -> str:
        """Any file under the root, as text (evidence capture). ``relpath`` must stay inside the root."""
        norm = os.path.normpath(relpath)
        if os.path.isabs(norm) or norm == ".." or norm.startswith(".." + os.sep):
            raise ValueError(f"read_text: {relpath!r} is not a path inside {self.root}")
        return self._read_text(norm)
