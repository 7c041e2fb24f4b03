"""Hostile Alertmanager answers: a real HTTP server on a real socket answers the guardian's
``POST /api/v2/alerts`` with a drip, a flood, a forged log line, a redirect, garbage and refusals.
Each is bounded (one deadline for the whole answer, at most 64 KiB read, 300 characters kept),
printable, and decides only retry / drop: nothing follows a redirect, nothing blocks the flusher."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import pytest

from vllm_guardian.sinks.alertmanager_client import MESSAGE_MAX, post_alerts
from vllm_guardian.sinks.alertmanager_sink import AlertmanagerSink
from tests.support.slow_drip import SlowDripServer
from tests.support.wait import poll
from tests.unit.test_events import OPENED
from tests.unit.test_alertmanager import opened

ALERT = [{"labels": {"alertname": "x"}, "startsAt": "2024-01-01T00:00:00Z"}]


class RawServer:
    """Accepts, reads the request, writes ``answer(request)`` verbatim, closes; counts requests."""

    def __init__(self, answer: Callable[[bytes], bytes]) -> None:
        self.answer = answer
        self.requests: list[bytes] = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    data = conn.recv(1 << 20)
                    self.requests.append(data)
                    conn.sendall(self.answer(data))
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def http(status: str, body: bytes = b"", headers: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode() + body


@pytest.fixture
def serve():
    servers: list[RawServer] = []

    def start(answer: Callable[[bytes], bytes]) -> RawServer:
        servers.append(RawServer(answer))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.mark.parametrize(
    "answer, result",
    [
        (http("200 OK"), "sent"),
        (http("400 Bad Request", b'{"code":400,"message":"bad"}'), "rejected"),
        (http("429 Too Many Requests"), "retry"),
        (http("503 Service Unavailable"), "retry"),
        (b"NOT HTTP AT ALL\r\n\r\n", "retry"),
        (b"", "retry"),
    ],
    ids=["ok", "refused", "rate-limited", "down", "garbage", "closed"],
)
def test_only_the_status_code_decides(serve, answer, result):
    assert post_alerts(serve(lambda _req: answer).url, ALERT, 2.0).result == result


def test_a_flood_is_read_to_64_kib_and_kept_to_a_short_printable_line(serve):
    flood = b"\x1b[31m\nlevel=error msg=forged\n" + b"A" * (8 << 20)
    out = post_alerts(serve(lambda _req: http("500 Internal Server Error", flood)).url, ALERT, 5.0)
    assert out.result == "retry"
    assert len(out.detail) <= MESSAGE_MAX + 64 and "\n" not in out.detail and "\x1b" not in out.detail


def test_a_redirect_is_not_followed(serve):
    elsewhere = serve(lambda _req: http("200 OK"))
    hostile = serve(lambda _req: http("307 Temporary Redirect", headers=f"Location: {elsewhere.url}/api/v2/alerts\r\n"))
    assert post_alerts(hostile.url, ALERT, 2.0).result == "retry"
    assert elsewhere.requests == []


def test_a_dripping_server_cannot_hold_the_post_past_its_deadline():
    drip = SlowDripServer(interval=0.2, duration=30)
    try:
        started = time.monotonic()
        out = post_alerts(drip.url, ALERT, 1.0)
        assert out.result == "retry"
        assert time.monotonic() - started < 10  # the drip lasts 30 s: only the deadline ended it
    finally:
        drip.close()


def test_a_hostile_instance_holds_back_neither_the_other_nor_the_spool(serve, tmp_path):
    good = serve(lambda _req: http("200 OK"))
    drip = SlowDripServer(interval=0.2, duration=30)
    sink = AlertmanagerSink(
        (drip.url, good.url),
        tmp_path,
        max_events=4,
        max_bytes=1 << 20,
        resend_interval=60,
        timeout=0.5,
        wall=lambda: OPENED + 1,
        start=False,
    )
    try:
        for _ in range(6):  # more than the spool holds: the oldest are dropped and counted
            sink.publish(opened())
        sink.start()
        assert poll(lambda: sink.status_section().instances[1].sent_total == 4, 10)
        assert sink.status_section().instances[1].spooled == 0
        assert poll(lambda: sink.status_section().instances[0].failures_total >= 1, 10)
        hostile = sink.status_section().instances[0]
        assert not hostile.up and hostile.spooled == 4 and hostile.dropped_total == 2
    finally:
        sink.close()
        drip.close()
