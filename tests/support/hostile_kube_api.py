"""A hostile Kubernetes API server on a real socket: each request gets the next answer of a script,
written raw, so an answer may be anything a compromised or broken server could send — a status
line that is not HTTP, a body dripped a byte at a time, JSON nested too deep, a redirect, a list
that never stops paging, a Status message carrying escape sequences or the caller's own token.

``HostileKubeApi(answers)``: ``answers`` is a list of ``Answer`` callables ``(request) -> None``
that write to ``request.out``; they are used in turn, round and round. ``seen`` records every
request (method, path, headers). ``url`` is ``http://127.0.0.1:<port>`` (``tls=(cert, key)``:
``https://``).
"""

from __future__ import annotations

import json
import socket
import socketserver
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    out: socket.socket = field(repr=False)

    def send(self, data: bytes) -> None:
        self.out.sendall(data)


Answer = Callable[[Request], None]


def raw(data: bytes) -> Answer:
    return lambda req: req.send(data)


def reply(code: int, body: Any, ctype: str = "application/json", headers: dict[str, str] | None = None) -> Answer:
    data = body if isinstance(body, bytes) else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
    head = f"HTTP/1.1 {code} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(data)}\r\nConnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    return raw(head.encode() + b"\r\n" + data)


def drip(head: bytes, every: float = 0.3, total: int = 100_000) -> Answer:
    """``head`` at once, then one byte every ``every`` seconds, ``total`` of them: a call that
    waits for all of them waits the better part of an hour."""

    def answer(req: Request) -> None:
        req.send(head)
        for _ in range(total):
            time.sleep(every)
            try:
                req.send(b" ")
            except OSError:
                return

    return answer


def status(code: int, message: str) -> Answer:
    return reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code})


def echo_token(code: int = 500) -> Answer:
    """A Status whose message quotes the Authorization header it was sent (a server that logs it back)."""

    def answer(req: Request) -> None:
        status(code, f"bad credentials {req.headers.get('authorization', '')}\x1b[2J\nFORGED: restart everything")(req)

    return answer


def pod_list(items: list[Any], more: str = "") -> Answer:
    return reply(200, {"kind": "PodList", "metadata": {"continue": more}, "items": items})


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(10)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            length = int(headers.get("content-length") or 0)
            while len(body) < length:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                body += chunk
            req = Request(method, path, headers, body, sock)
            self.server.record(req)
            self.server.next_answer()(req)
        except OSError:
            return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, answers: list[Answer], tls: ssl.SSLContext | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers = list(answers)
        self.tls = tls
        self.seen: list[Request] = []
        self._n = 0
        self._lock = threading.Lock()

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True)
        return sock, addr

    def record(self, req: Request) -> None:
        with self._lock:
            self.seen.append(req)

    def next_answer(self) -> Answer:
        with self._lock:
            answer = self.answers[self._n % len(self.answers)]
            self._n += 1
            return answer


class HostileKubeApi:
    def __init__(self, answers: list[Answer], tls: tuple[str, str] | None = None) -> None:
        ctx = None
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
        self._server = _Server(answers, ctx)
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def seen(self) -> list[Request]:
        return self._server.seen

    def script(self, answers: list[Answer]) -> None:
        with self._server._lock:
            self._server.answers, self._server._n = list(answers), 0

    def __enter__(self) -> HostileKubeApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
