"""How many clients a listener serves at once, and which one goes when they are all taken.

The control socket's; the HTTP listener keeps the same policy in a TLS-aware form (its cut must
reach the plain socket under a TLS one) and reports the same counts. Each listener serves at most
``size`` connections at once, each on its own thread, and gives each one deadline
for its whole request (``host.http.DeadlineReader``), so a client trickling a byte at a time holds
a thread only until then. A request is read in milliseconds and answered from memory, so when
every slot is taken the connections still *sending* their request are the trickles: the oldest
one open at least ``evict_after`` seconds is cut for the newcomer (``evicted``), and a flood of
them cannot keep the operator, the kubelet's probe or Prometheus out. When every open connection
is being answered the newcomer is closed unread (``refused``). A request whose deadline passed
before it was read whole is dropped (``timed_out``). Counted in the status (``listeners``) and in
``guardian_listener_connections_dropped_total``.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

DROP_REASONS = ("refused", "evicted", "timed_out")


@dataclass(frozen=True)
class ConnectionCounts:
    """One listener in the status's ``listeners`` section: connections dropped, by reason."""

    refused: int = 0  # closed unread: every slot was being answered
    evicted: int = 0  # cut while still sending its request, to make room for a newcomer
    timed_out: int = 0  # its request was not read whole within the deadline


class ConnectionSlots:
    """The connections of one listener: at most ``size`` at once (``admit``), each either still
    sending its request or being answered (``answering``) until it ends (``release``)."""

    def __init__(self, size: int, evict_after: float = 0.0) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self.size = size
        self.evict_after = evict_after
        self._lock = threading.Lock()
        self._reading: dict[Any, float] = {}  # connection -> when it was accepted (monotonic)
        self._answering: set[Any] = set()
        self._refused = self._evicted = self._timed_out = 0

    def admit(self, conn: Any) -> bool:
        """Take a slot for ``conn``, cutting the oldest connection still sending its request when
        all are taken; False (``conn`` to be closed unread) when every one is being answered."""
        now = time.monotonic()
        with self._lock:
            if len(self._reading) + len(self._answering) >= self.size:
                reading = [(since, id(c), c) for c, since in self._reading.items() if now - since >= self.evict_after]
                if not reading:
                    self._refused += 1
                    return False
                _, _, oldest = min(reading, key=lambda r: r[:2])
                del self._reading[oldest]
                self._evicted += 1
                try:
                    oldest.shutdown(socket.SHUT_RDWR)  # its thread reads EOF and ends
                except OSError:
                    pass
            self._reading[conn] = now
        return True

    def answering(self, conn: Any) -> None:
        """``conn``'s request was read: it is answered now, no longer a trickle to cut."""
        with self._lock:
            if self._reading.pop(conn, None) is not None:
                self._answering.add(conn)

    def timed_out(self) -> None:
        """A request's deadline passed before it was read whole."""
        with self._lock:
            self._timed_out += 1

    def release(self, conn: Any) -> None:
        with self._lock:
            self._reading.pop(conn, None)
            self._answering.discard(conn)

    def counts(self) -> ConnectionCounts:
        with self._lock:
            return ConnectionCounts(self._refused, self._evicted, self._timed_out)
