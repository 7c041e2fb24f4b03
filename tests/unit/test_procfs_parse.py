"""The /proc parsers, on literal text copied from (or shaped like) a real kernel."""

from __future__ import annotations

import pytest

from vllm_guardian.host.procfs_parse import (
    Listener,
    SocketEntry,
    StatusInfo,
    SyscallInfo,
    parse_cmdline,
    parse_listening_sockets,
    parse_net_tcp,
    parse_stat,
    parse_status,
    parse_syscall,
    parse_wchan,
)

# A real line read from a kernel, 52 fields.
CAT_STAT = (
    "5034 (cat) R 5029 5029 2734 0 -1 4194304 99 0 0 0 7 3 0 0 20 0 1 0 16354 3133440 393 "
    "18446744073709551615 94665932169216 94665932189097 140727217426352 0 0 0 0 0 0 0 0 0 17 0 "
    "0 0 0 0 0 94665932205104 94665932206720 94666834976768 140727217433304 140727217433324 "
    "140727217433324 140727217434603 0\n"
)


def _stat_with_comm(comm: str, utime: int = 151, stime: int = 2) -> str:
    return (
        f"4242 ({comm}) R 4200 4200 4100 0 -1 4194368 10 0 0 0 {utime} {stime} 0 0 20 0 3 0 "
        "98765 1000000 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
    )


# ---------------------------------------------------------------- stat
def test_stat_reads_the_documented_fields_of_a_real_line():
    st = parse_stat(CAT_STAT)
    assert (st.pid, st.comm, st.state, st.ppid) == (5034, "cat", "R", 5029)
    assert (st.utime, st.stime, st.num_threads, st.starttime, st.rss_pages) == (7, 3, 1, 16354, 393)


@pytest.mark.parametrize(
    "comm",
    [
        "evil) R 1 2 (x",  # a name set with prctl: a naive split reads utime wrong
        "Thre.(<lambda>)",  # the py-spy/remoteprocess bug
        "VLLM::EngineCor",
        "a b c",
        ")",
        "((",
        "",
    ],
)
def test_stat_comm_with_spaces_and_parentheses_does_not_shift_fields(comm):
    st = parse_stat(_stat_with_comm(comm))
    assert st.comm == comm
    assert (st.state, st.ppid, st.utime, st.stime, st.num_threads, st.starttime, st.rss_pages) == (
        "R",
        4200,
        151,
        2,
        3,
        98765,
        2048,
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("5034 cat R 5029", "comm"),  # no parentheses
        ("5034 (cat R 5029 5029", "comm"),  # no closing parenthesis
        ("5034 (cat) R 5029 5029 2734 0 -1 4194304 99 0 0 0 7 3", "truncated"),
        (CAT_STAT[:60], "truncated"),
        ("abc (cat) " + CAT_STAT.split(") ", 1)[1], "pid"),
        (CAT_STAT.replace(" 7 3 ", " x 3 ", 1), "field 14"),
    ],
)
def test_malformed_stat_raises_value_error_naming_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        parse_stat(text)


# ---------------------------------------------------------------- status
PROCESS_STATUS = """Name:\tpython3
Umask:\t0022
State:\tS (sleeping)
Tgid:\t5852
Ngid:\t0
Pid:\t5852
PPid:\t5846
TracerPid:\t0
Uid:\t0\t0\t0\t0
NStgid:\t5852\t12
NSpid:\t5852\t12
VmPeak:\t    3060 kB
VmRSS:\t    1612 kB
Threads:\t4
Cpus_allowed_list:\t0-1
voluntary_ctxt_switches:\t43
nonvoluntary_ctxt_switches:\t7
"""

ZOMBIE_STATUS = """Name:\tpython3
State:\tZ (zombie)
Tgid:\t777
Pid:\t777
PPid:\t1
TracerPid:\t0
Threads:\t1
voluntary_ctxt_switches:\t5
nonvoluntary_ctxt_switches:\t1
"""


def test_status_reads_every_key_the_probes_need():
    assert parse_status(PROCESS_STATUS) == StatusInfo(
        name="python3",
        state="S",
        tgid=5852,
        pid=5852,
        ppid=5846,
        tracer_pid=0,
        threads=4,
        vm_rss_bytes=1612 * 1024,
        voluntary_ctxt_switches=43,
        nonvoluntary_ctxt_switches=7,
        nspid=(5852, 12),
    )


def test_status_without_vmrss_reports_none_not_zero():
    st = parse_status(ZOMBIE_STATUS)
    assert st.state == "Z"
    assert st.vm_rss_bytes is None
    assert st.nspid == ()


def test_status_name_with_spaces_and_parentheses_is_kept_whole():
    st = parse_status(PROCESS_STATUS.replace("Name:\tpython3", "Name:\tevil) R 1 2 (x"))
    assert st.name == "evil) R 1 2 (x"


