"""A tiny sd_notify(3) client (pure stdlib) for ``Type=notify`` + ``WatchdogSec=`` units.

Reads ``NOTIFY_SOCKET`` (a path, or ``@name`` for an abstract socket), ``WATCHDOG_USEC``
and ``WATCHDOG_PID`` from the environment mapping it is given (default ``os.environ``)
and sends one datagram per notification. Without ``NOTIFY_SOCKET`` (not started by
systemd) every call is a no-op returning False; a send that fails is logged at debug
and returns False — notifying systemd must never take the guardian down.

The daemon's part: ``ready()`` after its first tick, ``watchdog()`` after every tick
(``after_tick()`` does both), ``stopping()`` on shutdown, ``status(text)`` for a
one-line summary shown by ``systemctl status``.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Mapping

SEND_TIMEOUT_S = 1.0


def parse_address(value: str | None) -> str | None:
    """``NOTIFY_SOCKET`` → a ``sendto`` address: ``@x`` → ``"\\0x"`` (abstract), ``/p`` → ``/p``.

    Anything else (unset, empty, ``vsock:…``, a relative path) → None: not supported here.
    """
    if not value:
        return None
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


def parse_watchdog(environ: Mapping[str, str], pid: int) -> float | None:
    """The watchdog interval in seconds from ``WATCHDOG_USEC``, or None when it is off.

    ``WATCHDOG_PID``, when set, must name this process (else the watchdog is someone else's).
    """
    usec = environ.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    owner = environ.get("WATCHDOG_PID")
    if owner is not None and owner.strip() != str(pid):
        return None
    return int(usec) / 1_000_000


class SdNotify:
    def __init__(
        self, environ: Mapping[str, str] | None = None, *, pid: int | None = None, log: logging.Logger | None = None
    ) -> None:
        env = os.environ if environ is None else environ
        self._address = parse_address(env.get("NOTIFY_SOCKET"))
        self._watchdog = parse_watchdog(env, os.getpid() if pid is None else pid)
        self._log = log or logging.getLogger("vllm_guardian.surface.sdnotify")
        self._ready_sent = False

    @property
    def enabled(self) -> bool:
        """True when started by systemd with a usable ``NOTIFY_SOCKET``."""
        return self._address is not None

    def notify(self, *assignments: str) -> bool:
        """Send ``KEY=VALUE`` lines in one datagram. True when it was sent."""
        if self._address is None or not assignments:
            return False
        payload = "\n".join(assignments).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.settimeout(SEND_TIMEOUT_S)
                s.sendto(payload, self._address)
        except OSError as e:
            self._log.debug("sd_notify %r failed: %s", assignments, e)
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        sent = self.notify("READY=1", *(() if status is None else (_status_line(status),)))
        self._ready_sent = self._ready_sent or sent
        return sent

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def status(self, text: str) -> bool:
        return self.notify(_status_line(text))

    def watchdog_interval(self) -> float | None:
        """Seconds systemd waits for a ``WATCHDOG=1`` before killing us; None = no watchdog."""
        return self._watchdog

    def after_tick(self, status: str | None = None) -> None:
        """Call after every tick of the main loop: READY=1 the first time, WATCHDOG=1 always."""
        if not self._ready_sent:
            self.ready(status)
        self.watchdog()


def _status_line(text: str) -> str:
    return "STATUS=" + " ".join(text.split())


__all__ = ["SdNotify", "parse_address", "parse_watchdog"]
