"""The local control socket: a unix stream socket (mode 0660) answering one JSON
request per connection, e.g. ``{"cmd": "status"}`` → the latest status document.

It only reads the status the loop published (an immutable snapshot), so a slow
client can never stall the tick loop. A client has ``read_timeout`` seconds to send
its request line, and at most ``max_clients`` connections are served at once; one
more is closed at once (the client sees the connection end), so idle or hostile
clients cannot pile up threads.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
from typing import Any, Callable

from vllm_guardian.errors import GuardianError

MAX_REQUEST = 64 * 1024
READ_TIMEOUT = 5.0
MAX_CLIENTS = 16


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def setup(self) -> None:
        self.request.settimeout(self.server.read_timeout)
        super().setup()

    def handle(self) -> None:
        try:
            line = self.rfile.readline(MAX_REQUEST)
        except OSError:  # no request within the read timeout: drop the client
            return
        try:
            req = json.loads(line or b"{}")
            if not isinstance(req, dict):
                raise ValueError("request must be a JSON object")
            reply = self.server.dispatch(req)
        except GuardianError as e:  # said on purpose: the message is the answer
            reply = {"ok": False, "error": str(e)}
        except Exception as e:  # noqa: BLE001 - a bad request gets an error, never a crash
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        self.wfile.write(json.dumps(reply, default=str).encode() + b"\n")


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    dispatch: Callable[[dict], Any]  # set by ControlSocket.start
    block_on_close = False
    read_timeout = READ_TIMEOUT

    def set_limits(self, read_timeout: float, max_clients: int) -> None:
        self.read_timeout = read_timeout
        self._slots = threading.BoundedSemaphore(max_clients)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # too many at once: this one is closed, not queued
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


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
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        if os.path.exists(self.path):
            if _alive(self.path):
                raise OSError(f"another guardian is listening on {self.path}")
            os.unlink(self.path)  # stale socket of a guardian that died
        server = _Server(self.path, _Handler)
        server.set_limits(self.read_timeout, self.max_clients)
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
