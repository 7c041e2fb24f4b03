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

Bounded against clients that misbehave (``surface/connection_slots.py``, as the control socket):
each connection has one deadline for its whole request (``request_deadline``), so a client
trickling a byte at a time cannot hold a thread past it (a per-read timeout would let it hold one
forever); at most ``max_connections`` are open at once. When they are all taken, the oldest
connection still sending its request (open at least ``evict_after`` seconds) is cut for the new
one (``evicted``), so a flood of trickles cannot starve the kubelet's readiness probe or
Prometheus; when every open connection is being answered, the new one is closed unread
(``refused``).
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
from vllm_guardian.surface.connection_slots import ConnectionCounts, ConnectionSlots

if TYPE_CHECKING:
    from vllm_guardian.surface.status_snapshot import StatusSnapshot

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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    api: HttpListener  # set by HttpListener.start: what the handlers read

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.api.slots.admit(request):  # all being answered (or all just opened): it waits its turn
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.api.slots.release(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.api.slots.release(request)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "vllm-guardian"
    timeout = REQUEST_DEADLINE  # also bounds each write of the answer

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self.server.api.slots.answering(self.request)
        return ok

    def setup(self) -> None:
        super().setup()
        deadline = time.monotonic() + self.server.api.request_deadline
        self.rfile = io.BufferedReader(DeadlineReader(self.connection, deadline, self.server.api.slots.timed_out))

    # ---------------------------------------------------------------- methods
    def do_GET(self) -> None:
        self._route(send_body=True)

    def do_HEAD(self) -> None:
        self._route(send_body=False)

    def __getattr__(self, name: str) -> Any:
        # http.server answers 501 for a method without a do_X; this listener is read-only: 405
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
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
      ``evict_after``: age at which an open connection is cut for a new one when all are taken.
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
        self.slots = ConnectionSlots(max_connections, evict_after)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def refused(self) -> int:
        """Connections closed unread: max_connections open, all being answered."""
        return self.slots.counts().refused

    @property
    def evicted(self) -> int:
        """Connections cut to make room: still sending their request while all were taken."""
        return self.slots.counts().evicted

    def status_section(self) -> ConnectionCounts:
        return self.slots.counts()

    # ---------------------------------------------------------------- answers (pure of sockets)
    def healthz(self) -> tuple[int, dict[str, Any]]:
        age = self.tick_age()
        ok = age is not None and age < self.max_tick_age
        doc: dict[str, Any] = {
            "ok": ok,
            "last_tick_age_s": None if age is None else round(age, 3),
            "max_age_s": self.max_tick_age,
        }
        if age is None:
            doc["reason"] = "no tick yet"
        elif not ok:
            doc["reason"] = "the main loop is not ticking"
        return (200 if ok else 503), doc

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
        self.slots = ConnectionSlots(self.max_connections, self.evict_after)  # (as set when started)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, args=(self.poll_interval,), name="guardian-http", daemon=True
        )
        self._thread.start()
        host, port = self.address
        self.log.info("http listener on %s:%d (/metrics, /healthz, /targets/<name>/ready)", host, port)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


__all__ = ["HttpListener", "LastTick"]