def test_status_missing_optional_keys_are_none():
    st = parse_status("Name:\tkworker/0:1\nState:\tI (idle)\nPid:\t12\n")
    assert (st.tgid, st.ppid, st.tracer_pid, st.threads) == (None, None, None, None)
    assert (st.voluntary_ctxt_switches, st.nonvoluntary_ctxt_switches) == (None, None)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "missing Name, State, Pid"),
        ("Name:\tx\nState:\tS (sleeping)\n", "missing Pid"),
        ("Name:\tx\nState:\tS (sleeping)\nPid:\tabc\n", "Pid"),
        (PROCESS_STATUS.replace("1612 kB", "1612 MB"), "unit"),
        (
            PROCESS_STATUS.replace("voluntary_ctxt_switches:\t43", "voluntary_ctxt_switches:\tmany"),
            "voluntary_ctxt_switches",
        ),
    ],
)
def test_malformed_status_raises_value_error(text, message):
    with pytest.raises(ValueError, match=message):
        parse_status(text)


# ---------------------------------------------------------------- syscall, wchan
@pytest.mark.parametrize(
    "text, expected",
    [
        ("running\n", SyscallInfo(running=True, nr=None, blocked_outside_syscall=False)),
        ("-1 0x7ffdddaf5f20 0x7f57df2fcc77\n", SyscallInfo(False, None, True)),
        (
            "202 0x563f5ea9b0f0 0x189 0x0 0x0 0x0 0xffffffff 0x7fff502e5540 0x7f70b20a3e96\n",
            SyscallInfo(False, 202, False),
        ),
        (
            "232 0x3 0x557d268bee20 0x3ff 0xffffffff 0x0 0x0 0x7fffb0b3b068 0x7f40c0f26ef3",
            SyscallInfo(False, 232, False),
        ),
        ("0 0x3 0x7f2acf561d60 0x1 0x55f3d9635290 0x0 0x0 0x7ffc7f5e2d68 0x7f2acfb162ad", SyscallInfo(False, 0, False)),
    ],
)
def test_syscall_literals(text, expected):
    assert parse_syscall(text) == expected


@pytest.mark.parametrize("text", ["", "\n", "walking", "-2 0x1 0x2", "0x202 0x1"])
def test_malformed_syscall_raises_value_error(text):
    with pytest.raises(ValueError):
        parse_syscall(text)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("futex_do_wait", "futex_do_wait"),
        ("hrtimer_nanosleep\n", "hrtimer_nanosleep"),
        ("poll_schedule_timeout.constprop.0", "poll_schedule_timeout.constprop.0"),
        ("0", None),
        ("", None),
    ],
)
def test_wchan(text, expected):
    assert parse_wchan(text) == expected


# ---------------------------------------------------------------- cmdline
@pytest.mark.parametrize(
    "raw, expected",
    [
        (
            b"python3\x00-m\x00vllm.entrypoints.openai.api_server\x00--port\x008000\x00",
            ("python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000"),
        ),
        (b"VLLM::EngineCore\x00\x00\x00", ("VLLM::EngineCore",)),  # setproctitle padding
        (b"VLLM::Worker_TP0 some words\x00", ("VLLM::Worker_TP0 some words",)),
        (b"python3\x00\x00--flag\x00", ("python3", "", "--flag")),  # an empty arg in the middle
        (b"no-trailing-nul", ("no-trailing-nul",)),
        (b"", ()),  # zombie, kernel thread
        (b"caf\xc3\xa9\x00bad\xff\x00", ("café", "bad\ufffd")),
    ],
)
def test_cmdline(raw, expected):
    assert parse_cmdline(raw) == expected


# ---------------------------------------------------------------- net/tcp
NET_TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:075B 00000000:0000 0A 00000000:00000000 00:00000000 00000000   105        0 5474 1 00000000664cb0ff 100 0 0 10 0
   1: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 9001 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F40 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 9100 1 0000000000000000 20 4 30 10 -1
   3: garbage line
"""

NET_TCP6 = """  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1111 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000   106        0 4010 1 00000000a651f5c4 100 0 0 10 0
   1: 00000000000000000000000000000000:1F41 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 9002 1 0000000000000000 100 0 0 10 0
