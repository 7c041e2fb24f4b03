"""The read-only HTTP listener (docs/design.md, Operating surface): ``/metrics``, ``/healthz`` and per-target readiness.

Routes (GET, and HEAD for load-balancer checks; any other method is 405, any other path 404):

- ``GET /metrics`` — the exporter's registry in the Prometheus text format;
- ``GET /healthz`` — the guardian's *own* liveness: 200 while the main loop's last tick is
  younger than ``max_tick_age`` (3 × interval), else 503 (also before the first tick);
- ``GET /targets/<name>/ready`` — 200 when the target's status entry says it should take
  traffic (the status snapshot's ``serving``), 503 when it should not (warming, incident, gone,
  draining), 404 when the guardian does not know the target. Body: JSON with the phase.

It reads only what the loop published (the status snapshot, the heartbeat), on its own
threads, so a slow client can never stall a tick. Every handler answers from memory.

Bounded against clients that misbehave: each connection has one deadline for its whole request
(``request_deadline``), so a client trickling a byte at a time cannot hold a thread past it (a
per-read timeout would let it hold one forever; one that runs out is counted ``timed_out``); at
most ``max_connections`` are open at once (the control socket's policy, ``surface/connection_slots.py``,
kept here in a TLS-aware form: a cut must reach the plain socket under a TLS one).
When they are all taken, the oldest connection still sending its request (open at least
``evict_after`` seconds) is cut for the new one (``evicted``): a request is read in
milliseconds and answered from memory, so the connections still sending are the trickles, and
a flood of them cannot starve the kubelet's readiness probe or Prometheus. When every open
connection is being answered, the new one is closed unread (``refused``).

With a web config (``api.web_config_file``; ``surface/web_security.py``), TLS and basic auth the
node_exporter way. The TLS handshake runs on the connection's own thread within the same
deadline, so a slow or silent TLS client holds only its own slot, and it counts as still sending
(it may be cut for a new connection); plaintext to the TLS port, or a client without the
certificate the web config requires, fails the handshake and is closed. Basic auth is checked
before any route: no or wrong credentials are answered 401 with ``WWW-Authenticate``. Each
refusal is counted by reason (``surface/http_stats.py``). A connection is served start to end by
the web config that was current when it was accepted (a reload swaps it for the next ones).
"""

from __future__ import annotations

import errno
import io
import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Callable, Mapping
from urllib.parse import unquote, urlsplit

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from vllm_guardian.errors import CannotStart, ConfigError
from vllm_guardian.host.http import DeadlineReader
from vllm_guardian.host.tls import finish_handshake, server_socket
from vllm_guardian.surface.connection_slots import ConnectionCounts
from vllm_guardian.surface.http_stats import HttpCounters
from vllm_guardian.surface.web_auth import Verdict

if TYPE_CHECKING:
    from vllm_guardian.surface.status_snapshot import StatusSnapshot
    from vllm_guardian.surface.web_security import ActiveWebConfig, WebSecurity

JSON = "application/json"


class LastTick:
    """When the main loop last finished a tick (monotonic), for ``/healthz``.

    ``beat()`` is called by the loop after every tick; ``age()`` from the HTTP threads.
    """

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._last: float | None = None

    def beat(self) -> None:
        self._last = self._monotonic()

    def age(self) -> float | None:
        last = self._last
        return None if last is None else max(0.0, self._monotonic() - last)


MAX_CONNECTIONS = 16  # Prometheus, a kubelet probe or two, a person: far below this
REQUEST_DEADLINE = 5.0  # seconds for a whole request: connect to the last byte of the answer
EVICT_AFTER = 0.0  # how long a connection still sending its request is safe from being cut


def healthz_answer(age: float | None, max_age: float) -> tuple[int, dict[str, Any]]:
    """``/healthz`` (and the control socket's ``healthz``): 200 while the loop's last tick is younger
    than ``max_age`` seconds, else 503 (also before the first tick: ``age`` None)."""
    ok = age is not None and age < max_age
    doc: dict[str, Any] = {"ok": ok, "last_tick_age_s": None if age is None else round(age, 3), "max_age_s": max_age}
    if age is None:
        doc["reason"] = "no tick yet"
    elif not ok:
        doc["reason"] = "the main loop is not ticking"
    return (200 if ok else 503), doc


