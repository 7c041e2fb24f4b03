"""FakeProcTree: writes a realistic fake /proc into a directory, in the kernel's formats.

What it claims, it does like the kernel:
- ``PID/stat`` has 52 fields; its utime/stime are the SUM over the process's
  threads, its state the leader's; ``task/TID/stat`` is per thread.
- ``PID/status`` context-switch counters are the MAIN thread's only; ``VmRSS``
  is absent for zombies; ``task/TID/status`` is per thread.
- ``task/TID/syscall`` is ``running`` for a running thread, a futex wait for a
  sleeping one, unless set explicitly; ``wchan`` likewise (``0`` when running).
- ``cmdline`` is NUL-separated with a trailing NUL, empty for zombies.
- ``net/tcp`` and ``net/tcp6`` have the header line and little-endian hex
  addresses; ``PID/fd/N`` are symlinks to ``socket:[inode]``.

Permission problems cannot be made with chmod when the tests run as root, so
``deny(relpath)`` marks paths that the ``opener``/``listdir``/``readlink`` seams
(hand them to ``ProcFS``, or call ``procfs()``) refuse with EACCES.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.model import ProcKey

PAGE_SIZE = 4096
FUTEX_WAIT_SYSCALL = "202 0x563f5ea9b0f0 0x189 0x0 0x0 0x0 0xffffffff 0x7fff502e5540 0x7f70b20a3e96"
_STATE_NAMES = {
    "R": "running",
    "S": "sleeping",
    "D": "disk sleep",
    "T": "stopped",
    "t": "tracing stop",
    "Z": "zombie",
    "X": "dead",
    "I": "idle",
}
_TCP_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
_TCP6_HEADER = (
    "  sl  local_address                         remote_address                        st"
    " tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
)


@dataclass(frozen=True)
class _Thread:
    tid: int
    comm: str
    state: str = "S"
    utime: int = 0
    stime: int = 0
    voluntary: int = 0
    nonvoluntary: int = 0
    starttime: int = 0
    syscall: str | None = None  # None: derived from state
    wchan: str | None = None  # None: derived from state
    wait_ns: int = 0  # runqueue wait (schedstat field 2); run time is derived from utime+stime
    syscr: int = 0  # io: syscalls that read (syscw is written as 0)


@dataclass(frozen=True)
class _Socket:
    inode: int
    ip: str
    port: int
    state: int  # 0x0A listen, 0x01 established


@dataclass
class _Proc:
    pid: int
    ppid: int
    cmdline: tuple[str, ...]
    starttime: int
    rss_pages: int
    threads: dict[int, _Thread]
    sockets: list[_Socket] = field(default_factory=list)
    zombie: bool = False
    environ: dict[str, str] = field(default_factory=dict)
    cgroup: str = "0::/\n"


def _default_comm(cmdline: tuple[str, ...]) -> str:
    return os.path.basename(cmdline[0])[:15] if cmdline and cmdline[0] else "?"


def _hex_ip(ip: str) -> str:
    packed = ipaddress.ip_address(ip).packed
    return "".join(packed[i : i + 4][::-1].hex().upper() for i in range(0, len(packed), 4))


class FakeProcTree:
    """A fake /proc under ``root``. Mutate with the methods; files are rewritten on every change."""

    def __init__(self, root: Path | str, clk_tck: int = 100):
        self.root = Path(root)
        self.clk_tck = clk_tck
        self._procs: dict[int, _Proc] = {}
        self._denied: set[str] = set()
        self._vanish: dict[str, int] = {}
        self._next_start = 1000
        (self.root / "net").mkdir(parents=True, exist_ok=True)
        self._write_net()

    # ------------------------------------------------------------ seams for ProcFS
    def _check(self, path: str) -> str:
        rel = os.path.relpath(path, self.root)
        parts = Path(rel).parts
        for i in range(1, len(parts) + 1):
            if str(Path(*parts[:i])) in self._denied:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        if rel in self._vanish:
            self.remove(self._vanish.pop(rel))
        return path

    def opener(self, path: str) -> bytes:
        with open(self._check(path), "rb") as f:
            return f.read()

    def listdir(self, path: str) -> list[str]:
        return os.listdir(self._check(path))

    def readlink(self, path: str) -> str:
        return os.readlink(self._check(path))

    def procfs(self, **kwargs) -> ProcFS:
        """A ProcFS over this tree with every seam wired (deny/vanish honoured); kwargs override."""
        kwargs.setdefault("clk_tck", self.clk_tck)
        kwargs.setdefault("byteorder", "little")
        kwargs.setdefault("opener", self.opener)
        kwargs.setdefault("listdir", self.listdir)
        kwargs.setdefault("readlink", self.readlink)
        return ProcFS(self.root, **kwargs)

    def deny(self, relpath: str) -> None:
        """Reads of ``relpath`` (a file or a directory and all below it) fail with EACCES."""
        self._denied.add(str(Path(relpath)))

    def vanish_on_read(self, pid: int, relpath: str = "stat") -> None:
        """The process exits just before ``<pid>/<relpath>`` is next read (after it was listed)."""
        self._vanish[str(Path(str(pid), relpath))] = pid

    # ------------------------------------------------------------ building
    def add_process(
        self,
        pid: int,
        ppid: int = 1,
        cmdline: Iterable[str] = ("python3",),
        comm: str | None = None,
        state: str = "S",
        starttime: int | None = None,
        utime: int = 0,
        stime: int = 0,
        rss_pages: int = 2500,
        threads: Iterable[int | tuple[int, str]] | None = None,
    ) -> ProcKey:
        """A process with its main thread (tid == pid) and optional extra ``threads`` (tid or (tid, comm))."""
        argv = tuple(cmdline)
        if starttime is None:
            starttime = self._next_start
            self._next_start += 10
        main_comm = comm if comm is not None else _default_comm(argv)
        ths = {pid: _Thread(pid, main_comm[:15], state, utime, stime, starttime=starttime)}
        for t in threads or ():
            tid, tcomm = (t, main_comm) if isinstance(t, int) else t
            ths[tid] = _Thread(tid, tcomm[:15], "S", starttime=starttime)
        self._procs[pid] = _Proc(pid, ppid, argv, starttime, rss_pages, ths)
        self._render(pid)
        return ProcKey(pid, starttime)

    def set_thread(self, pid: int, tid: int, **values) -> None:
        """Update a thread: utime=, stime=, voluntary=, nonvoluntary=, syscall=, wchan=, state=, comm=,
        wait_ns= (runqueue wait for schedstat), syscr= (syscalls in io)."""
        proc = self._procs[pid]
        proc.threads[tid] = replace(proc.threads[tid], **values)
        self._render(pid)

    def remove_thread(self, pid: int, tid: int) -> None:
        del self._procs[pid].threads[tid]
        self._render(pid)

    def set_process(
        self, pid: int, *, ppid: int | None = None, cmdline: Iterable[str] | None = None, rss_pages: int | None = None
    ) -> None:
        proc = self._procs[pid]
        if ppid is not None:
            proc.ppid = ppid
        if cmdline is not None:
            proc.cmdline = tuple(cmdline)
        if rss_pages is not None:
            proc.rss_pages = rss_pages
        self._render(pid)

    def set_environ(self, pid: int, **env: str) -> None:
        """The environment the process started with (``/proc/<pid>/environ``)."""
        self._procs[pid].environ = dict(env)
        self._render(pid)

    def set_cgroup(self, pid: int, text: str) -> None:
        """``/proc/<pid>/cgroup`` verbatim (a v2 ``0::/path`` line, or v1 ``N:ctrl:/path`` lines)."""
        self._procs[pid].cgroup = text
        self._render(pid)

    def remove(self, pid: int) -> None:
        """The process is gone (reaped): its directory and its sockets disappear."""
        self._procs.pop(pid, None)
        shutil.rmtree(self.root / str(pid), ignore_errors=True)
        self._write_net()

    def zombie(self, pid: int) -> None:
        """Exited, not yet reaped: state Z, empty cmdline, no VmRSS, only the leader left, no fds."""
        proc = self._procs[pid]
        proc.zombie = True
        proc.sockets.clear()
        leader = proc.threads[pid]
        total_u = sum(t.utime for t in proc.threads.values())
        total_s = sum(t.stime for t in proc.threads.values())
        proc.threads = {pid: replace(leader, state="Z", utime=total_u, stime=total_s, syscall=None, wchan=None)}
        proc.rss_pages = 0
        self._render(pid)

    def listen(self, pid: int, port: int, inode: int, ip: str = "0.0.0.0") -> None:
        """The process holds a TCP socket listening on ip:port (an fd and a net/tcp{,6} row)."""
        self._procs[pid].sockets.append(_Socket(inode, ip, port, 0x0A))
        self._render(pid)

    def close_listener(self, pid: int, port: int) -> None:
        """The process closed its listening socket(s) on port: fd and net/tcp row go."""
        proc = self._procs[pid]
        proc.sockets = [s for s in proc.sockets if not (s.port == port and s.state == 0x0A)]
        self._render(pid)

    def connect(self, pid: int, port: int, inode: int, ip: str = "127.0.0.1") -> None:
        """The process holds an ESTABLISHED socket with local ip:port (not a listener)."""
        self._procs[pid].sockets.append(_Socket(inode, ip, port, 0x01))
        self._render(pid)

    def share_socket(self, pid: int, inode: int) -> None:
        """The process holds (inherited) an fd to an existing socket of another process."""
        for other in self._procs.values():
            for sock in other.sockets:
                if sock.inode == inode:
                    self._procs[pid].sockets.append(replace(sock))
                    self._render(pid)
                    return
        raise KeyError(f"no socket with inode {inode}")

    def write(self, relpath: str, data: bytes) -> None:
        """Overwrite one file verbatim (truncated or malformed content); the next change re-renders it."""
        path = self.root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    # ------------------------------------------------------------ rendering
    def _stat_line(self, proc: _Proc, tid: int, comm: str, state: str, utime: int, stime: int, starttime: int) -> str:
        fields = [0] * 50  # fields 3..52
        values = {
            4: proc.ppid,
            5: proc.pid,
            6: proc.pid,
            8: -1,
            9: 4194304,
            10: 1500,
            14: utime,
            15: stime,
            18: 20,
            19: 0,
            20: len(proc.threads),
            22: starttime,
            23: 0 if proc.zombie else proc.rss_pages * PAGE_SIZE * 4,
            24: proc.rss_pages,
            25: 18446744073709551615,
            38: 17,
        }
        for n, v in values.items():
            fields[n - 3] = v
        rest = " ".join([state] + [str(v) for v in fields[1:]])
        return f"{tid} ({comm}) {rest}\n"

    def _status_text(self, proc: _Proc, th: _Thread) -> str:
        lines = [
            f"Name:\t{th.comm}",
            "Umask:\t0022",
            f"State:\t{th.state} ({_STATE_NAMES.get(th.state, 'unknown')})",
            f"Tgid:\t{proc.pid}",
            "Ngid:\t0",
            f"Pid:\t{th.tid}",
            f"PPid:\t{proc.ppid}",
            "TracerPid:\t0",
            "Uid:\t0\t0\t0\t0",
            "Gid:\t0\t0\t0\t0",
            "FDSize:\t64",
            "Groups:\t",
            f"NStgid:\t{proc.pid}",
            f"NSpid:\t{th.tid}",
            f"NSpgid:\t{proc.pid}",
            f"NSsid:\t{proc.pid}",
            "Kthread:\t0",
        ]
        if not proc.zombie:
            kib = proc.rss_pages * PAGE_SIZE // 1024
            lines += [
                f"VmPeak:\t{kib * 4:8d} kB",
                f"VmSize:\t{kib * 4:8d} kB",
                f"VmHWM:\t{kib:8d} kB",
                f"VmRSS:\t{kib:8d} kB",
            ]
        lines += [
            f"Threads:\t{len(proc.threads)}",
            "SigQ:\t0/96364",
            "Cpus_allowed_list:\t0-1",
            f"voluntary_ctxt_switches:\t{th.voluntary}",
            f"nonvoluntary_ctxt_switches:\t{th.nonvoluntary}",
        ]
        return "\n".join(lines) + "\n"

    @staticmethod
    def _syscall_text(th: _Thread) -> str:
        if th.syscall is not None:
            return th.syscall
        return "running" if th.state == "R" else FUTEX_WAIT_SYSCALL

    @staticmethod
    def _wchan_text(th: _Thread) -> str:
        if th.wchan is not None:
            return th.wchan
        return "futex_do_wait" if th.state in ("S", "D") else "0"

    def _render(self, pid: int) -> None:
        proc = self._procs[pid]
        base = self.root / str(pid)
        shutil.rmtree(base, ignore_errors=True)
        (base / "task").mkdir(parents=True)
        (base / "fd").mkdir()
        leader = proc.threads[pid]
        total_u = sum(t.utime for t in proc.threads.values())
        total_s = sum(t.stime for t in proc.threads.values())
        (base / "stat").write_text(
            self._stat_line(proc, pid, leader.comm, leader.state, total_u, total_s, proc.starttime)
        )
        (base / "status").write_text(self._status_text(proc, leader))
        argv = b"" if proc.zombie else b"".join(a.encode() + b"\x00" for a in proc.cmdline)
        (base / "cmdline").write_bytes(argv)
        (base / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\x00" for k, v in proc.environ.items()))
        (base / "cgroup").write_text(proc.cgroup)
        for th in proc.threads.values():
            tdir = base / "task" / str(th.tid)
            tdir.mkdir()
            (tdir / "stat").write_text(
                self._stat_line(proc, th.tid, th.comm, th.state, th.utime, th.stime, th.starttime)
            )
            (tdir / "status").write_text(self._status_text(proc, th))
            (tdir / "syscall").write_text(self._syscall_text(th) + "\n")
            (tdir / "wchan").write_text(self._wchan_text(th))
            run_ns = (th.utime + th.stime) * (1_000_000_000 // self.clk_tck)
            (tdir / "schedstat").write_text(f"{run_ns} {th.wait_ns} {th.utime + th.stime}\n")
            (tdir / "io").write_text(f"rchar: 0\nwchar: 0\nsyscr: {th.syscr}\nsyscw: 0\n")
            (tdir / "stack").write_text("[<0>] futex_do_wait+0x3a/0x70\n" if th.state == "S" else "")
        if not proc.zombie:
            os.symlink("/dev/null", base / "fd" / "0")
            for n, sock in enumerate(proc.sockets, start=3):
                os.symlink(f"socket:[{sock.inode}]", base / "fd" / str(n))
        self._write_net()

    def _write_net(self) -> None:
        rows4: list[str] = []
        rows6: list[str] = []
        seen: set[int] = set()
        for proc in self._procs.values():
            for sock in proc.sockets:
                if sock.inode in seen:
                    continue
                seen.add(sock.inode)
                v6 = ipaddress.ip_address(sock.ip).version == 6
                rows = rows6 if v6 else rows4
                remote = "0" * (32 if v6 else 8) + ":0000"
                rows.append(
                    f"{len(rows):4d}: {_hex_ip(sock.ip)}:{sock.port:04X} {remote} {sock.state:02X} "
                    f"00000000:00000000 00:00000000 00000000     0        0 {sock.inode} 1 "
                    f"0000000000000000 100 0 0 10 0\n"
                )
        (self.root / "net" / "tcp").write_text(_TCP_HEADER + "".join(rows4))
        (self.root / "net" / "tcp6").write_text(_TCP6_HEADER + "".join(rows6))
