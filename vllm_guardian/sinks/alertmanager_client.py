"""One ``POST /api/v2/alerts`` to one Alertmanager, bounded, and what its answer means.

``post_alerts(url, alerts, timeout)`` sends the JSON list through ``host/kube_http.open_with_deadline``
(one deadline for the whole answer, so a server dripping bytes cannot hold the flusher; no redirect
followed) and reads at most ``ANSWER_MAX`` bytes of what comes back. The answer is outside input:
only its status code decides anything; its text is kept for the log, cut to ``MESSAGE_MAX``
characters with every control character written as ``\\xNN``.

``Outcome``: ``sent`` (2xx), ``rejected`` (a 4xx other than 408/429: the alerts will never be
taken, so they are dropped and counted instead of blocking the spool forever), or ``retry``
(anything else: a 5xx, 408, 429, a 3xx, a refused connection, a timeout).
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit, urlunsplit

from vllm_guardian.host.kube_http import open_with_deadline, printable

API_PATH = "/api/v2/alerts"
ANSWER_MAX = 64 * 1024
MESSAGE_MAX = 300
RETRYABLE_4XX = (408, 429)


@dataclass(frozen=True)
class Outcome:
    result: str  # sent | rejected | retry
    detail: str = ""  # the status and the answer's first words, printable; or the error


Post = Callable[[str, Sequence[Any], float], Outcome]


def alerts_url(base: str) -> str:
    """``http://am:9093`` or ``http://am:9093/prefix/`` → ``…/api/v2/alerts`` (a route prefix kept)."""
    parts = urlsplit(base)
    path = parts.path.rstrip("/")
    if not path.endswith(API_PATH):
        path += API_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def for_log(url: str) -> str:
    """The instance as it is named in logs, status and metrics: scheme, host and port."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _snippet(status: int, body: bytes) -> str:
    text = body[:ANSWER_MAX].decode("utf-8", errors="replace").strip()
    text = printable(text[:MESSAGE_MAX])
    return f"HTTP {status}" + (f": {text}" if text else "")


def post_alerts(url: str, alerts: Sequence[Any], timeout: float) -> Outcome:
    """POST ``alerts`` (JSON-able) to ``url`` (the base URL of one Alertmanager)."""
    body = json.dumps(list(alerts), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    req = urllib.request.Request(
        alerts_url(url), data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with open_with_deadline(req, timeout, None) as resp:
            answer = resp.read(ANSWER_MAX)
            status = resp.status
    except urllib.error.HTTPError as e:
        try:
            answer = e.read(ANSWER_MAX)
        except OSError:
            answer = b""
        finally:
            e.close()
        status = e.code
    except (OSError, ValueError, http.client.HTTPException) as e:  # refused, reset, timed out, a bad status line
        return Outcome("retry", printable(f"{type(e).__name__}: {e}"[:MESSAGE_MAX]))
    detail = _snippet(status, answer)
    if 200 <= status < 300:
        return Outcome("sent", detail)
    if 400 <= status < 500 and status not in RETRYABLE_4XX:
        return Outcome("rejected", detail)
    return Outcome("retry", detail)
