"""Where an autodiscovered server is reached, and whether its sockets back its claim.

Reads a candidate's command line (``--host``/``--port``: only IP literals, of loopback or of this
node, are followed), this node's addresses (``node_addresses``, psutil) and, through the pass's
``Snapshot``, who holds the sockets serving its URL's address and port (the kernel's choice:
``discovery/serving.py``; not any socket on the port: a neighbour listening on ``127.0.0.2:P`` or
an IPv6-only ``[::]:P`` does not serve ``127.0.0.1:P``); decides the ownership and fallback rule
of autodiscovery: a candidate is followed only if its tree holds every socket serving its URL
(``owned``; ``assumed`` when that is an IPv6 ``[::]`` socket whose ``IPV6_V6ONLY`` the kernel
would not say), or while nothing listens on the port yet (``starting``), or, where the guardian
cannot read the fds of the processes involved, as ``unverified``; its URL served by a process
outside its tree (alone or beside it, ``SO_REUSEPORT``), or by nothing while the port listens
elsewhere, rules it out; of several candidates for one URL the owner (else the first started) wins.
"""

from __future__ import annotations

import ipaddress
from typing import Callable, Iterable

from vllm_guardian.discovery.argv import ASSUMED, DEFAULT_PORT, option_value
from vllm_guardian.discovery.serving import AMBIGUOUS, show, url_address
from vllm_guardian.discovery.snapshot import Snapshot
from vllm_guardian.errors import AccessDenied, ProbeFailed, TargetGone
from vllm_guardian.model import ProcKey

_ANY_HOSTS = ("", "0.0.0.0", "::", "[::]")


def server_port(cmdline: Iterable[str]) -> int:
    value = option_value(cmdline, "--port")
    try:
        port = int(value) if value is not None else DEFAULT_PORT
    except ValueError:
        return DEFAULT_PORT
    return port if 0 < port < 65536 else DEFAULT_PORT


def server_host(cmdline: Iterable[str]) -> str:
    """The host to reach the server on: the bind address, or loopback when it binds all. Only
    an IP literal is taken from a command line (any local user can start a "vLLM" whose
    ``--host`` names a machine elsewhere; a name would send the guardian's requests there)."""
    host = option_value(cmdline, "--host")
    if host is None or host in _ANY_HOSTS:
        return "127.0.0.1"
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return "127.0.0.1"
    return host.strip("[]")


def url_for(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def autodiscovered_host(cmdline: Iterable[str], local: Callable[[str], bool]) -> tuple[str | None, str]:
    """(host, "") to reach an autodiscovered server on, or (None, why) when its ``--host`` is
    not followed: only loopback, binding all, or an IP literal of this node (``local``) is; a
    name or another machine's address would send the guardian's requests (and the server's
    API key) wherever a process's argv says."""
    host = option_value(cmdline, "--host")
    if host is None or host in _ANY_HOSTS or host == "localhost":
        return "127.0.0.1", ""
    literal = host.strip("[]")
    try:
        ip = ipaddress.ip_address(literal)
    except ValueError:
        return None, f"--host {host[:64]!r} is a name, not an address of this node: not followed (configure a target)"
    if ip.is_loopback or local(str(ip)):
        return literal, ""
    return None, f"--host {literal} is not an address of this node: not followed (configure a target)"


def node_addresses() -> frozenset[str]:
    """Every IP address of this node's (or pod's) interfaces (psutil's getifaddrs)."""
    import socket

    import psutil

    out: set[str] = set()
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    out.add(str(ipaddress.ip_address(a.address.split("%", 1)[0])))
                except ValueError:
                    continue
    return frozenset(out)


def socket_state(snap: Snapshot, root: int, host: str, port: int) -> tuple[str, str]:
    """(state, why) of a candidate's claim on its URL ``host:port``: "owned" (its tree holds every
    socket serving that address: ``discovery.serving``), "assumed" (the same, through an IPv6
    ``[::]`` socket of unknown ``IPV6_V6ONLY``), "starting" (nothing listens on the port at any
    address yet), "unverified" (a socket serves it but neither its holder nor the candidate's fds
    can be read), or "" with why it is refused: the address is served by a process outside its
    tree, by its tree and another (ambiguous), or by nothing while the port listens elsewhere."""
    address = url_address(host)
    where = show(address, port)
    try:
        h = snap.holders(address, port)
    except (TargetGone, AccessDenied, ProbeFailed) as e:
        return "unverified", f"cannot read listening sockets: {e}"
    if not h.listening:
        return "starting", ""
    snap.others[root] = h.others
    if not h.serving:
        return "", f"no socket serves {where}; port {port} listens at other addresses only"
    tree = set(snap.tree(root))
    inside, outside = h.pids & tree, h.pids - tree
    if outside:
        holder = snap.topmost(set(outside))
        if inside:
            return "", f"{AMBIGUOUS}{where} is served by sockets of this process and of pid {holder} (SO_REUSEPORT)"
        return "", f"{where} is served by pid {holder}, not by this process or its children"
    if not h.unowned:
        return (ASSUMED if h.assumed else "owned"), ""
    if inside:
        return "", f"{AMBIGUOUS}{where} is served by sockets of this process and of a process the guardian cannot read"
    if snap.readable_fds(tree):
        return "", f"{where} is served by a process the guardian cannot read, not by this process or its children"
    return "unverified", ""


_RANK = {"owned": 0, ASSUMED: 1, "starting": 2, "unverified": 3}


def trusted(
    snap: Snapshot,
    roots: list[int],
    taken: set[str],
    ignored: list[tuple[ProcKey, str]],
    local_addresses: Callable[[], frozenset[str]],
) -> list[tuple[int, int, str, str]]:
    """The autodiscovery candidates followed, as (root, port, url, socket state), in start
    order: one per URL, its socket's owner first, else the first started; the rest land in
    ``ignored`` with why."""
    local_cache: list[frozenset[str]] = []

    def local(ip: str) -> bool:
        if not local_cache:
            try:
                local_cache.append(local_addresses())
            except Exception:  # noqa: BLE001 - no addresses known: only loopback is followed
                local_cache.append(frozenset())
        return ip in local_cache[0]

    best: dict[str, tuple[int, int, int, str]] = {}  # url -> (rank, root, port, state)
    for root in roots:
        cmdline = snap.procs[root].cmdline
        key = snap.procs[root].key
        host, why = autodiscovered_host(cmdline, local)
        if host is None:
            ignored.append((key, why))
            continue
        port = server_port(cmdline)
        url = url_for(host, port)
        if url in taken:
            ignored.append((key, f"{url} is already a configured target's"))
            continue
        state, why = socket_state(snap, root, host, port)
        if not state:
            ignored.append((key, why))
            continue
        held = best.get(url)
        if held is None or _RANK[state] < held[0]:
            if held is not None:
                ignored.append((snap.procs[held[1]].key, _second(url, root, state)))
            best[url] = (_RANK[state], root, port, state)
        else:
            ignored.append((key, _second(url, held[1], held[3])))
    chosen = sorted(best.items(), key=lambda kv: (snap.procs[kv[1][1]].key.starttime, kv[1][1]))
    return [(root, port, url, state) for url, (_rank, root, port, state) in chosen]


def _second(url: str, winner: int, state: str) -> str:
    why = "owns its listening socket" if state in ("owned", ASSUMED) else "started first"
    return f"another candidate for {url}: pid {winner} {why}"
