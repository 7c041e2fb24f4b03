"""The HTTP listener with a web config, on a real socket with real TLS: certificates made in the
test (tests/support/certs.py), real bcrypt hashes, real clients (urllib over ssl, raw sockets).

TLS and basic auth the node_exporter way: the right certificate and user are served; a wrong or
missing password is 401 with a Basic challenge; plaintext to the TLS port, no client certificate
where one is required, or one signed by a stranger fails the handshake; a reload swaps the users
and the certificate, a corrupt file on reload keeps the running web config; a slow or silent TLS
client holds only its own slot, within the per-request deadline. Every refusal is counted."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.certs import Pki, bcrypt_hash, write_web_config
from tests.support.wait import poll
from vllm_guardian.surface.exporter import build_registry
from vllm_guardian.surface.http_listener import HttpListener, LastTick
from vllm_guardian.surface.status_snapshot import StatusSnapshot
from vllm_guardian.surface.web_security import WebSecurity
from vllm_guardian.testing.clock import FakeClock

PASSWORD = "correct horse"
STATUS = {"node": "n1", "version": "0.1.0", "targets": [{"name": "llama", "phase": "serving", "serving": True}]}


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("pki"))


class Guarded:
    """A listener on 127.0.0.1:0 serving with the web config of ``path``."""

    def __init__(self, path: Path, **limits: float) -> None:
        self.clock = FakeClock()
        self.beat = LastTick(self.clock.monotonic)
        self.beat.beat()
        self.security = WebSecurity(str(path))
        self.api = HttpListener(
            ("127.0.0.1", 0),
            registry=build_registry(lambda: StatusSnapshot.from_dict(STATUS)),
            status=lambda: StatusSnapshot.from_dict(STATUS),
            tick_age=self.beat.age,
            max_tick_age=3.0,
            poll_interval=0.02,
            security=self.security,
            **limits,  # type: ignore[arg-type]
        )
        self.api.start()

    @property
    def port(self) -> int:
        return self.api.address[1]

    def url(self, path: str, scheme: str = "https") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def refused(self, reason: str) -> int:
        return self.api.counters.status_section().connections_refused[reason]

    def auth_failures(self, reason: str) -> int:
        return self.api.counters.status_section().auth_failures[reason]


def client_context(pki: Pki, cert: tuple[Path, Path] | None = None, **versions: ssl.TLSVersion) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert_file))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    for attr, v in versions.items():
        setattr(ctx, attr, v)
    return ctx


def get(
    url: str, ctx: ssl.SSLContext | None, user: str | None = None, password: str | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one real request; an HTTP error status is an answer too."""
    req = urllib.request.Request(url, method=method)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


@pytest.fixture
def tls_and_users(pki, tmp_path):
    """TLS with client certificates required, and one user."""
    path = write_web_config(
        tmp_path / "web.yml",
        {"tls_server_config": pki.require_client_certs(), "basic_auth_users": {"prom": bcrypt_hash(PASSWORD)}},
    )
    g = Guarded(path)
    yield g
    g.api.stop()


@pytest.fixture
def users_only(pki, tmp_path):
    """TLS without client certificates, one user."""
    path = write_web_config(
        tmp_path / "web.yml",
        {"tls_server_config": pki.tls_server_config(), "basic_auth_users": {"prom": bcrypt_hash(PASSWORD)}},
    )
    g = Guarded(path)
    yield g
    g.api.stop()


# ------------------------------------------------------------------ served
@pytest.mark.parametrize("path", ["/metrics", "/healthz", "/targets/llama/ready"])
def test_the_right_client_certificate_and_user_are_served(pki, tls_and_users, path):
    code, _, body = get(tls_and_users.url(path), client_context(pki, pki.client), "prom", PASSWORD)
    assert code == 200, body


def test_the_status_says_https_and_what_the_web_config_applies(tls_and_users):
    h = tls_and_users.api.counters.status_section()
    assert (h.scheme, h.web_config.applied) == (
        "https",
        "TLS (TLS12..TLS13, RequireAndVerifyClientCert), basic auth (1 users)",
    )


def test_a_verified_password_is_remembered_so_a_scrape_costs_no_bcrypt_round(pki, users_only):
    ctx = client_context(pki)
    for _ in range(3):
        assert get(users_only.url("/metrics"), ctx, "prom", PASSWORD)[0] == 200
    assert users_only.security.current.auth.rounds == 1


# ------------------------------------------------------------------ basic auth refused
@pytest.mark.parametrize(
    "user, password, reason",
    [
        (None, None, "no_credentials"),
        ("prom", "wrong", "bad_credentials"),
        ("nobody", PASSWORD, "bad_credentials"),
        ("prom", "", "bad_credentials"),
    ],
)
def test_no_or_wrong_credentials_are_401_with_a_basic_challenge_and_counted(pki, users_only, user, password, reason):
    code, headers, body = get(users_only.url("/metrics"), client_context(pki), user, password)
    assert (code, headers["www-authenticate"]) == (401, 'Basic realm="vllm-guardian", charset="UTF-8"')
    assert b"guardian_" not in body
    assert users_only.auth_failures(reason) == 1


