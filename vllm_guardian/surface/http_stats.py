"""What the HTTP listener refused, counted, and its typed status section (``http`` in ``guardian
status --json``; the exporter's ``guardian_http_*`` families read it).

Counts, by reason: the connections closed before a request was answered (``full``: every slot
was being answered; ``evicted``: cut while still sending to make room; ``timed_out``: the
request was not read whole within its deadline; ``tls_handshake``: the TLS
handshake failed, plaintext to the TLS port, no or a bad client certificate, too slow) and the
requests refused by basic auth (``web_auth.Verdict``). The first of each reason is logged as a
warning with the client's address and why, later ones at debug level only: a flood cannot flood
the log. Built before the listener (the daemon's status reads it) and shared with it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from vllm_guardian.surface.web_security import WebConfigStatus, WebSecurity

REFUSALS = ("full", "evicted", "timed_out", "tls_handshake")  # present from the start (0), so a rate works at once
AUTH_FAILURES = ("no_credentials", "bad_credentials", "busy")


@dataclass(frozen=True)
class HttpStatus:
    """The status's ``http`` section."""

    address: str = ""
    scheme: str = "http"  # https when the web config asks for TLS
    connections_refused: Mapping[str, int] = field(default_factory=dict)  # reason -> count
    auth_failures: Mapping[str, int] = field(default_factory=dict)  # reason -> count
    web_config: WebConfigStatus | None = None  # None: no web config (plain HTTP, no auth)


class HttpCounters:
    """The listener's counters (thread-safe) and its status section."""

    def __init__(self, log: logging.Logger | None = None, security: WebSecurity | None = None) -> None:
        self.log = log or logging.getLogger("guardian.http")
        self.security = security
        self._lock = threading.Lock()
        self.refused: dict[str, int] = dict.fromkeys(REFUSALS, 0)
        self.auth: dict[str, int] = dict.fromkeys(AUTH_FAILURES, 0)
        self.address = ""

    def refuse(self, reason: str, peer: str, why: str) -> None:
        """A connection closed before it was answered."""
        self._count(self.refused, reason, f"http connection from {peer} closed ({reason}): {why}")

    def unauthorized(self, reason: str, peer: str, path: str) -> None:
        """A request refused by basic auth."""
        self._count(self.auth, reason, f"http request from {peer} for {path} refused by basic auth ({reason})")

    def _count(self, table: dict[str, int], reason: str, line: str) -> None:
        with self._lock:
            first = table.get(reason, 0) == 0
            table[reason] = table.get(reason, 0) + 1
        if first:
            self.log.warning("%s (the first such; later ones are counted in guardian status)", line)
        else:
            self.log.debug("%s", line)

    def status_section(self) -> HttpStatus:
        with self._lock:
            refused, auth = dict(self.refused), dict(self.auth)
        web = self.security
        if web is None:
            return HttpStatus(self.address, "http", refused, auth, None)
        return HttpStatus(self.address, web.scheme(), refused, auth, web.status_section())
