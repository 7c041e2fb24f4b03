"""sd_notify client against a real unix datagram socket standing in for systemd."""

from __future__ import annotations

import os
import socket
import uuid

import pytest

from vllm_guardian.surface.sdnotify import SdNotify, parse_address, parse_watchdog


class FakeSystemd:
    """A bound datagram socket, like the one systemd passes in NOTIFY_SOCKET."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(5)

    def receive(self) -> list[str]:
        return self.sock.recv(4096).decode().split("\n")

    def pending(self) -> bool:
        self.sock.setblocking(False)
        try:
            self.sock.recv(4096)
            return True
        except BlockingIOError:
            return False
        finally:
            self.sock.settimeout(5)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def systemd(tmp_path):
    path = str(tmp_path / "notify.sock")
    fake = FakeSystemd(path)
    yield fake, path
    fake.close()


# ------------------------------------------------------------------ messages
@pytest.mark.parametrize(
    "call, expected",
    [
        (lambda n: n.ready(), ["READY=1"]),
        (lambda n: n.ready("watching 2 targets"), ["READY=1", "STATUS=watching 2 targets"]),
        (lambda n: n.watchdog(), ["WATCHDOG=1"]),
        (lambda n: n.stopping(), ["STOPPING=1"]),
        (lambda n: n.status("2 targets,\n1 incident"), ["STATUS=2 targets, 1 incident"]),
        (lambda n: n.notify("EXTEND_TIMEOUT_USEC=5000000"), ["EXTEND_TIMEOUT_USEC=5000000"]),
    ],
)
def test_each_call_sends_one_datagram(systemd, call, expected):
    fake, path = systemd
    assert call(SdNotify({"NOTIFY_SOCKET": path})) is True
    assert fake.receive() == expected


def test_an_abstract_socket_is_reached_through_the_at_sign():
    name = f"guardian-test-{uuid.uuid4().hex}"
    fake = FakeSystemd("\0" + name)
    try:
        assert SdNotify({"NOTIFY_SOCKET": "@" + name}).ready() is True
        assert fake.receive() == ["READY=1"]
    finally:
        fake.close()


def test_after_tick_sends_ready_once_then_only_watchdog(systemd):
    fake, path = systemd
    n = SdNotify({"NOTIFY_SOCKET": path})
    for _ in range(3):
        n.after_tick("ok")
    assert [fake.receive() for _ in range(4)] == [
        ["READY=1", "STATUS=ok"],
        ["WATCHDOG=1"],
        ["WATCHDOG=1"],
        ["WATCHDOG=1"],
    ]
    assert not fake.pending()


# ------------------------------------------------------------------ no systemd
@pytest.mark.parametrize(
    "env", [{}, {"NOTIFY_SOCKET": ""}, {"NOTIFY_SOCKET": "vsock:2:1234"}, {"NOTIFY_SOCKET": "relative/path"}]
)
def test_without_a_usable_notify_socket_every_call_is_a_no_op(env):
    n = SdNotify(env)
    assert (n.enabled, n.ready(), n.watchdog(), n.stopping(), n.status("x")) == (False, False, False, False, False)


def test_a_socket_that_went_away_is_reported_not_raised(tmp_path):
    path = str(tmp_path / "gone.sock")
    fake = FakeSystemd(path)
    fake.close()
    os.unlink(path)
    n = SdNotify({"NOTIFY_SOCKET": path})
    assert (n.enabled, n.watchdog()) == (True, False)


# ------------------------------------------------------------------ parsing
@pytest.mark.parametrize(
    "value, expected",
    [
        ("/run/systemd/notify", "/run/systemd/notify"),
        ("@guardian", "\0guardian"),
        ("@", None),
        ("", None),
        (None, None),
        ("vsock:2:1234", None),
        ("run/notify", None),
    ],
)
def test_parse_address(value, expected):
    assert parse_address(value) == expected


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"WATCHDOG_USEC": "30000000"}, 30.0),
        ({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": "42"}, 0.5),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "43"}, None),  # another process's watchdog
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "-5"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_parse_watchdog(env, expected):
    assert parse_watchdog(env, pid=42) == expected


def test_watchdog_interval_reads_the_environment_given():
    n = SdNotify({"WATCHDOG_USEC": "15000000", "WATCHDOG_PID": str(os.getpid())})
    assert n.watchdog_interval() == 15.0


def test_watchdog_interval_is_none_outside_systemd():
    assert SdNotify({}).watchdog_interval() is None
