"""Which of the sockets listening on a port serve a URL's address: the kernel's choice, mirrored.

Pure: reads the listening sockets of one port (``host.procfs_parse.Listener``: address, inode,
and for IPv6 the ``IPV6_V6ONLY`` flag when known) and the address a URL names, and decides which
of them a connection to that address reaches, as Linux's listener lookup does
(``__inet_lookup_listener``, ``inet6_lookup_listener``):

- the sockets bound to the address itself first, then those bound to all addresses
  (``0.0.0.0`` / ``::``); a socket bound to another address never serves it (``127.0.0.2:P``
  does not serve ``127.0.0.1:P``);
- for an IPv4 address, an IPv4 socket before an IPv6 one at the same rank; an IPv6 socket serves
  IPv4 only when it is dual-stack: bound to ``::`` without ``IPV6_V6ONLY``, or to the v4-mapped
  address itself; IPv4 sockets never serve an IPv6 address;
- several sockets left at the same rank (``SO_REUSEPORT``) share the connections: ``Served``
  holds them all, and the caller must not pick one of their owners over another.

A host that is a name (not an IP literal) is not resolved: every socket of the port may serve it.
An IPv6 ``::`` socket whose ``IPV6_V6ONLY`` flag is unknown (``host.sockdiag`` unavailable) is
taken *not* to serve an IPv4 address while anything else does; when nothing else does it is
taken to serve it, marked ``assumed`` (the caller does not let that act on its own).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from vllm_guardian.host.procfs_parse import Listener

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
AMBIGUOUS = "ambiguous: "  # how a refusal starts when separate process trees serve one address
LOOPBACK = ipaddress.IPv4Address("127.0.0.1")  # a ``port`` target's address when no api_url names one
_ANY4 = ipaddress.IPv4Address("0.0.0.0")
_ANY6 = ipaddress.IPv6Address("::")


def url_address(host: str | None) -> Address | None:
    """The IP a URL's host names (brackets and an IPv6 zone dropped; an IPv4-mapped IPv6 address
    is the IPv4 one, as the kernel routes it); None for a name."""
    if not host:
        return None
    try:
        ip = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def show(address: Address | None, port: int) -> str:
    """``127.0.0.1:8000``, ``[::1]:8000``; ``port 8000`` for a name."""
    if address is None:
        return f"port {port}"
    return f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"


@dataclass(frozen=True)
class Served:
    """The sockets a connection to the address may reach (several: they share it); ``assumed``:
    among them an IPv6 ``::`` socket of unknown ``IPV6_V6ONLY`` taken to serve an IPv4 address."""

    sockets: tuple[Listener, ...]
    assumed: bool = False


def _ip(sock: Listener) -> Address | None:
    try:
        return ipaddress.ip_address(sock.address)
    except ValueError:
        return None


def _v4_rank(socks: list[Listener]) -> tuple[Listener, ...]:
    """Of one rank: the IPv4 sockets if any (they score above IPv6 ones for IPv4), else all."""
    v4 = tuple(s for s in socks if not s.ipv6)
    return v4 or tuple(socks)


def v6only_matters(listeners: Iterable[Listener], address: Address | None) -> bool:
    """Would the ``IPV6_V6ONLY`` flag of an IPv6 ``::`` socket of unknown flag decide who serves
    ``address``? (An IPv4 address nothing else serves.) Only then is it worth asking the kernel."""
    socks = list(listeners)
    if not isinstance(address, ipaddress.IPv4Address):
        return False
    if any(_ip(s) in (address, _ANY4) and not s.ipv6 for s in socks):
        return False
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    if any(_ip(s) == mapped for s in socks):
        return False
    return any(s.ipv6 and _ip(s) == _ANY6 and s.v6only is None for s in socks)


def served_by(listeners: Iterable[Listener], address: Address | None) -> Served:
    """The sockets among ``listeners`` (all of one port) that serve ``address`` (module doc)."""
    socks = list(listeners)
    if address is None:
        return Served(tuple(socks))
    if isinstance(address, ipaddress.IPv6Address):
        for bound in (address, _ANY6):
            rank = tuple(s for s in socks if s.ipv6 and _ip(s) == bound)
            if rank:
                return Served(rank)
        return Served(())
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    specific = [s for s in socks if _ip(s) == (mapped if s.ipv6 else address)]
    if specific:
        return Served(_v4_rank(specific))
    wildcard4 = tuple(s for s in socks if not s.ipv6 and _ip(s) == _ANY4)
    if wildcard4:
        return Served(wildcard4)
    dual = tuple(s for s in socks if s.ipv6 and _ip(s) == _ANY6 and s.v6only is not True)
    return Served(dual, assumed=any(s.v6only is None for s in dual))
