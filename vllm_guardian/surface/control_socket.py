"""The local control socket: a unix stream socket (mode 0660) answering one JSON
request per connection, e.g. ``{"cmd": "status"}`` → the latest status document.

It only reads the status the loop published (an immutable snapshot), so a slow
client can never stall the tick loop. Bounded against clients that misbehave as the HTTP
listener is (``surface/connection_slots.py``): a client has one deadline, ``read_timeout``
seconds from its connection, to send its whole request line (a client trickling a byte at a time
is cut there: a per-read timeout would let it hold its thread for ever), and at most
``max_clients`` connections are served at once. When they are all taken, the oldest one still
sending its request is cut for the newcomer (``evicted``), so trickling clients cannot keep the
operator out; when all are being answered, the newcomer is closed at once (``refused``: the
client sees the connection end). What was dropped is counted (``status_section``: the status's
``listeners.socket``).
"""

from __future__ import annotations

import io
import json
import os
import socket
import socketserver
import threading
import time
from typing import Any, Callable

from vllm_guardian.errors import GuardianError
from vllm_guardian.host.http import DeadlineReader
from vllm_guardian.surface.connection_slots import ConnectionCounts, ConnectionSlots

MAX_REQUEST = 64 * 1024
READ_TIMEOUT = 5.0
MAX_CLIENTS = 16


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def setup(self) -> None:
        super().setup()
        deadline = time.monotonic() + self.server.read_timeout
        self.rfile = io.BufferedReader(DeadlineReader(self.request, deadline, self.server.slots.timed_out))

    def handle(self) -> None:
        try:
            line = self.rfile.readline(MAX_REQUEST)
        except OSError:  # its deadline passed (counted), or it was cut for a newcomer
            return
        if not line:
            return  # the client closed (or was cut for a newcomer) before sending anything
        self.server.slots.answering(self.request)
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("request must be a JSON object")
            reply = self.server.dispatch(req)
        except GuardianError as e:  # said on purpose: the message is the answer
            reply = {"ok": False, "error": str(e)}
        except Exception as e:  # noqa: BLE001 - a bad request gets an error, never a crash
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        try:
            self.request.settimeout(self.server.read_timeout)  # the whole answer (sendall), however slow the reader
            self.wfile.write(json.dumps(reply, default=str).encode() + b"\n")
        except OSError:  # the client left, or reads too slowly: its answer is dropped
            pass


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    dispatch: Callable[[dict], Any]  # set by ControlSocket.start
    block_on_close = False
    read_timeout = READ_TIMEOUT
    slots: ConnectionSlots  # set by ControlSocket.start

    def process_request(self, request, client_address) -> None:
        if not self.slots.admit(request):
            self.shutdown_request(request)  # all being answered: this one is closed, not queued
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release(request)
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release(request)


class ControlSocket:
    def __init__(
        self,
        path: str,
        handlers: dict[str, Callable[[dict], Any]],
        *,
        read_timeout: float = READ_TIMEOUT,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        self.path = path
        self.read_timeout = read_timeout
        self.max_clients = max_clients
        self.handlers = handlers
        self.slots = ConnectionSlots(max_clients)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def status_section(self) -> ConnectionCounts:
        """Connections dropped so far, by reason."""
        return self.slots.counts()

    def start(self) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        if os.path.exists(self.path):
            if _alive(self.path):
                raise OSError(f"another guardian is listening on {self.path}")
            os.unlink(self.path)  # stale socket of a guardian that died
        server = _Server(self.path, _Handler)
        server.read_timeout = self.read_timeout
        server.slots = self.slots
        os.chmod(self.path, 0o660)
        server.dispatch = self._dispatch
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="guardian-api", daemon=True)
        self._thread.start()

    def _dispatch(self, req: dict) -> Any:
        cmd = req.get("cmd")
        handler = self.handlers.get(cmd) if isinstance(cmd, str) else None
        if handler is None:
            return {"ok": False, "error": f"unknown command {cmd!r} (known: {', '.join(sorted(self.handlers))})"}
        return {"ok": True, "result": handler(req)}

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


def _alive(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(0.5)
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def request(path: str, req: dict, timeout: float = 5.0) -> Any:
    """Client side: send one request, return ``result`` or raise ``OSError``/``RuntimeError``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall(json.dumps(req).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    reply = json.loads(buf)
    if not reply.get("ok"):
        raise RuntimeError(reply.get("error", "request failed"))
    return reply["result"]
