"""One reader of "host:port" addresses (config and the HTTP listener), ports 1..65535."""

import socket

import pytest

from vllm_guardian.netaddr import free_port, is_hostport, parse_hostport


@pytest.mark.parametrize(
    "text, expected",
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("0.0.0.0:1", ("0.0.0.0", 1)),
        ("[::1]:9464", ("::1", 9464)),
        ("localhost:65535", ("localhost", 65535)),
    ],
)
def test_an_address_reads_as_host_and_port(text, expected):
    assert parse_hostport(text) == expected and is_hostport(text)


@pytest.mark.parametrize("text", ["9464", ":9464", "host:", "host:port", "host:70000", "host:0", "[]:80", ""])
def test_what_is_not_an_address_is_refused_with_the_text(text):
    with pytest.raises(ValueError, match="host:port"):
        parse_hostport(text)
    assert not is_hostport(text)


def test_a_free_port_can_be_bound():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
