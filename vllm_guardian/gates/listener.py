"""Listens on a Redis pub/sub channel and hands each message to its intake: the reports channel
to ``GatesShared.accept_report`` (bounds, trust, count, ledger), the control channel to
``ControlChannel.accept`` (``gates/control.py``: bounds, trust, count).

One daemon thread per channel. Whatever a publisher sends stays a message: should handing one over
raise anything (it does not: the intake counts it ``malformed``), the error is logged
once and the subscription is kept, with no backoff: only a Redis error ends the
subscription; it is logged once per outage and retried with a capped backoff. The thread
never dies. ``stop()`` ends it within about a second.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

POLL_S = 1.0
BACKOFF_MAX_S = 30.0


def _raw(client: Any) -> Any:
    """The same server without response decoding: a message that is not UTF-8 must reach the
    parser (and be counted as malformed), not break the subscription inside redis-py. A Cluster
    client makes its own twin; a Sentinel one asks the same sentinels for the same master."""
    undecoded = getattr(client, "undecoded", None)
    if callable(undecoded):
        return undecoded()
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if pool is None or not isinstance(kwargs, dict) or not kwargs.get("decode_responses"):
        return client
    import redis
    from redis.sentinel import SentinelConnectionPool

    raw = dict(kwargs, decode_responses=False)
    if isinstance(pool, SentinelConnectionPool):
        for k in ("connection_pool", "connection_class"):
            raw.pop(k, None)
        ssl = pool.connection_class.__name__.endswith("SSLConnection")
        return pool.sentinel_manager.master_for(pool.service_name, ssl=ssl, **raw)
    return redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **raw))


class ReportsListener:
    def __init__(
        self,
        client: Any,
        channel: str,
        accept: Callable[[bytes | str, float, float], str],
        mono: Callable[[], float],
        wall: Callable[[], float],
        log: logging.Logger,
        what: str = "gate reports",
    ) -> None:
        self.client, self.channel, self.accept = _raw(client), channel, accept
        self.mono, self.wall, self.log, self.what = mono, wall, log, what
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.subscribed = threading.Event()
        self._accept_failed = False

    def start(self) -> ReportsListener:
        self._thread = threading.Thread(target=self._run, name=self.what.replace(" ", "-"), daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _hand_over(self, data: object) -> None:
        try:
            self.accept(data if isinstance(data, (bytes, str)) else b"", self.mono(), self.wall())
        except Exception as e:  # noqa: BLE001 - a message is never a reason to drop the subscription
            if not self._accept_failed:
                self.log.error("%s: a message could not be handed over (%s: %s)", self.what, type(e).__name__, e)
            self._accept_failed = True

    def _run(self) -> None:
        backoff, down = 1.0, False
        while not self._stop.is_set():
            pubsub = None
            try:
                pubsub = self.client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(self.channel)
                self.subscribed.set()
                if down:
                    self.log.info("%s: listening on %s again", self.what, self.channel)
                down, backoff = False, 1.0
                while not self._stop.is_set():
                    msg = pubsub.get_message(timeout=POLL_S)
                    if msg and msg.get("type") == "message":
                        self._hand_over(msg.get("data"))
            except Exception as e:  # noqa: BLE001 - Redis gone or a client bug: retry, never die
                self.subscribed.clear()
                if not down:
                    self.log.warning(
                        "%s: %s unavailable (%s: %s); retrying", self.what, self.channel, type(e).__name__, e
                    )
                down = True
                self._stop.wait(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)
            finally:
                if pubsub is not None:
                    try:
                        pubsub.close()
                    except Exception:  # noqa: BLE001 - closing a broken connection may fail too; nothing to do
                        pass
