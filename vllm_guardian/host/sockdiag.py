"""sock_diag: whether the IPv6 sockets listening on a port are ``IPV6_V6ONLY``.

/proc/net/tcp6 shows a socket bound to ``[::]:P`` the same whether it also serves IPv4
(dual-stack) or not (``IPV6_V6ONLY``); the kernel's socket-diagnostics netlink interface
(``NETLINK_SOCK_DIAG``, what ``ss -e`` prints as ``v6only:``) says, for every listening socket,
without privilege. One dump of the AF_INET6 TCP sockets in LISTEN whose local port is ``port``
(a bytecode filter: the kernel walks its listening table only), in the guardian's network
namespace (the one its /proc/net/tcp6 shows). ``sock_diag(7)``; the constants are
``linux/inet_diag.h``'s and ``linux/netlink.h``'s.

The request and the answer are pure (``request``, ``parse_answer``: bytes in, frozen values out,
tested on literals); ``v6only_listeners`` does the one netlink exchange, bounded in time
(``TIMEOUT_S``) and size (``MAX_SOCKETS``, ``MAX_ANSWER_BYTES``).
"""

from __future__ import annotations

import errno
import socket
import struct
from dataclasses import dataclass

from vllm_guardian.errors import AccessDenied, ProbeFailed

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_REQ_BYTECODE = 1
INET_DIAG_SKV6ONLY = 11
INET_DIAG_BC_S_GE, INET_DIAG_BC_S_LE = 2, 3
TCP_LISTEN = 10

TIMEOUT_S = 1.0  # a local kernel answer; never a reason to hold discovery
MAX_SOCKETS = 1024  # listeners on one port read at most (the rest: unknown)
MAX_ANSWER_BYTES = 1 << 20

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_REQ = struct.Struct("=BBBxI")  # family, protocol, ext, pad, states
_SOCKID_PORTS = struct.Struct("!HH")  # sport, dport: network order
_SOCKID_LEN = 48  # ports 4, src 16, dst 16, if 4, cookie 8
_MSG_HEAD = struct.Struct("=BBBB")  # family, state, timer, retrans
_MSG_TAIL = struct.Struct("=IIIII")  # expires, rqueue, wqueue, uid, inode
_MSG_LEN = _MSG_HEAD.size + _SOCKID_LEN + _MSG_TAIL.size  # struct inet_diag_msg: 72
_RTA = struct.Struct("=HH")  # len, type
_BC_OP = struct.Struct("=BBH")  # code, yes, no


@dataclass(frozen=True)
class DiagListener:
    """One listening socket as sock_diag describes it."""

    family: int
    port: int
    inode: int
    v6only: bool | None  # None: the kernel sent no SKV6ONLY attribute


def _align(n: int) -> int:
    return (n + 3) & ~3


def _port_filter(port: int) -> bytes:
    """Bytecode: accept exactly local port ``port`` (S_GE and S_LE, known to every kernel with
    sock_diag; a jump past the end by 4 rejects)."""
    return (
        _BC_OP.pack(INET_DIAG_BC_S_GE, 8, 20)
        + _BC_OP.pack(0, 0, port)
        + _BC_OP.pack(INET_DIAG_BC_S_LE, 8, 12)
        + _BC_OP.pack(0, 0, port)
    )


