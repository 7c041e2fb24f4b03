"""HTTP to the supervised servers, behind a seam: one GET/POST with a hard timeout.

The only module that opens TCP connections to vLLM. Errors come back as
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
import socket
import time
from dataclasses import dataclass
from typing import Any, Mapping, Protocol
from urllib.parse import urlsplit

from vllm_guardian.errors import ProbeFailed

MAX_BODY = 8 * 1024 * 1024  # a /metrics page of a big vLLM is ~100 KiB; cap the read


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
    responses here and for the HTTP listener's requests."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        self._sock.settimeout(left)
        return self._sock.recv_into(b)


class _DeadlineSocket:
    """What ``http.client.HTTPResponse`` reads from: only ``makefile`` is used."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(DeadlineReader(self._sock, self._deadline))


class StdlibHttpClient:
    """http.client, one connection per call (probes are ~1 Hz; no pooling needed); ``timeout``
    bounds the whole call (connect, send, headers and body), not each read."""

    def request(
        self, method: str, url: str, timeout: float, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> HttpResponse:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise HttpError("error", f"unsupported URL scheme in {url!r}")
        conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        payload = None
        headers = {"Accept": "*/*", "Connection": "close", **(headers or {})}
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        start = time.monotonic()
        deadline = start + timeout
        conn = conn_cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
        try:
            conn.connect()
            conn.sock.settimeout(max(0.001, deadline - time.monotonic()))
            conn.request(method, path, body=payload, headers=headers)
            # HTTPResponse only calls makefile() on what it is given; the stubs ask for a real socket
            resp = http.client.HTTPResponse(
                _DeadlineSocket(conn.sock, deadline),  # type: ignore[arg-type]
                method=method,
            )
            resp.begin()
            data = resp.read(MAX_BODY)
            return HttpResponse(resp.status, data, time.monotonic() - start, resp.getheader("Content-Type", "") or "")
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
        finally:
            conn.close()
