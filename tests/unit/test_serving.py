"""Which listening sockets serve an address: Linux's listener lookup, mirrored on data.

Each row is the sockets listening on one port (address, inode, IPV6_V6ONLY where it matters) and
the address a URL names; the answer is the inodes a connection to it may reach."""

from __future__ import annotations

import ipaddress

import pytest

from vllm_guardian.discovery.serving import served_by, show, url_address, v6only_matters
from vllm_guardian.host.procfs_parse import Listener

P = 8000


def sock(address: str, inode: int, v6only: bool | None = None) -> Listener:
    return Listener(address, P, inode, v6only)


V4 = ipaddress.ip_address("127.0.0.1")
V6 = ipaddress.ip_address("::1")

SERVED = [
    # (why, listeners, address, inodes served, assumed)
    ("a neighbour on another loopback address does not serve it", [sock("127.0.0.2", 1)], V4, set(), False),
    ("its own address serves it", [sock("127.0.0.2", 1), sock("127.0.0.1", 2)], V4, {2}, False),
    ("binding all serves it", [sock("0.0.0.0", 3)], V4, {3}, False),
    ("a specific bind before binding all", [sock("0.0.0.0", 3), sock("127.0.0.1", 2)], V4, {2}, False),
    ("IPv6-only [::] does not serve IPv4", [sock("::", 4, v6only=True)], V4, set(), False),
    ("dual-stack [::] serves IPv4", [sock("::", 5, v6only=False)], V4, {5}, False),
    ("IPv4 binding all before dual-stack [::]", [sock("::", 5, v6only=False), sock("0.0.0.0", 3)], V4, {3}, False),
    ("the v4-mapped address serves IPv4", [sock("::ffff:127.0.0.1", 6)], V4, {6}, False),
    ("IPv4 before the v4-mapped bind", [sock("::ffff:127.0.0.1", 6), sock("127.0.0.1", 2)], V4, {2}, False),
    ("SO_REUSEPORT: both share it", [sock("127.0.0.1", 2), sock("127.0.0.1", 7)], V4, {2, 7}, False),
    ("unknown-flag [::] while IPv4 serves: not it", [sock("::", 4), sock("0.0.0.0", 3)], V4, {3}, False),
    ("unknown-flag [::] alone: assumed", [sock("::", 4)], V4, {4}, True),
    ("unknown beside dual-stack [::]: both, assumed", [sock("::", 4), sock("::", 5, False)], V4, {4, 5}, True),
    ("IPv6: its own address", [sock("::", 4, True), sock("::1", 8)], V6, {8}, False),
    ("IPv6: [::] serves it, IPv6-only or not", [sock("::", 4, True)], V6, {4}, False),
    ("IPv6: IPv4 sockets never serve it", [sock("0.0.0.0", 3), sock("127.0.0.1", 2)], V6, set(), False),
    ("IPv6: another IPv6 address does not", [sock("::2", 9)], V6, set(), False),
    ("a name: every socket of the port may", [sock("127.0.0.2", 1), sock("::", 4, True)], None, {1, 4}, False),
    ("nothing listens", [], V4, set(), False),
]


@pytest.mark.parametrize("why, listeners, address, inodes, assumed", SERVED, ids=[row[0] for row in SERVED])
def test_served_by(why, listeners, address, inodes, assumed):
    served = served_by(listeners, address)
    assert ({s.inode for s in served.sockets}, served.assumed) == (inodes, assumed)


@pytest.mark.parametrize(
    "listeners, address, matters",
    [
        ([sock("::", 4)], V4, True),
        ([sock("::", 4), sock("0.0.0.0", 3)], V4, False),  # IPv4 wins whatever the flag
        ([sock("::", 4), sock("127.0.0.1", 2)], V4, False),
        ([sock("::", 4), sock("::ffff:127.0.0.1", 6)], V4, False),
        ([sock("::", 4, True)], V4, False),  # known already
        ([sock("::", 4)], V6, False),  # IPv6 is served either way
        ([sock("::1", 8)], V4, False),
    ],
)
def test_the_kernel_is_asked_for_the_flag_only_when_it_decides(listeners, address, matters):
    assert v6only_matters(listeners, address) is matters


@pytest.mark.parametrize(
    "host, expected",
    [
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("::ffff:127.0.0.1", "127.0.0.1"),  # the kernel routes it as IPv4
        ("fe80::1%eth0", "fe80::1"),
        ("localhost", None),  # a name is not resolved
        ("vllm.internal", None),
        ("", None),
        (None, None),
    ],
)
def test_url_address(host, expected):
    got = url_address(host)
    assert (str(got) if got is not None else None) == expected


@pytest.mark.parametrize("address, shown", [(V4, "127.0.0.1:8000"), (V6, "[::1]:8000"), (None, "port 8000")])
def test_show(address, shown):
    assert show(address, P) == shown
