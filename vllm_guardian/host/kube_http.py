"""One HTTP exchange with the Kubernetes API server, bounded: a deadline for the whole answer, no
redirects, and the server's error text made safe to print.

``open_with_deadline(req, timeout, context)``: urllib with the environment's proxy, but
- every read of the answer (status line, headers, body) is given only what is left of one
  deadline for the whole call (as ``http.DeadlineReader`` for vLLM): a server dripping a byte at a time
  cannot hold a call past ``timeout``, where a per-read timeout would let it run forever;
- no redirect is followed (the API server never redirects these calls; a redirect could carry
  the bearer token to another host or to plain http): a 3xx is an ``HTTPError`` like any error.

``api_error(method, path, e)``: the ``ApiError`` for an HTTP error answer: its code, its Status
``message`` (at most 500 characters) and ``Retry-After``; the reason phrase and the message with
every control character written as ``\\xNN``, so a newline in what the server says cannot start a
forged log line.
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from typing import Any

from vllm_guardian.errors import ProbeFailed

MESSAGE_MAX = 500
ERROR_BODY_MAX = 64 * 1024


class ApiError(ProbeFailed):
    """The API server answered with an error status: ``code``, and its Status ``message``."""

    def __init__(self, text: str, code: int, message: str = "", retry_after: float | None = None) -> None:
        super().__init__(text)
        self.code, self.message, self.retry_after = code, message, retry_after


class EvictionBlocked(ApiError):
    """HTTP 429 on an eviction: a PodDisruptionBudget allows no disruption now (retry later)."""


class EvictionUnsupported(ApiError):
    """The API server serves no Eviction API version the guardian speaks: an eviction cannot be asked
    (a refusal the remediation reports; it never falls back to killing the pod's processes)."""


def printable(text: str) -> str:
    """``text`` with each character that is not printable written as ``\\xNN``."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def api_error(method: str, path: str, e: urllib.error.HTTPError) -> ApiError:
    message = ""
    try:
        status = json.loads(e.read(ERROR_BODY_MAX) or b"{}")
        if isinstance(status, dict):
            message = printable(str(status.get("message") or "")[:MESSAGE_MAX])
    except (ValueError, OSError, RecursionError, http.client.HTTPException):
        pass
    retry = e.headers.get("Retry-After") if e.headers is not None else None
    try:
        retry_after = float(retry) if retry else None
    except ValueError:
        retry_after = None
    reason = printable(str(e.reason or "")[:100])
    text = f"kubernetes API {method} {path}: HTTP {e.code} {reason}" + (f": {message}" if message else "")
    return ApiError(text, e.code, message, retry_after)


class _DeadlineRaw(io.RawIOBase):
    """The socket's answer side with one deadline for the whole answer: before every read the
    socket timeout is set to what is left (as ``http.DeadlineReader`` does). Reads through the
    socket's own file object, which keeps the socket open after urllib drops its handle."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._raw = sock.makefile("rb", buffering=0)
        self._sock, self._deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        self._sock.settimeout(left)
        n = self._raw.readinto(b)
        return n if n is not None else 0  # None only for a non-blocking socket, which this is not

    def close(self) -> None:
        self._raw.close()
        super().close()


class _ReadSide:
    """What ``http.client.HTTPResponse`` reads from (only ``makefile``): the socket, under the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._deadline = sock, deadline

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineRaw(self._sock, self._deadline))


class _DeadlineHTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def response_class(self, sock: socket.socket, *args: Any, **kwargs: Any) -> http.client.HTTPResponse:  # type: ignore[override]
        return http.client.HTTPResponse(_ReadSide(sock, self._deadline), *args, **kwargs)  # type: ignore[arg-type]


class _DeadlineHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def response_class(self, sock: socket.socket, *args: Any, **kwargs: Any) -> http.client.HTTPResponse:  # type: ignore[override]
        return http.client.HTTPResponse(_ReadSide(sock, self._deadline), *args, **kwargs)  # type: ignore[arg-type]


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: float) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)

    def _connection(self, host: str, **kwargs: Any) -> http.client.HTTPConnection:
        return _DeadlineHTTPConnection(host, deadline=self._deadline, **kwargs)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, context: ssl.SSLContext | None, deadline: float) -> None:
        super().__init__(context=context)
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req, context=self._context)  # type: ignore[attr-defined]

    def _connection(self, host: str, **kwargs: Any) -> http.client.HTTPSConnection:
        return _DeadlineHTTPSConnection(host, deadline=self._deadline, **kwargs)


def open_with_deadline(
    req: urllib.request.Request, timeout: float, context: ssl.SSLContext | None
) -> http.client.HTTPResponse:
    """The answer to ``req``, every read of it within ``timeout`` from now; redirects refused."""
    deadline = time.monotonic() + timeout
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        _HTTPHandler(deadline),
        _HTTPSHandler(context, deadline),
        urllib.request.HTTPDefaultErrorHandler(),  # every status >= 300 an HTTPError: no redirect handler
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener.open(req, timeout=timeout)  # type: ignore[no-any-return]
