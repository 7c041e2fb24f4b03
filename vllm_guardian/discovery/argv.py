"""What a process's command line says: is it a vLLM API server, and which port it names.

Pure helpers over argv tuples, used by discovery (``scan``). ``argv_port`` and
``argv_candidates`` are the fallback of ``match.port`` for an unprivileged guardian: it reads
which ports listen (``/proc/net/tcp`` is readable by anyone) but not which process holds a
socket when the process is another user's (``/proc/<pid>/fd`` answers EACCES). Then a vLLM API
server whose argv names the port (``--port N``, ``--port=N``, vLLM's default 8000 without
one) and whose fds the guardian cannot read is taken as the target, marked ``socket="argv"``:
its claim on the port is not verified, and remediation never restarts it on that word alone
(``remediation.decide``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

DEFAULT_PORT = 8000  # vLLM's, when ``vllm serve`` has no --port
_PY_OPTS_WITH_VALUE = ("-W", "-X", "-Q")
ARGV = "argv"  # Target.socket of a target matched by its command line alone
NOT_VERIFIED = (
    "port not verified: the guardian cannot read this process's sockets; "
    "run as root or with CAP_SYS_PTRACE/CAP_DAC_READ_SEARCH"
)
ASSUMED = "assumed"  # Target.socket: served through an IPv6 [::] socket whose IPV6_V6ONLY is unknown
V6ONLY_UNKNOWN = (
    "port not verified: its URL is served only by an IPv6 [::] socket whose IPV6_V6ONLY flag the "
    "kernel did not say (sock_diag refused); allow AF_NETLINK sockets"
)


def not_verified(socket: str) -> str:
    """Why a target whose port is not verified (``Target.port_verified``) is not restarted."""
    return V6ONLY_UNKNOWN if socket == ASSUMED else NOT_VERIFIED


def option_value(cmdline: Iterable[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` (the last one wins, as argparse does)."""
    args = list(cmdline)
    found: str | None = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(name + "="):
            found = arg[len(name) + 1 :]
    return found


def is_api_server(cmdline: tuple[str, ...]) -> bool:
    """``… vllm serve …``, ``python -m <…api_server> …`` or ``python …/…api_server.py …``."""
    for i, arg in enumerate(cmdline[:-1]):
        if os.path.basename(arg) == "vllm" and cmdline[i + 1] == "serve":
            return True
    if not cmdline or not os.path.basename(cmdline[0]).startswith("python"):
        return False
    i = 1
    while i < len(cmdline):
        arg = cmdline[i]
        if arg == "-m":
            return i + 1 < len(cmdline) and cmdline[i + 1].endswith("api_server")
        if arg.startswith("-m"):
            return arg[2:].endswith("api_server")
        if arg.startswith("-c"):
            return False
        if arg in _PY_OPTS_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return arg.endswith("api_server.py")  # the script
    return False


def argv_port(cmdline: Iterable[str]) -> int | None:
    """The port a vLLM API server's argv says it listens on (the last ``--port`` wins, as
    argparse does; 8000 without one); None for any other process, or a value vLLM would refuse."""
    args = tuple(cmdline)
    if not is_api_server(args):
        return None
    value = option_value(args, "--port")
    if value is None:
        return DEFAULT_PORT
    try:
        port = int(value)
    except ValueError:
        return None
    return port if 0 < port < 65536 else None


def argv_candidates(port: int, unreadable: Iterable[int], cmdlines: Mapping[int, tuple[str, ...]]) -> set[int]:
    """The processes that may hold ``port``'s listening socket by their argv: vLLM API servers
    naming the port among those whose fds the guardian cannot read (a readable process that
    does not hold the socket is known not to)."""
    return {pid for pid in unreadable if argv_port(cmdlines.get(pid, ())) == port}
