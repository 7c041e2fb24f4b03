"""The read-only HTTP listener on a real socket (127.0.0.1:0): /metrics, /healthz, per-target
readiness, and nothing else (unknown paths 404, writes 405)."""

from __future__ import annotations

import http.client
import json

import pytest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from vllm_guardian.errors import ConfigError
from vllm_guardian.surface.exporter import DECLARED, build_registry
from vllm_guardian.surface.http_listener import HttpListener, LastTick
from vllm_guardian.surface.status_snapshot import StatusSnapshot
from vllm_guardian.testing.clock import FakeClock
import time

INTERVAL = 1.0


def status_doc() -> dict:
    def t(name, phase, **extra):
        return {
            "name": name,
            "phase": phase,
            "ready": phase == "serving",
            "serving": phase == "serving",
            "processes": [],
            **extra,
        }

    return {
        "node": "n1",
        "version": "0.1.0",
        "guardian": {"ticks": 5},
        "targets": [
            t("llama", "serving"),
            t("warm", "warming"),
            t("sick", "incident"),
            t("drained", "serving", serving=False),
            t("needs space", "serving"),
        ],
        "incidents": [],
    }


class Harness:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.heartbeat = LastTick(self.clock.monotonic)
        self.doc: dict | None = status_doc()
        self.api = HttpListener(
            ("127.0.0.1", 0),
            registry=build_registry(self.snapshot),
            status=self.snapshot,
            tick_age=self.heartbeat.age,
            max_tick_age=3 * INTERVAL,
            poll_interval=0.02,
        )

    def snapshot(self) -> StatusSnapshot | None:
        return None if self.doc is None else StatusSnapshot.from_dict(self.doc)

    def request(self, method: str, path: str) -> tuple[int, dict, bytes]:
        host, port = self.api.address
        conn = http.client.HTTPConnection(host, port, timeout=5)
        try:
            conn.request(method, path)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()


@pytest.fixture
def h():
    harness = Harness()
    harness.api.start()
    yield harness
    harness.api.stop()


# ------------------------------------------------------------------ /metrics
def test_metrics_serves_the_prometheus_text_format(h):
    code, headers, body = h.request("GET", "/metrics")
    assert code == 200
    assert headers["content-type"] == CONTENT_TYPE_LATEST
    assert headers["content-type"].startswith("text/plain;")


def test_metrics_exposes_every_declared_family(h):
    _, _, body = h.request("GET", "/metrics")
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    ours = {n for n in names if not n.startswith("process_")}  # process_*: prometheus-client's process collector
    assert ours == {s.name[: -len("_total")] if s.type == "counter" else s.name for s in DECLARED}
    assert {"process_cpu_seconds", "process_resident_memory_bytes"} <= names


def test_metrics_reflect_the_status_at_scrape_time(h):
    h.doc = {**h.doc, "guardian": {"ticks": 42}}
    _, _, body = h.request("GET", "/metrics")
    assert "guardian_ticks_total 42.0" in body.decode().splitlines()


def test_metrics_ignores_a_query_string(h):
    assert h.request("GET", "/metrics?debug=1")[0] == 200


# ------------------------------------------------------------------ /healthz
def test_healthz_is_503_before_the_first_tick(h):
    code, _, body = h.request("GET", "/healthz")
    assert (code, json.loads(body)["reason"]) == (503, "no tick yet")


@pytest.mark.parametrize("age, code", [(0.0, 200), (2.9, 200), (3.0, 503), (60.0, 503)])
def test_healthz_follows_the_age_of_the_last_tick(h, age, code):
    h.heartbeat.beat()
    h.clock.advance(age)
    status, _, body = h.request("GET", "/healthz")
    assert (status, json.loads(body)["ok"]) == (code, code == 200)


def test_healthz_recovers_when_the_loop_ticks_again(h):
    h.heartbeat.beat()
    h.clock.advance(10)
    assert h.request("GET", "/healthz")[0] == 503
    h.heartbeat.beat()
    assert h.request("GET", "/healthz")[0] == 200


# ------------------------------------------------------------------ readiness
@pytest.mark.parametrize(
    "path, code, phase",
    [
        ("/targets/llama/ready", 200, "serving"),
        ("/targets/warm/ready", 503, "warming"),
        ("/targets/sick/ready", 503, "incident"),
        ("/targets/drained/ready", 503, "serving"),  # the explicit serving field wins
        ("/targets/needs%20space/ready", 200, "serving"),
    ],
)
def test_target_readiness(h, path, code, phase):
    status, headers, body = h.request("GET", path)
    assert (status, headers["content-type"], json.loads(body)["phase"]) == (code, "application/json", phase)


def test_unknown_target_is_404(h):
    status, _, body = h.request("GET", "/targets/nope/ready")
    assert (status, json.loads(body)) == (404, {"target": "nope", "error": "unknown target"})