def request(port: int, seq: int = 1, family: int = socket.AF_INET6) -> bytes:
    """The dump request for the TCP sockets of ``family`` listening on ``port``."""
    if not 0 < port < 65536:
        raise ValueError(f"sock_diag: port {port} out of range")
    body = _REQ.pack(family, socket.IPPROTO_TCP, 0, 1 << TCP_LISTEN) + bytes(_SOCKID_LEN)
    bytecode = _port_filter(port)
    attr = _RTA.pack(_RTA.size + len(bytecode), INET_DIAG_REQ_BYTECODE) + bytecode
    total = _NLMSGHDR.size + len(body) + len(attr)
    return _NLMSGHDR.pack(total, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body + attr


@dataclass(frozen=True)
class Answer:
    listeners: tuple[DiagListener, ...]
    done: bool  # NLMSG_DONE seen: the dump is complete
    error: int = 0  # errno of an NLMSG_ERROR (positive), 0 when none


def _listener(payload: bytes) -> DiagListener:
    family, _state, _timer, _retrans = _MSG_HEAD.unpack_from(payload, 0)
    sport, _dport = _SOCKID_PORTS.unpack_from(payload, _MSG_HEAD.size)
    *_, inode = _MSG_TAIL.unpack_from(payload, _MSG_HEAD.size + _SOCKID_LEN)
    v6only: bool | None = None
    at = _MSG_LEN
    while at + _RTA.size <= len(payload):
        length, kind = _RTA.unpack_from(payload, at)
        if length < _RTA.size or at + length > len(payload):
            raise ValueError(f"sock_diag: attribute of length {length} at {at} overruns its message")
        if kind == INET_DIAG_SKV6ONLY and length >= _RTA.size + 1:
            v6only = bool(payload[at + _RTA.size])
        at += _align(length)
    return DiagListener(family, sport, inode, v6only)


def parse_answer(data: bytes) -> Answer:
    """The listeners of one ``recv`` of a dump (several netlink messages); raises ``ValueError``
    on a message that does not fit (truncated, a length that overruns)."""
    out: list[DiagListener] = []
    at = 0
    while at + _NLMSGHDR.size <= len(data):
        length, kind, _flags, _seq, _pid = _NLMSGHDR.unpack_from(data, at)
        if length < _NLMSGHDR.size or at + length > len(data):
            raise ValueError(f"sock_diag: message of length {length} at {at} overruns the answer")
        payload = data[at + _NLMSGHDR.size : at + length]
        if kind == NLMSG_DONE:
            return Answer(tuple(out), True)
        if kind == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", payload, 0) if len(payload) >= 4 else (-errno.EIO,)
            return Answer(tuple(out), True, -code if code else 0)
        if kind == SOCK_DIAG_BY_FAMILY:
            if len(payload) < _MSG_LEN:
                raise ValueError(f"sock_diag: inet_diag_msg of {len(payload)} bytes (< {_MSG_LEN})")
            out.append(_listener(payload))
        at += _align(length)
    if at != len(data):
        raise ValueError(f"sock_diag: {len(data) - at} trailing bytes")
    return Answer(tuple(out), False)


def v6only_listeners(port: int) -> dict[int, bool]:
    """inode → ``IPV6_V6ONLY`` of the IPv6 TCP sockets listening on ``port`` in this network
    namespace. Raises ``AccessDenied`` (netlink refused: a seccomp or ``RestrictAddressFamilies=``
    without ``AF_NETLINK``) or ``ProbeFailed`` (no answer in ``TIMEOUT_S``, a malformed or
    oversized one, a kernel error)."""
    found: dict[int, bool] = {}
    seen = 0
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG) as nl:
            nl.settimeout(TIMEOUT_S)
            nl.sendall(request(port))
            while True:
                data = nl.recv(65536)
                seen += len(data)
                answer = parse_answer(data)
                for sock in answer.listeners:
                    if sock.port == port and sock.family == socket.AF_INET6 and sock.v6only is not None:
                        found[sock.inode] = sock.v6only
                if answer.error:
                    raise OSError(answer.error, f"sock_diag answered {errno.errorcode.get(answer.error, answer.error)}")
                if answer.done:
                    return found
                if not data or seen > MAX_ANSWER_BYTES or len(found) > MAX_SOCKETS:
                    raise ProbeFailed(f"sock_diag: answer past {MAX_ANSWER_BYTES} bytes or {MAX_SOCKETS} sockets")
    except PermissionError as e:
        raise AccessDenied(f"sock_diag: {e.strerror or e}") from e
    except (OSError, ValueError) as e:
        raise ProbeFailed(f"sock_diag: {e}") from e
