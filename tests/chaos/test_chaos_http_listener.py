"""Hostile clients on the HTTP listener with TLS and basic auth on: a real ``guardian run`` (a web
config with a certificate made in the test and one bcrypt user, cost 10 as operators use) beside
a healthy simulated vLLM it could restart. For a few seconds, at once: silent TLS connections
that never say hello, a ClientHello trickled a byte at a time, plaintext HTTP to the TLS port,
TLS clients without credentials and with a fresh wrong password each time (each one a bcrypt
round). Then a SIGHUP with a corrupt web config, then a valid one with another user.

What must hold: bounded (the guardian's threads stay under its connection cap plus its own);
counted (``http.connections_refused`` and ``http.auth_failures`` in ``guardian status``, the
``guardian_http_*`` metrics); no wrong action (no drain, no stop, the same server serves); a good
client's ``/healthz`` and readiness still answer through the flood, ``guardian healthz`` and
``guardian status`` answer; the corrupt reload keeps the running web config (and says so), the
valid one swaps the users.
"""

from __future__ import annotations

import base64
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.certs import Pki, bcrypt_hash, write_web_config
from tests.support.guardian_process import GuardianProcess, command_restart, sims_on, sweep
from tests.support.wait import poll
from vllm_guardian.sim.control import SimServer, free_port

PASSWORD = "scrape-me"
FLOOD_SECONDS = 6.0
MAX_CONNECTIONS = 16  # the listener's cap (surface/http_listener.py)


def request(url: str, ctx: ssl.SSLContext, user: str | None, password: str | None, timeout: float = 10) -> int:
    """The status of one real request (an HTTP error status is an answer too)."""
    req = urllib.request.Request(url)
    if user is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


class Flood:
    """Attackers, each on its own thread until ``stop``: what each sent and got, counted."""

    def __init__(self, port: int, ctx: ssl.SSLContext) -> None:
        self.port, self.ctx = port, ctx
        self.sent: dict[str, int] = {"silent": 0, "plaintext": 0, "no_credentials": 0, "wrong_password": 0}
        self.answered_200 = 0  # an attacker served: must stay 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(kind,), daemon=True)
            for kind in ("silent", "silent", "plaintext", "no_credentials", "wrong_password", "wrong_password")
        ]

    def _loop(self, kind: str) -> None:
        held: list[socket.socket] = []
        url = f"https://127.0.0.1:{self.port}/metrics"
        while not self._stop.is_set():
            try:
                if kind == "silent":  # connect, never say hello: holds a slot until cut
                    held.append(socket.create_connection(("127.0.0.1", self.port), timeout=5))
                    held = held[-20:]
                elif kind == "plaintext":
                    with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                        if b" 200 " in s.recv(100):
                            self.answered_200 += 1
                elif kind == "no_credentials":
                    self.answered_200 += request(url, self.ctx, None, None, timeout=5) == 200
                else:
                    self.answered_200 += request(url, self.ctx, "prom", secrets.token_hex(8), timeout=5) == 200
                self.sent[kind] += 1
            except OSError:  # cut, refused, reset: what the listener is for
                self.sent[kind] += 1
            self._stop.wait(0.02)
        for s in held:
            s.close()

    def __enter__(self) -> Flood:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)