"""


def test_net_tcp_ipv4_rows_with_header_and_garbage_skipped():
    assert parse_net_tcp(NET_TCP) == [
        SocketEntry("127.0.0.1", 1883, 0x0A, 5474),
        SocketEntry("0.0.0.0", 8000, 0x0A, 9001),
        SocketEntry("127.0.0.1", 8000, 0x01, 9100),
    ]


def test_net_tcp6_addresses_are_32_bit_words_in_host_order():
    assert parse_net_tcp(NET_TCP6) == [
        SocketEntry("::1", 4369, 0x0A, 4010),
        SocketEntry("::", 8001, 0x0A, 9002),
    ]


def test_net_tcp_listening_flag():
    assert [e.listening for e in parse_net_tcp(NET_TCP)] == [True, True, False]


@pytest.mark.parametrize("text", [NET_TCP, NET_TCP6, NET_TCP + "\n".join(NET_TCP6.splitlines()[1:])])
def test_listening_sockets_are_the_listening_rows_of_the_full_parse(text):
    full = [(e.local_ip, e.local_port, e.inode) for e in parse_net_tcp(text) if e.listening]
    assert [(s.address, s.port, s.inode) for s in parse_listening_sockets(text)] == full


def test_listening_sockets_keep_address_and_family():
    """127.0.0.1:1883 and 0.0.0.0:8000 (IPv4), ::1:4369 and :::8001 (IPv6): what decides who serves a URL."""
    text = NET_TCP + "\n".join(NET_TCP6.splitlines()[1:])
    assert parse_listening_sockets(text) == [
        Listener("127.0.0.1", 1883, 5474),
        Listener("0.0.0.0", 8000, 9001),
        Listener("::1", 4369, 4010),
        Listener("::", 8001, 9002),
    ]
    assert [s.ipv6 for s in parse_listening_sockets(text)] == [False, False, True, True]


def test_listening_sockets_skip_other_states_and_malformed_rows():
    text = NET_TCP + (
        "   4: 0100007F:1F40 0100007F:D2F0 06 0 0 0 0 0 77 1\n"  # TIME_WAIT
        "   5: 0100007F:1F40 0A\n"  # truncated
        "   6: 0100007F:FFFFF 00000000:0000 0A 0 0 0 0 0 78 1\n"  # port past 65535
        "   7: 01007F:1F40 00000000:0000 0A 0 0 0 0 0 79 1\n"  # address of 3 bytes
        "   8: 0100007G:1F40 00000000:0000 0A 0 0 0 0 0 80 1\n"  # not hex
    )
    assert [(s.port, s.inode) for s in parse_listening_sockets(text)] == [(1883, 5474), (8000, 9001)]


def test_listening_sockets_on_a_big_endian_host():
    line = "   0: 7F000002:1F40 00000000:0000 0A 0 0 0 0 0 77 1\n"
    assert parse_listening_sockets(line, byteorder="big") == [Listener("127.0.0.2", 8000, 77)]


def test_net_tcp_big_endian_host():
    line = NET_TCP.splitlines()[0] + "\n   0: 7F000001:1F40 00000000:0000 0A 0 0 0 0 0 77 1\n"
    assert parse_net_tcp(line, byteorder="big") == [SocketEntry("127.0.0.1", 8000, 0x0A, 77)]


@pytest.mark.parametrize(
    "text",
    [
        "",
        NET_TCP.splitlines()[0],
        "   0: 0100007F:ZZZZ 00000000:0000 0A 0 0 0 0 0 5 1",  # bad port
        "   0: 01007F:1F40 00000000:0000 0A 0 0 0 0 0 5 1",  # bad address length
        "   0: 0100007F:1F40 00000000:0000 0A 0 0 0 0 0 notanint 1",
        "   0: 0100007F:1F40 00000000:0000 0A",  # truncated
    ],
)
def test_net_tcp_without_valid_rows_is_empty(text):
    assert parse_net_tcp(text) == []


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2868000000 139000000 312\n", (2868000000, 139000000, 312)),
        ("0 0 0", (0, 0, 0)),
    ],
)
def test_schedstat_is_run_ns_wait_ns_timeslices(text, expected):
    from vllm_guardian.host.procfs_parse import parse_schedstat

    st = parse_schedstat(text)
    assert (st.run_ns, st.wait_ns, st.timeslices) == expected


@pytest.mark.parametrize("text", ["", "12 34", "a b c"])
def test_malformed_schedstat_is_a_value_error(text):
    from vllm_guardian.host.procfs_parse import parse_schedstat

    with pytest.raises(ValueError):
        parse_schedstat(text)


_IO = "rchar: 323934931\nwchar: 323929600\nsyscr: 632687\nsyscw: 632675\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n"


@pytest.mark.parametrize(
    "text, expected",
    [
        (_IO, (632687, 632675, 1265362)),
        ("syscw: 0\nsyscr: 7", (7, 0, 7)),
    ],
)
def test_io_is_syscalls_read_and_written(text, expected):
    from vllm_guardian.host.procfs_parse import parse_io

    io = parse_io(text)
    assert (io.syscr, io.syscw, io.syscalls) == expected


@pytest.mark.parametrize("text", ["", "rchar: 1\nwchar: 2\n", "syscr: x\nsyscw: 1\n", "syscr: 3\n"])
def test_malformed_io_is_a_value_error(text):
    from vllm_guardian.host.procfs_parse import parse_io

    with pytest.raises(ValueError):
        parse_io(text)
