"""HTTP to the supervised servers, behind a seam: one GET/POST with a hard timeout.

The only module that opens TCP connections to vLLM; it keeps them alive between calls
(``StdlibHttpClient``). Errors come back as
``HttpError`` with a ``reason`` of ``refused`` (nothing listens: the server is
down or still loading), ``timeout`` (it accepted but did not answer in time: a
hang) or ``error`` (anything else), so callers can tell a dead server from a
hung one.

An error never quotes what was sent: http.client refuses a header value it cannot send (a key
with a newline) with a ValueError that quotes the value, so such errors are reported by type only.
"""

from __future__ import annotations

import http.client
import io
import json
import select
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol
from urllib.parse import urlsplit

from vllm_guardian.errors import ProbeFailed
from vllm_guardian.config.schema import MAX_BODY

KEEP_IDLE_S = 3.0  # a kept connection idle longer is closed, not reused (below uvicorn's 5 s keep-alive)
KEEP_PER_SERVER = 2  # kept connections per server (a scrape and a canary may overlap)


class HttpError(ProbeFailed):
    def __init__(self, reason: str, detail: str, elapsed: float = 0.0) -> None:
        self.reason = reason
        self.detail = detail
        self.elapsed = elapsed
        super().__init__(f"{reason}: {detail}")


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes
    elapsed: float
    content_type: str = ""

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class HttpClient(Protocol):
    def request(
        self, method: str, url: str, timeout: float, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> HttpResponse: ...


class DeadlineReader(io.RawIOBase):
    """One side of a socket with one deadline for the whole exchange: before every read the
    socket timeout is set to what is left, so a peer dripping a byte at a time cannot hold the
    call past its deadline (a per-read timeout would let it run forever). Used for the client's
    responses here and for the listeners' requests (``on_timeout`` is called when the deadline
    passes: they count it)."""

    def __init__(self, sock: socket.socket, deadline: float, on_timeout: Callable[[], None] | None = None) -> None:
        self._sock = sock
        self._deadline = deadline
        self._on_timeout = on_timeout

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        try:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline passed")
            self._sock.settimeout(left)
            return self._sock.recv_into(b)
        except TimeoutError:
            if self._on_timeout is not None:
                self._on_timeout()
            raise


class _DeadlineSocket:
    """What ``http.client.HTTPResponse`` reads from: only ``makefile`` is used."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(DeadlineReader(self._sock, self._deadline))


class _Stale(Exception):
    """A kept connection the server had closed: the call is made once more on a fresh one."""


Server = tuple[str, str, int | None]  # (scheme, host, port): what a kept connection is kept for


def _untouched(sock: socket.socket) -> bool:
    """A kept connection the server has neither closed nor written to since its last answer (a
    readable socket is one of the two: it is not reused)."""
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLPRI)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


class StdlibHttpClient:
    """http.client over kept-alive connections: at most ``KEEP_PER_SERVER`` per server, reused while
    they have been idle less than ``keep_idle`` seconds (a probe asks each server twice a second;
    a fresh TCP connection for each call cost more than the call). ``timeout`` bounds the whole
    call (connect, send, headers and body), not each read.

    A connection is kept only after a complete answer that did not say ``Connection: close``; one
    that timed out or failed is closed, so a hung server's next call starts afresh, exactly as
    before. Before reuse a connection the server closed meanwhile (readable: EOF) is dropped; one
    it closes while the request is on its way (``ECONNRESET``, EOF before a status line: servers
    close idle connections, uvicorn after 5 s) is retried once on a fresh connection within the
    same deadline, so a dead server is still ``refused`` and a hung one still ``timeout``."""

    def __init__(self, keep_idle: float = KEEP_IDLE_S) -> None:
        self.keep_idle = keep_idle
        self._kept: dict[Server, list[tuple[socket.socket, float]]] = {}
        self._lock = threading.Lock()

    def request(
        self, method: str, url: str, timeout: float, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> HttpResponse:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise HttpError("error", f"unsupported URL scheme in {url!r}")
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        payload = None
        headers = {"Accept": "*/*", **(headers or {})}
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        start = time.monotonic()
        deadline = start + timeout
        try:
            server: Server = (parts.scheme, parts.hostname or "127.0.0.1", parts.port)
            kept = self._take(server, start)
            try:
                return self._exchange(server, kept, method, path, payload, headers, start, deadline)
            except _Stale:
                return self._exchange(server, None, method, path, payload, headers, start, deadline)
        except ConnectionRefusedError as e:
            raise HttpError("refused", str(e), time.monotonic() - start) from None
        except TimeoutError as e:
            raise HttpError("timeout", f"no answer within {timeout:g}s", time.monotonic() - start) from e
        except ValueError as e:  # an invalid header or URL: its message quotes the value
            raise HttpError(
                "error",
                f"{type(e).__name__}: the request could not be sent (a header or the URL is invalid; values not shown)",
                time.monotonic() - start,
            ) from None
        except (OSError, http.client.HTTPException) as e:
            raise HttpError("error", f"{type(e).__name__}: {e}", time.monotonic() - start) from e

    def _exchange(
        self,
        server: Server,
        kept: socket.socket | None,
        method: str,
        path: str,
        payload: bytes | None,
        headers: dict[str, str],
        start: float,
        deadline: float,
    ) -> HttpResponse:
        """One request and its answer, on ``kept`` or on a fresh connection; raises ``_Stale`` when
        ``kept`` turns out closed by the server before any answer."""
        scheme, host, port = server
        conn_cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        conn = conn_cls(host, port, timeout=max(0.001, deadline - time.monotonic()))
        try:
            if kept is None:
                conn.connect()
            else:
                conn.sock = kept  # http.client connects only when it has no socket
            conn.sock.settimeout(max(0.001, deadline - time.monotonic()))
            # HTTPResponse only calls makefile() on what it is given; the stubs ask for a real socket
            resp = http.client.HTTPResponse(_DeadlineSocket(conn.sock, deadline), method=method)  # type: ignore[arg-type]
            try:
                conn.request(method, path, body=payload, headers=headers)
                resp.begin()
            except (ConnectionResetError, BrokenPipeError) as e:  # RemoteDisconnected is a ConnectionResetError
                if kept is not None:
                    raise _Stale() from e
                raise
            data = resp.read(MAX_BODY)
            answer = HttpResponse(resp.status, data, time.monotonic() - start, resp.getheader("Content-Type", "") or "")
            if resp.isclosed() and not resp.will_close:  # all of it read, and the server keeps the connection
                self._keep(server, conn.sock)
                conn.sock = None
            return answer
        finally:
            conn.close()

    def _take(self, server: Server, now: float) -> socket.socket | None:
        """A kept connection to ``server`` still fit for a request, else None; every connection
        idle past ``keep_idle`` (to any server) is closed on the way."""
        stale: list[socket.socket] = []
        found = None
        with self._lock:
            for key in list(self._kept):
                fresh = [(s, t) for s, t in self._kept[key] if now - t < self.keep_idle]
                stale += [s for s, t in self._kept[key] if now - t >= self.keep_idle]
                if fresh:
                    self._kept[key] = fresh
                else:
                    del self._kept[key]
            kept = self._kept.get(server, [])
            while kept and found is None:
                sock, _ = kept.pop()
                if _untouched(sock):
                    found = sock
                else:
                    stale.append(sock)
        for sock in stale:
            sock.close()
        return found

    def _keep(self, server: Server, sock: socket.socket) -> None:
        with self._lock:
            kept = self._kept.setdefault(server, [])
            if len(kept) < KEEP_PER_SERVER:
                kept.append((sock, time.monotonic()))
                return
        sock.close()

    def close(self) -> None:
        """Close every kept connection (a later call opens a fresh one)."""
        with self._lock:
            socks = [s for kept in self._kept.values() for s, _ in kept]
            self._kept.clear()
        for sock in socks:
            sock.close()