def trickle_hello(port: int, ctx: ssl.SSLContext, stop: threading.Event) -> None:
    """A real ClientHello, a byte every 0.2 s, again each time the listener cuts it."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = outgoing.read()
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                for byte in hello:
                    if stop.is_set():
                        return
                    s.sendall(bytes([byte]))
                    time.sleep(0.2)
        except OSError:
            pass


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_hostile_clients_on_the_tls_listener_are_bounded_counted_and_change_nothing(tmp_path):
    port, http_port = free_port(), free_port()
    pki = Pki.make(tmp_path / "pki")
    web = write_web_config(
        tmp_path / "web.yml",
        {"tls_server_config": pki.tls_server_config(), "basic_auth_users": {"prom": bcrypt_hash(PASSWORD, 10)}},
    )
    sim = SimServer(port=port, startup_delay=0.5).start()
    extra = {
        "targets": [command_restart(port, tmp_path)],
        "alerts": {"redis_url": "embedded"},
        "api": {"http": f"127.0.0.1:{http_port}", "web_config_file": str(web)},
    }
    g = GuardianProcess(tmp_path, port, extra=extra)
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert_file))
    base = f"https://127.0.0.1:{http_port}"
    try:
        sim.wait_ready(60)
        g.start()
        assert g.wait_ready(60), g.log_text()
        assert g.proc is not None
        assert request(f"{base}/healthz", ctx, "prom", PASSWORD) == 200  # a scraper known before the attack
        resting = threads_of(g.proc.pid)

        good: list[int | str] = []
        most_threads = resting
        stop_trickle = threading.Event()
        trickler = threading.Thread(target=trickle_hello, args=(http_port, ctx, stop_trickle), daemon=True)
        with Flood(http_port, ctx) as flood:
            trickler.start()
            t_end = time.monotonic() + FLOOD_SECONDS
            while time.monotonic() < t_end:
                for path in ("/healthz", "/targets/sim/ready"):
                    try:
                        good.append(request(base + path, ctx, "prom", PASSWORD))
                    except OSError as e:  # cut as the oldest still handshaking: a retry gets in
                        good.append(type(e).__name__)
                most_threads = max(most_threads, threads_of(g.proc.pid))
                time.sleep(0.1)
            healthz = subprocess.run(
                [sys.executable, "-m", "vllm_guardian.cli.main", "healthz", "-c", str(g.config_path)],
                capture_output=True,
                text=True,
                timeout=30,
            )
            during = g.status()
        stop_trickle.set()
        trickler.join(30)

        # the good client was served through the flood, and nothing else was
        served = [c for c in good if c == 200]
        assert len(served) >= 0.8 * len(good) and set(good) <= {200, "URLError", "SSLError", "ConnectionResetError"}, (
            good
        )
        assert flood.answered_200 == 0
        assert (healthz.returncode, '"ok": true' in healthz.stdout) == (0, True), healthz.stderr
        assert during is not None
        # bounded: a thread per open connection (and a few of its own workers), never one per attacker
        # (the silent attackers alone opened hundreds of connections)
        assert most_threads <= resting + MAX_CONNECTIONS + 8 < flood.sent["silent"], (resting, most_threads)
        # counted, by reason
        http = poll(
            lambda: (
                (st := g.status())
                and st["http"]["connections_refused"]["tls_handshake"] >= flood.sent["plaintext"] // 2
                and st["http"]
            ),
            20,
        )
        assert http, (g.status() or {}).get("http")
        assert http["connections_refused"]["evicted"] >= 1
        assert http["auth_failures"]["no_credentials"] >= 1
        assert (
            http["auth_failures"]["bad_credentials"] + http["auth_failures"]["busy"]
            >= flood.sent["wrong_password"] // 2
        )
        metrics = urllib.request.urlopen(
            urllib.request.Request(
                f"{base}/metrics",
                headers={"Authorization": "Basic " + base64.b64encode(f"prom:{PASSWORD}".encode()).decode()},
            ),
            context=ctx,
            timeout=10,
        ).read()
        assert b'guardian_http_connections_refused_total{reason="tls_handshake"}' in metrics
        assert b'guardian_http_auth_failures_total{reason="bad_credentials"}' in metrics
        assert g.log_text().count("refused by basic auth (bad_credentials)") == 1  # the first, not one per try

        # a corrupt web config on SIGHUP: refused loudly, the running one kept
        Path(web).write_text("basic_auth_users: {prom: not-a-hash}\ntls_server_config: [\n")
        os.kill(g.proc.pid, signal.SIGHUP)

        def refused_reload() -> dict | None:
            st = g.status()
            return st["http"]["web_config"] if st and not st["http"]["web_config"]["last_reload_ok"] else None

        refused = poll(refused_reload, 20)
        assert refused, g.log_text()
        assert "YAML syntax error" in refused["last_error"]
        assert "web config reload (SIGHUP) refused, the running web config is kept" in g.log_text()
        assert request(f"{base}/healthz", ctx, "prom", PASSWORD) == 200
        # a valid one with another user: applied without a signal (its file changed)
        write_web_config(
            web, {"tls_server_config": pki.tls_server_config(), "basic_auth_users": {"ops": bcrypt_hash("rotated", 4)}}
        )
        assert poll(lambda: request(f"{base}/healthz", ctx, "ops", "rotated") == 200, 30), g.log_text()
        assert request(f"{base}/healthz", ctx, "prom", PASSWORD) == 401

        # no wrong action: the same server serves, nothing drained, stopped or restarted
        t = g.require_target()
        assert t["serving"] and not (t.get("remediation") or {}).get("phase"), t.get("remediation")
        assert sims_on(port) == [sim.pid]
        for inc in g.incidents():
            assert not [a for a in inc["actions"] if a["name"] in ("drain", "stop", "start", "restart")], inc
    finally:
        g.stop()
        sim.stop()
        sweep(port)