@pytest.mark.parametrize("method, path", [("POST", "/metrics"), ("GET", "/nowhere"), ("HEAD", "/healthz")])
def test_authentication_comes_before_any_route_or_method(pki, users_only, method, path):
    code, headers, _ = get(users_only.url(path), client_context(pki), method=method)
    assert code == 401 and "www-authenticate" in headers


def test_a_malformed_authorization_header_is_401_without_a_bcrypt_round(pki, users_only):
    conn = socket.create_connection(("127.0.0.1", users_only.port), timeout=10)
    with client_context(pki).wrap_socket(conn, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET /metrics HTTP/1.0\r\nAuthorization: Basic !!not-base64!!\r\n\r\n")
        answer = tls.recv(4096)
    assert answer.startswith(b"HTTP/1.0 401")
    assert users_only.security.current.auth.rounds == 0


# ------------------------------------------------------------------ TLS refused
def refused_request(url: str, ctx: ssl.SSLContext | None) -> str:
    """What went wrong for a client the listener must refuse (the test fails if it was answered)."""
    try:
        code, _, _ = get(url, ctx, "prom", PASSWORD)
    except (urllib.error.URLError, ssl.SSLError, ConnectionError, OSError) as e:
        return type(e).__name__
    raise AssertionError(f"answered {code}")


def test_a_client_without_a_certificate_is_refused_when_one_is_required(pki, tls_and_users):
    refused_request(tls_and_users.url("/healthz"), client_context(pki))
    assert poll(lambda: tls_and_users.refused("tls_handshake") == 1, 10)


def test_a_client_certificate_a_stranger_ca_signed_is_refused(pki, tls_and_users):
    refused_request(tls_and_users.url("/healthz"), client_context(pki, pki.stranger))
    assert poll(lambda: tls_and_users.refused("tls_handshake") == 1, 10)


def test_plaintext_http_to_the_tls_port_fails_the_handshake(tls_and_users):
    refused_request(tls_and_users.url("/healthz", scheme="http"), None)
    assert poll(lambda: tls_and_users.refused("tls_handshake") == 1, 10)


def test_a_tls_version_below_the_minimum_is_refused(pki, tmp_path):
    path = write_web_config(tmp_path / "web.yml", {"tls_server_config": pki.tls_server_config(min_version="TLS13")})
    g = Guarded(path)
    try:
        tls12 = client_context(pki, maximum_version=ssl.TLSVersion.TLSv1_2)
        refused_request(g.url("/healthz"), tls12)
        assert get(g.url("/healthz"), client_context(pki))[0] == 200
    finally:
        g.api.stop()


# ------------------------------------------------------------------ reload
def test_a_reload_swaps_the_user_set(pki, tmp_path):
    path = tmp_path / "web.yml"
    tls = pki.tls_server_config()
    write_web_config(path, {"tls_server_config": tls, "basic_auth_users": {"old": bcrypt_hash("one")}})
    g = Guarded(path)
    try:
        ctx = client_context(pki)
        assert get(g.url("/metrics"), ctx, "old", "one")[0] == 200
        write_web_config(path, {"tls_server_config": tls, "basic_auth_users": {"new": bcrypt_hash("two")}})
        assert g.security.reload() is True
        assert (get(g.url("/metrics"), ctx, "old", "one")[0], get(g.url("/metrics"), ctx, "new", "two")[0]) == (
            401,
            200,
        )
    finally:
        g.api.stop()


@pytest.mark.parametrize(
    "corrupt, problem",
    [
        ("tls_server_config: [unclosed\n", "YAML syntax error"),
        ("basic_auth_users: {prom: hunter2}\n", "basic_auth_users.prom: expected a bcrypt hash"),
        ("", "asks for neither TLS"),
        ("tls_server_config: {cert_file: /nonexistent.crt, key_file: /nonexistent.key}\n", "no such file"),
    ],
)
def test_a_corrupt_file_on_reload_keeps_serving_with_the_old_one(pki, users_only, corrupt, problem):
    Path(users_only.security.path).write_text(corrupt)
    assert users_only.security.reload() is False
    web = users_only.api.counters.status_section().web_config
    assert (web.reload_failures, web.last_reload_ok, problem in web.last_error) == (1, False, True)
    assert "hunter2" not in web.last_error  # a plaintext password put in by mistake is never quoted
    ctx = client_context(pki)
    assert (get(users_only.url("/metrics"), ctx, "prom", PASSWORD)[0], get(users_only.url("/metrics"), ctx)[0]) == (
        200,
        401,
    )


def test_a_rotated_certificate_is_served_once_its_file_changes(pki, tmp_path):
    cert, key = pki.ca.issue("guardian-rotating", server=True)
    path = write_web_config(tmp_path / "web.yml", {"tls_server_config": {"cert_file": str(cert), "key_file": str(key)}})
    g = Guarded(path)
    try:
        before = served_certificate(g.port)
        assert g.security.reload_if_changed() is None  # nothing changed: nothing re-read
        new_cert, new_key = pki.ca.issue("guardian-next", server=True)
        cert.write_bytes(new_cert.read_bytes())
        key.write_bytes(new_key.read_bytes())
        assert g.security.reload_if_changed() is True
        assert served_certificate(g.port) == new_cert.read_bytes() != before
    finally:
        g.api.stop()


def served_certificate(port: int) -> bytes:
    return ssl.get_server_certificate(("127.0.0.1", port)).encode()


# ------------------------------------------------------------------ clients that misbehave, under TLS
def test_a_silent_tls_client_is_closed_at_the_request_deadline(pki, tmp_path):
    path = write_web_config(tmp_path / "web.yml", {"tls_server_config": pki.tls_server_config()})
    g = Guarded(path, request_deadline=1.0)
    try:
        silent = socket.create_connection(("127.0.0.1", g.port), timeout=30)
        t0 = time.monotonic()
        assert silent.recv(1) == b""  # closed by the listener: no hello within the deadline
        held = time.monotonic() - t0
        silent.close()
        assert held < 20  # a handshake without a deadline would hold it until the 30 s client timeout
        assert poll(lambda: g.refused("tls_handshake") == 1, 10)
    finally:
        g.api.stop()


def test_a_tls_hello_trickled_a_byte_at_a_time_is_cut_at_the_whole_request_deadline(pki, tmp_path):
    path = write_web_config(tmp_path / "web.yml", {"tls_server_config": pki.tls_server_config()})
    g = Guarded(path, request_deadline=1.0)
    try:
        hello = client_hello(pki)
        sock = socket.create_connection(("127.0.0.1", g.port), timeout=10)
        t0 = time.monotonic()
        sent = 0
        try:
            for byte in hello:  # one byte every 0.2 s: each read is quick, the whole is not
                sock.sendall(bytes([byte]))
                sent += 1
                time.sleep(0.2)
        except OSError:
            pass
        held = time.monotonic() - t0
        sock.close()
        # cut near the 1 s deadline: a timeout per read would wait for the whole hello (~100 s), and
        # a handshake timeout of its own (30 s) would outlast the request's deadline
        assert sent < len(hello) and held < 10, (sent, held)
        assert poll(lambda: g.refused("tls_handshake") == 1, 10)
    finally:
        g.api.stop()


def client_hello(pki: Pki) -> bytes:
    """The first flight of a real TLS client (its ClientHello), captured from an in-memory handshake."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = client_context(pki).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def test_a_silent_tls_client_does_not_hold_up_the_next_one(pki, tmp_path):
    path = write_web_config(tmp_path / "web.yml", {"tls_server_config": pki.tls_server_config()})
    g = Guarded(path, request_deadline=60.0)  # far longer than the good client waits (10 s)
    silent = socket.create_connection(("127.0.0.1", g.port), timeout=10)
    try:  # its handshake waits on its own thread; the accept loop goes on
        assert get(g.url("/healthz"), client_context(pki))[0] == 200
        assert g.refused("evicted") == 0
    finally:
        silent.close()
        g.api.stop()


def test_silent_tls_clients_holding_every_slot_do_not_keep_a_good_client_out(pki, users_only):
    users_only.api.max_connections = 3
    hogs = [socket.create_connection(("127.0.0.1", users_only.port), timeout=10) for _ in range(3)]
    try:
        code, _, body = get(users_only.url("/healthz"), client_context(pki), "prom", PASSWORD)
        assert (code, json.loads(body)["ok"]) == (200, True)
        assert users_only.refused("evicted") >= 1
    finally:
        for h in hogs:
            h.close()


def test_each_refused_tls_connection_is_counted_once_evicted_or_failed_handshake(pki, users_only):
    users_only.api.max_connections = 3
    hogs = [socket.create_connection(("127.0.0.1", users_only.port), timeout=10) for _ in range(3)]
    assert get(users_only.url("/healthz"), client_context(pki), "prom", PASSWORD)[0] == 200  # evicts the oldest
    for h in hogs:
        h.close()  # the others end their handshake now: a failed one each

    def refused() -> int:
        return users_only.refused("evicted") + users_only.refused("tls_handshake")

    assert poll(lambda: refused() == 3, 10)
    time.sleep(0.5)  # a late double count would show here
    assert (refused(), users_only.refused("evicted") >= 1) == (3, True)
