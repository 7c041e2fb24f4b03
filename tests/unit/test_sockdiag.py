"""sock_diag's request and answer, on bytes captured from a real kernel (Linux 6.18, x86-64:
netlink headers in host order, little-endian; ports in network order), and the ugly variants."""

from __future__ import annotations

import sys

import pytest

from vllm_guardian.host.sockdiag import Answer, DiagListener, parse_answer, request

pytestmark = pytest.mark.skipif(sys.byteorder != "little", reason="literals captured on a little-endian host")

# ss -ltne 'sport = :59985' showed two IPV6_V6ONLY sockets (SO_REUSEPORT) on [::]:59985, inodes 98976, 98977
TWO_V6ONLY = bytes.fromhex(
    "840000001400020001000000cd3800000a0a0000ea510000000000000000000000000000000000000000000000000000"
    "000000000000000000000000030000000000000000000000000000008000000000000000a08201000500080000000000"
    "05000b000100000008000f00000000000c00150001000000000000000600160012000000840000001400020001000000"
    "cd3800000a0a0000ea510000000000000000000000000000000000000000000000000000000000000000000000000000"
    "040000000000000000000000000000008000000000000000a1820100050008000000000005000b000100000008000f00"
    "000000000c00150001000000000000000600160012000000"
)
# a dual-stack socket on [::]:8001 (IPV6_V6ONLY 0), inode 99097
DUAL_STACK = bytes.fromhex(
    "840000001400020001000000843900000a0a00001f410000000000000000000000000000000000000000000000000000"
    "000000000000000000000000050000000000000000000000000000008000000000000000198301000500080000000000"
    "05000b000000000008000f00000000000c00150001000000000000000600160012000000"
)
DONE = bytes.fromhex("1400000003000200010000008439000000000000")
# the kernel refusing a request (an unknown family): NLMSG_ERROR, -EINVAL
ERROR = bytes.fromhex(
    "70000000020000000100000084390000eaffffff5c000000140001030100000000000000630600000004000000000000"
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000014000100"
    "020814000000411f03080c000000411f"
)


def test_the_request_dumps_listening_ipv6_tcp_sockets_of_one_port():
    assert request(59985).hex() == (
        "5c0000001400010301000000000000000a06000000040000" + "00" * 48 + "1400010002081400000051ea03080c00000051ea"
    )


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_a_request_for_no_port_is_refused(port):
    with pytest.raises(ValueError, match="out of range"):
        request(port)


@pytest.mark.parametrize(
    "data, expected",
    [
        (
            TWO_V6ONLY,
            Answer((DiagListener(10, 59985, 98976, True), DiagListener(10, 59985, 98977, True)), done=False),
        ),
        (DUAL_STACK + DONE, Answer((DiagListener(10, 8001, 99097, False),), done=True)),
        (DONE, Answer((), done=True)),
        (ERROR, Answer((), done=True, error=22)),
        (b"", Answer((), done=False)),
    ],
    ids=["two-v6only", "dual-stack-then-done", "done", "error", "empty"],
)
def test_answers(data, expected):
    assert parse_answer(data) == expected


def with_attributes(attrs: bytes) -> bytes:
    """DUAL_STACK's message with its attributes replaced, its length fixed to match."""
    body = DUAL_STACK[4 : 16 + 72]
    return (4 + len(body) + len(attrs)).to_bytes(4, "little") + body + attrs


def test_a_socket_without_the_v6only_attribute_is_unknown():
    assert parse_answer(with_attributes(b"")).listeners == (DiagListener(10, 8001, 99097, None),)


@pytest.mark.parametrize(
    "data",
    [
        DUAL_STACK[:100],  # the message's length overruns what came
        b"\x08\x00\x00\x00" + DUAL_STACK[4:],  # a length shorter than a header
        with_attributes(b"\xff\x00\x0b\x00\x01\x00\x00\x00"),  # an attribute claiming 255 bytes of 8
        with_attributes(b"\x02\x00\x0b\x00"),  # an attribute shorter than its own header
        (16 + 40).to_bytes(4, "little") + DUAL_STACK[4 : 16 + 40],  # shorter than an inet_diag_msg
        DUAL_STACK + b"\x01\x02",  # trailing bytes
    ],
    ids=["truncated", "length-below-header", "attribute-overruns", "attribute-below-header", "short-msg", "trailing"],
)
def test_malformed_answers_are_a_value_error(data):
    with pytest.raises(ValueError, match="sock_diag"):
        parse_answer(data)