def test_readiness_follows_the_latest_status(h):
    assert h.request("GET", "/targets/llama/ready")[0] == 200
    h.doc = {**h.doc, "targets": [{"name": "llama", "phase": "incident"}]}
    assert h.request("GET", "/targets/llama/ready")[0] == 503


def test_readiness_before_the_first_tick_knows_no_target(h):
    h.doc = {}
    assert h.request("GET", "/targets/llama/ready")[0] == 404


def test_head_answers_the_status_without_a_body(h):
    status, headers, body = h.request("HEAD", "/targets/warm/ready")
    assert (status, body) == (503, b"")
    assert int(headers["content-length"]) > 0


# ------------------------------------------------------------------ nothing else
@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/metricsx",
        "/targets",
        "/targets//ready",
        "/targets/llama",
        "/targets/a/b/ready",
        "/targets/llama/ready/x",
        "/status",
    ],
)
def test_other_paths_are_404(h, path):
    assert h.request("GET", path)[0] == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "FOO"])
@pytest.mark.parametrize("path", ["/metrics", "/targets/llama/ready"])
def test_writes_are_405(h, method, path):
    status, headers, _ = h.request(method, path)
    assert (status, headers["allow"]) == (405, "GET, HEAD")


def test_a_failing_collector_answers_500_and_the_listener_survives(h):
    h.doc = None  # status() returning None is tolerated ...

    class Broken:
        def describe(self):
            return []

        def collect(self):
            raise RuntimeError("bug")

    h.api.registry.register(Broken())  # ... a collector that raises is answered with 500
    assert h.request("GET", "/metrics")[0] == 500
    assert h.request("GET", "/targets/llama/ready")[0] == 404


# ------------------------------------------------------------------ lifecycle and config
def test_stop_closes_the_port():
    harness = Harness()
    harness.api.start()
    host, port = harness.api.address
    assert port != 0
    harness.api.stop()
    with pytest.raises(OSError):
        http.client.HTTPConnection(host, port, timeout=2).connect()


def test_a_non_positive_max_tick_age_is_refused():
    with pytest.raises(ConfigError, match="max_tick_age"):
        HttpListener(
            ("127.0.0.1", 0),
            registry=build_registry(lambda: None),
            status=lambda: None,
            tick_age=lambda: 0.0,
            max_tick_age=0,
        )


# ------------------------------------------------------------------ clients that misbehave
def _trickle(address, stop_after: float) -> tuple[float, bytes]:
    """A client sending its request a byte every 0.2 s: how long the listener kept it, and what it said."""
    import socket
    import time

    sock = socket.create_connection(address, timeout=10)
    start = time.monotonic()
    got = b""
    try:
        for byte in b"GET /healthz HTTP/1.0\r\nX-Slow: " + b"a" * 1000:
            if time.monotonic() - start > stop_after:
                break
            sock.sendall(bytes([byte]))
            time.sleep(0.2)
        sock.settimeout(10)
        got = sock.recv(4096)
    except OSError:
        pass
    finally:
        sock.close()
    return time.monotonic() - start, got


def test_a_trickling_client_is_cut_off_at_the_whole_request_deadline_not_held_forever():
    harness = Harness()
    harness.api.request_deadline = 1.0
    harness.api.start()
    try:
        held, _ = _trickle(harness.api.address, stop_after=30)
        assert held < 15  # a per-read timeout (10 s) would have held it for the whole 1000-byte trickle (200 s)
    finally:
        harness.api.stop()


def test_when_slow_clients_hold_every_connection_the_oldest_still_sending_is_cut_and_healthz_answers():
    import socket

    harness = Harness()
    harness.api.max_connections = 2
    harness.api.start()
    harness.heartbeat.beat()
    hogs = [socket.create_connection(harness.api.address, timeout=5) for _ in range(2)]
    try:
        for hog in hogs:
            hog.sendall(b"GET /hea")  # and nothing more
        assert harness.request("GET", "/healthz")[0] == 200
        assert harness.api.evicted >= 1
    finally:
        for s in hogs:
            s.close()
        harness.api.stop()


def test_when_no_open_connection_may_be_cut_a_new_one_is_closed_unread():
    import socket

    harness = Harness()
    harness.api.max_connections = 1
    harness.api.evict_after = 60
    harness.api.start()
    hog = socket.create_connection(harness.api.address, timeout=5)
    try:
        deadline = time.monotonic() + 10
        while harness.api.refused == 0 and time.monotonic() < deadline:
            extra = socket.create_connection(harness.api.address, timeout=5)
            assert extra.recv(1) == b""
            extra.close()
        assert harness.api.refused >= 1
    finally:
        hog.close()
        harness.api.stop()