BASIC_CHALLENGE = 'Basic realm="vllm-guardian", charset="UTF-8"'


class _Conn:
    """One accepted connection: its socket (the TLS one once wrapped), when it was accepted, the
    deadline of its whole request, and the web config it is served with."""

    __slots__ = ("sock", "peer", "since", "deadline", "web", "evicted")

    def __init__(self, sock: Any, peer: str, since: float, deadline: float) -> None:
        self.sock = sock
        self.peer = peer
        self.since = since
        self.deadline = deadline
        self.web: ActiveWebConfig | None = None
        self.evicted = False  # cut to make room: counted as such, not again as a failed handshake

    def cut(self) -> None:
        """Shut the connection down from another thread (its reads end at once). The plain
        socket's shutdown: ``SSLSocket.shutdown`` would drop its TLS object under the reader."""
        self.evicted = True
        try:
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass


def _peer(client_address: Any) -> str:
    return str(client_address[0]) if isinstance(client_address, tuple) and client_address else "?"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    api: HttpListener  # set by HttpListener.start: what the handlers read

    def server_activate(self) -> None:
        super().server_activate()
        self.lock = threading.Lock()
        # still sending its request (or its TLS handshake); a connection is forgotten (under the
        # lock) before its socket is closed, so a cut never reaches a closed one
        self.open: dict[int, _Conn] = {}
        self.answering: dict[int, _Conn] = {}  # its request was read: being answered

    def process_request(self, request: Any, client_address: Any) -> None:
        now = time.monotonic()
        api = self.api
        conn = _Conn(request, _peer(client_address), now, now + api.request_deadline)
        with self.lock:
            if len(self.open) + len(self.answering) >= api.max_connections:
                reading = [c for c in self.open.values() if now - c.since >= api.evict_after]
                if not reading:  # all being answered (or all just opened): this one waits its turn
                    api.counters.refuse("full", conn.peer, f"{api.max_connections} connections being answered")
                    self.shutdown_request(request)
                    return
                oldest = min(reading, key=lambda c: (c.since, id(c)))
                api.counters.refuse("evicted", oldest.peer, "still sending its request when all slots were taken")
                del self.open[id(oldest)]
                oldest.cut()  # still sending its request: a trickle; its thread ends at EOF
            self.open[id(conn)] = conn
        try:
            # its thread runs process_request_thread(conn, ...): the connection travels as the "request"
            super().process_request(conn, client_address)  # type: ignore[arg-type]
        except BaseException:
            self._forget(conn)
            raise

    def process_request_thread(self, conn: Any, client_address: Any) -> None:
        try:
            if self._secure(conn):
                _Handler(conn.sock, client_address, self, conn)
        except Exception:  # noqa: BLE001 - a client that misbehaves ends its own thread, never the listener
            self.handle_error(conn.sock, client_address)
        finally:
            self._forget(conn)  # first: no cut may reach the socket once it is closed
            self.shutdown_request(conn.sock)

    def _secure(self, conn: _Conn) -> bool:
        """The web config this connection is served with and, when it asks for TLS, the handshake
        (within the connection's deadline); False when the handshake failed (counted)."""
        security = self.api.security
        conn.web = web = security.current if security is not None else None
        if web is None or web.tls is None:
            return True
        with self.lock:  # wrapping detaches the plain socket: a cut must see the one that owns it
            conn.sock = server_socket(web.tls, conn.sock)
        try:
            finish_handshake(conn.sock, conn.deadline)
        except OSError as e:  # ssl.SSLError, TimeoutError: plaintext, no or a bad client certificate, too slow
            if not conn.evicted:
                why = "no TLS handshake within the request deadline" if isinstance(e, TimeoutError) else _why(e)
                self.api.counters.refuse("tls_handshake", conn.peer, why)
            return False
        return True

    def answering_now(self, conn: _Conn) -> None:
        """Its request was read: it is answered from memory and no longer counted as a trickle."""
        with self.lock:
            if self.open.pop(id(conn), None) is not None:
                self.answering[id(conn)] = conn

    def _forget(self, conn: _Conn) -> None:
        with self.lock:
            self.open.pop(id(conn), None)
            self.answering.pop(id(conn), None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.api.log.debug("http connection from %s ended in an error", _peer(client_address), exc_info=True)


def _why(e: OSError) -> str:
    reason = getattr(e, "reason", None)
    if reason:
        return f"TLS: {str(reason).replace('_', ' ').lower()}"
    return e.strerror or type(e).__name__


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "vllm-guardian"
    timeout = REQUEST_DEADLINE  # also bounds each write of the answer

    def __init__(self, request: Any, client_address: Any, server: _Server, conn: _Conn) -> None:
        self.conn = conn
        super().__init__(request, client_address, server)

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self.server.answering_now(self.conn)
        return ok

    def setup(self) -> None:
        super().setup()
        self.rfile = io.BufferedReader(DeadlineReader(self.connection, self.conn.deadline, self._timed_out))

    def _timed_out(self) -> None:
        self.server.api.counters.refuse("timed_out", self.conn.peer, "request not read whole within its deadline")

    def _allowed(self, send_body: bool) -> bool:
        """Basic auth, when the web config has users: True to go on; else the refusal is sent."""
        web = self.conn.web
        if web is None or web.auth is None:
            return True
        verdict = web.auth.check(self.headers.get("Authorization"), self.conn.deadline)
        if verdict is Verdict.OK:
            return True
        self.server.api.counters.unauthorized(verdict.value, self.conn.peer, urlsplit(self.path).path[:200])
        if verdict is Verdict.BUSY:
            self._reply(503, {"error": "busy checking credentials; retry"}, send_body, extra={"Retry-After": "1"})
        else:
            self._reply(401, {"error": "unauthorized"}, send_body, extra={"WWW-Authenticate": BASIC_CHALLENGE})
        return False

    # ---------------------------------------------------------------- methods
    def do_GET(self) -> None:
        if self._allowed(send_body=True):
            self._route(send_body=True)

    def do_HEAD(self) -> None:
        if self._allowed(send_body=False):
            self._route(send_body=False)

    def __getattr__(self, name: str) -> Any:
        # http.server answers 501 for a method without a do_X; this listener is read-only: 405
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        if not self._allowed(send_body=True):
            return
        self._reply(405, {"error": f"method {self.command} not allowed: read-only"}, True, extra={"Allow": "GET, HEAD"})

    # ---------------------------------------------------------------- routes
    def _route(self, send_body: bool) -> None:
        api = self.server.api
        path = urlsplit(self.path).path
        if path == "/metrics":
            try:
                body = generate_latest(api.registry)
            except Exception as e:  # a collector bug answers 500, never kills the thread
                api.log.exception("metrics collection failed")
                self._reply(500, {"error": f"{type(e).__name__}: {e}"}, send_body)
                return
            self._send(200, CONTENT_TYPE_LATEST, body, send_body)
        elif path == "/healthz":
            code, doc = api.healthz()
            self._reply(code, doc, send_body)
        elif path.startswith("/targets/") and path.endswith("/ready") and len(path) > len("/targets//ready"):
            name = unquote(path[len("/targets/") : -len("/ready")])
            if "/" in name:
                self._reply(404, {"error": "no such route"}, send_body)
                return
            code, doc = api.target_ready(name)
            self._reply(code, doc, send_body)
        else:
            self._reply(
                404, {"error": "no such route", "routes": ["/metrics", "/healthz", "/targets/<name>/ready"]}, send_body
            )

    # ---------------------------------------------------------------- replies
    def _reply(
        self, code: int, doc: Mapping[str, Any], send_body: bool, extra: Mapping[str, str] | None = None
    ) -> None:
        self._send(code, JSON, json.dumps(doc).encode() + b"\n", send_body, extra)

    def _send(
        self, code: int, ctype: str, body: bytes, send_body: bool, extra: Mapping[str, str] | None = None
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        self.server.api.log.debug("http %s " + format, self.client_address[0], *args)


class HttpListener:
    """The listener. ``start()`` binds and serves on a thread; ``stop()`` closes it.

    - ``address``: ``(host, port)`` to bind (``vllm_guardian.netaddr.parse_hostport`` reads the config's
      ``"host:port"``; port 0 = any free port, see ``address`` once started);
    - ``registry``: the exporter's ``CollectorRegistry`` (``exporter.build_registry``);
    - ``status``: returns the latest status snapshot (None before the first tick);
    - ``tick_age``: seconds since the loop's last tick, None before the first (``LastTick.age``);
    - ``max_tick_age``: ``/healthz`` turns 503 at or past this age (3 × interval);
    - ``poll_interval``: how often the serving thread checks for ``stop()`` (seconds);
    - ``max_connections``: open at once; ``request_deadline``: seconds for a whole request;
      ``evict_after``: age at which an open connection is cut for a new one when all are taken;
    - ``security``: the web config (TLS, basic auth) applied now; None: plain HTTP, no auth;
    - ``counters``: where refusals are counted (the daemon's status reads them); None: its own.
    """

    def __init__(
        self,
        address: tuple[str, int],
        *,
        registry: CollectorRegistry,
        status: Callable[[], StatusSnapshot | None],
        tick_age: Callable[[], float | None],
        max_tick_age: float,
        log: logging.Logger | None = None,
        poll_interval: float = 0.5,
        max_connections: int = MAX_CONNECTIONS,
        request_deadline: float = REQUEST_DEADLINE,
        evict_after: float = EVICT_AFTER,
        security: WebSecurity | None = None,
        counters: HttpCounters | None = None,
    ) -> None:
        self.host, self.port = address
        if max_tick_age <= 0:
            raise ConfigError([f"max_tick_age: expected > 0, got {max_tick_age}"])
        self.registry = registry
        self.status = status
        self.tick_age = tick_age
        self.max_tick_age = max_tick_age
        self.log = log or logging.getLogger("guardian.http")
        self.poll_interval = poll_interval
        self.max_connections = max_connections
        self.request_deadline = request_deadline
        self.evict_after = evict_after
        self.security = security
        self.counters = counters or HttpCounters(self.log, security)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def refused(self) -> int:
        """Connections closed unread: ``max_connections`` open, all being answered."""
        return self.counters.refused["full"]

    @property
    def evicted(self) -> int:
        """Connections cut to make room: still sending their request while all slots were taken."""
        return self.counters.refused["evicted"]

    def status_section(self) -> ConnectionCounts:
        """The status's ``listeners.http`` (the same counts as the control socket's)."""
        r = self.counters.refused
        return ConnectionCounts(r["full"], r["evicted"], r["timed_out"])

    # ---------------------------------------------------------------- answers (pure of sockets)
    def healthz(self) -> tuple[int, dict[str, Any]]:
        return healthz_answer(self.tick_age(), self.max_tick_age)

    def target_ready(self, name: str) -> tuple[int, dict[str, Any]]:
        snapshot = self.status()
        t = None if snapshot is None else snapshot.target(name)
        if t is None:
            return 404, {"target": name, "error": "unknown target"}
        return (200 if t.serving else 503), {"target": name, "ready": t.serving, "phase": t.phase}

    # ---------------------------------------------------------------- lifecycle
    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); the real port when bound to port 0."""
        if self._server is None:
            return self.host, self.port
        addr = self._server.server_address
        return str(addr[0]), int(addr[1])

    def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        server_cls = type("_BoundServer", (_Server,), {"address_family": family})
        try:
            server = server_cls((self.host, self.port), _Handler)
        except OSError as e:
            why = e.strerror or str(e)
            hint = (
                f"another process holds it (see `ss -ltnp 'sport = :{self.port}'`); "
                "stop it or set api.http to a free port"
                if e.errno == errno.EADDRINUSE
                else "check api.http (host:port; an address of this node, a port this user may bind)"
            )
            raise CannotStart(f"cannot listen on {self.host}:{self.port} (api.http): {why}; {hint}") from None
        server.api = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, args=(self.poll_interval,), name="guardian-http", daemon=True
        )
        self._thread.start()
        host, port = self.address
        self.counters.address = f"{host}:{port}"
        web = "" if self.security is None else f"; {self.security.current.config.summary()}"
        self.log.info("http listener on %s:%d (/metrics, /healthz, /targets/<name>/ready%s)", host, port, web)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


__all__ = ["HttpListener", "LastTick", "healthz_answer"]
