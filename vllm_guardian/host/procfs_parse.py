"""Pure parsers for the /proc files the guardian reads. Text in, frozen dataclasses out.

No I/O here: ``vllm_guardian.host.procfs`` reads the files and hands their text to these
functions, so every format (and every ugly variant) is tested on literals.
Formats: ``man 5 proc_pid_stat``, ``proc_pid_status``, ``proc_pid_syscall``,
``proc_pid_wchan``, ``proc_pid_cmdline``, ``proc_net`` (tcp/tcp6); samples taken from
a real kernel are the literals in ``tests/unit/test_procfs_parse.py``.

Every parser raises ``ValueError`` with a message naming the file kind when the
text is malformed (empty, truncated, not numbers).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

TCP_LISTEN = 0x0A
"""``st`` column of /proc/net/tcp{,6} for a listening socket (include/net/tcp_states.h)."""

# Stat fields, 1-based as in proc_pid_stat(5); index into the fields after the
# last ')' is N - 3 (field 3, state, is the first of them).
_F_STATE, _F_PPID = 3, 4
_F_UTIME, _F_STIME = 14, 15
_F_NUM_THREADS, _F_STARTTIME, _F_RSS = 20, 22, 24


@dataclass(frozen=True)
class StatInfo:
    """``/proc/PID/stat`` or ``/proc/PID/task/TID/stat``; times in clock ticks."""

    pid: int
    comm: str
    state: str
    ppid: int
    utime: int
    stime: int
    num_threads: int
    starttime: int
    rss_pages: int


@dataclass(frozen=True)
class StatusInfo:
    """``/proc/PID/status`` (the leader's counters only!) or ``task/TID/status``."""

    name: str
    state: str
    tgid: int | None
    pid: int
    ppid: int | None
    tracer_pid: int | None
    threads: int | None
    vm_rss_bytes: int | None
    voluntary_ctxt_switches: int | None
    nonvoluntary_ctxt_switches: int | None
    nspid: tuple[int, ...] = ()


@dataclass(frozen=True)
class SyscallInfo:
    """``/proc/PID/task/TID/syscall``: on a CPU (``running``), in syscall ``nr``, or blocked outside one."""

    running: bool
    nr: int | None
    blocked_outside_syscall: bool


@dataclass(frozen=True)
class SocketEntry:
    """One row of /proc/net/tcp or tcp6. ``state`` is the numeric TCP state (0x0A = LISTEN)."""

    local_ip: str
    local_port: int
    state: int
    inode: int

    @property
    def listening(self) -> bool:
        return self.state == TCP_LISTEN


def _int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{what}: not an integer: {value!r}") from None


def parse_stat(text: str) -> StatInfo:
    """Parse a stat line. comm is between the first '(' and the LAST ')': it may hold both."""
    line = text.strip()
    if not line:
        raise ValueError("stat: empty text")
    left = line.find("(")
    right = line.rfind(")")
    if left < 0 or right < left:
        raise ValueError(f"stat: no '(comm)' in {line[:80]!r}")
    rest = line[right + 1 :].split()
    if len(rest) < _F_RSS - 2:
        raise ValueError(f"stat: truncated, {len(rest) + 2} fields, need at least {_F_RSS}")

    def field(n: int) -> int:
        return _int(rest[n - 3], f"stat field {n}")

    return StatInfo(
        pid=_int(line[:left].strip(), "stat field 1 (pid)"),
        comm=line[left + 1 : right],
        state=rest[_F_STATE - 3],
        ppid=field(_F_PPID),
        utime=field(_F_UTIME),
        stime=field(_F_STIME),
        num_threads=field(_F_NUM_THREADS),
        starttime=field(_F_STARTTIME),
        rss_pages=field(_F_RSS),
    )


def _status_fields(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _opt_int(fields: dict[str, str], key: str) -> int | None:
    value = fields.get(key)
    if value is None or value == "":
        return None
    return _int(value.split()[0], f"status {key}")


def _kib(fields: dict[str, str], key: str) -> int | None:
    value = fields.get(key)
    if value is None:
        return None
    parts = value.split()
    if not parts:
        raise ValueError(f"status {key}: empty value")
    number = _int(parts[0], f"status {key}")
    unit = parts[1].lower() if len(parts) > 1 else "kb"
    if unit != "kb":
        raise ValueError(f"status {key}: unknown unit {parts[1]!r}")
    return number * 1024


def parse_status(text: str) -> StatusInfo:
    """Parse ``Key:\\tvalue`` lines. Name, State and Pid are required; any other key may be absent."""
    fields = _status_fields(text)
    missing = [k for k in ("Name", "State", "Pid") if k not in fields]
    if missing:
        raise ValueError(f"status: missing {', '.join(missing)}")
    state = fields["State"].split()
    if not state:
        raise ValueError("status State: empty value")
    nspid = tuple(_int(v, "status NSpid") for v in fields.get("NSpid", "").split())
    return StatusInfo(
        name=fields["Name"],
        state=state[0],
        tgid=_opt_int(fields, "Tgid"),
        pid=_int(fields["Pid"], "status Pid"),
        ppid=_opt_int(fields, "PPid"),
        tracer_pid=_opt_int(fields, "TracerPid"),
        threads=_opt_int(fields, "Threads"),
        vm_rss_bytes=_kib(fields, "VmRSS"),
        voluntary_ctxt_switches=_opt_int(fields, "voluntary_ctxt_switches"),
        nonvoluntary_ctxt_switches=_opt_int(fields, "nonvoluntary_ctxt_switches"),
        nspid=nspid,
    )


def parse_syscall(text: str) -> SyscallInfo:
    """``running`` | ``-1 SP PC`` (blocked, not in a syscall) | ``NR a1..a6 SP PC``."""
    parts = text.split()
    if not parts:
        raise ValueError("syscall: empty text")
    if parts[0] == "running":
        return SyscallInfo(running=True, nr=None, blocked_outside_syscall=False)
    nr = _int(parts[0], "syscall number")
    if nr == -1:
        return SyscallInfo(running=False, nr=None, blocked_outside_syscall=True)
    if nr < 0:
        raise ValueError(f"syscall: negative number {nr}")
    return SyscallInfo(running=False, nr=nr, blocked_outside_syscall=False)


@dataclass(frozen=True)
class SchedStat:
    """``/proc/PID/task/TID/schedstat``: ns on a CPU, ns waiting on a runqueue, timeslices."""

    run_ns: int
    wait_ns: int
    timeslices: int


def parse_schedstat(text: str) -> SchedStat:
    parts = text.split()
    if len(parts) < 3:
        raise ValueError(f"schedstat: expected 3 numbers, got {text!r}")
    try:
        return SchedStat(int(parts[0]), int(parts[1]), int(parts[2]))
    except ValueError:
        raise ValueError(f"schedstat: not numbers: {text!r}") from None


def parse_wchan(text: str) -> str | None:
    """The kernel symbol the task sleeps in; ``0`` (running, or not permitted) and empty → None."""
    symbol = text.strip()
    if symbol in ("", "0"):
        return None
    return symbol


def parse_cmdline(raw: bytes) -> tuple[str, ...]:
    """NUL-separated argv; trailing NULs (setproctitle padding) dropped; spaces inside an arg kept."""
    raw = raw.rstrip(b"\x00")  # a retitled process's padding can be kilobytes of NULs: not one arg each
    if not raw:
        return ()
    return tuple(a.decode("utf-8", errors="replace") for a in raw.split(b"\x00"))


def _hex_ip(text: str, byteorder: str) -> str:
    if len(text) not in (8, 32):
        raise ValueError(f"net/tcp: bad address length {text!r}")
    raw = bytes.fromhex(text)
    if byteorder == "little":  # the kernel prints each 32-bit word in host order
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(raw))


def _parse_tcp_line(line: str, byteorder: str) -> SocketEntry:
    parts = line.split()
    if len(parts) < 10 or not parts[0].endswith(":"):
        raise ValueError(f"net/tcp: malformed line {line[:80]!r}")
    addr, _, port = parts[1].partition(":")
    return SocketEntry(
        local_ip=_hex_ip(addr, byteorder),
        local_port=int(port, 16),
        state=int(parts[3], 16),
        inode=_int(parts[9], "net/tcp inode"),
    )


def parse_net_tcp(text: str, byteorder: str = "little") -> list[SocketEntry]:
    """Rows of /proc/net/tcp or tcp6; the header and malformed lines are skipped.

    ``byteorder`` is the host's (``sys.byteorder``): addresses are printed as
    32-bit words in host order, so 127.0.0.1 reads ``0100007F`` on x86.
    """
    entries: list[SocketEntry] = []
    for line in text.splitlines():
        try:
            entries.append(_parse_tcp_line(line, byteorder))
        except ValueError:
            continue
    return entries


@dataclass(frozen=True)
class Listener:
    """A TCP socket in LISTEN: the address and port it is bound to (``0.0.0.0`` / ``::`` bind
    all), its inode (what ``/proc/<pid>/fd`` links name) and, for IPv6, whether it is
    ``IPV6_V6ONLY``: /proc/net/tcp6 does not say (None: unknown; ``host.sockdiag`` can tell)."""

    address: str
    port: int
    inode: int
    v6only: bool | None = None

    @property
    def ipv6(self) -> bool:
        return ":" in self.address


def parse_listening_sockets(text: str, byteorder: str = "little") -> list[Listener]:
    """The LISTEN rows of /proc/net/tcp or tcp6 (address, port, inode), and nothing else.

    What discovery needs to find who serves an address, read every pass: the state column is
    checked before anything is converted, so the many established and TIME_WAIT rows of a busy
    node cost a split each; only a listening row's address is parsed. The same rows, with the
    same validation of address, port and inode, as ``parse_net_tcp`` keeps with ``listening``;
    a malformed row is skipped.
    """
    out: list[Listener] = []
    listen = f"{TCP_LISTEN:02X}"
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 10 or parts[3] != listen or not parts[0].endswith(":"):
            continue
        addr, sep, port = parts[1].rpartition(":")
        if not sep:
            continue
        try:
            number = int(port, 16)
            if number > 0xFFFF:
                continue
            out.append(Listener(_hex_ip(addr, byteorder), number, _int(parts[9], "net/tcp inode")))
        except ValueError:
            continue
    return out


def environ_value(raw: bytes, name: str) -> str | None:
    """The value of ``name`` in a NUL-separated ``/proc/<pid>/environ``; None when absent.
    The last assignment wins, as Python's ``os.environ`` (and so vLLM) reads it."""
    prefix = name.encode() + b"="
    found: str | None = None
    for entry in raw.split(b"\0"):
        if entry.startswith(prefix):
            found = entry[len(prefix) :].decode("utf-8", errors="replace")
    return found


@dataclass(frozen=True)
class IoCounters:
    """``/proc/PID/task/TID/io``: the syscalls a thread made (reads, writes) since it started."""

    syscr: int
    syscw: int

    @property
    def syscalls(self) -> int:
        return self.syscr + self.syscw


def parse_io(text: str) -> IoCounters:
    """``syscr`` and ``syscw`` of an io file; ValueError when either is missing or not a number."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    try:
        return IoCounters(int(fields["syscr"]), int(fields["syscw"]))
    except KeyError as e:
        raise ValueError(f"io: no {e.args[0]} line in {text!r}") from None
    except ValueError:
        raise ValueError(f"io: not numbers: {text!r}") from None
