"""The guardian's one Redis connection: made once at start, handed to every part that talks to Redis.

``RedisConnection.from_config(alerts, state_dir)`` reads ``alerts:`` (``redis_url``, the password
from ``password_env`` / ``password_file``, ``timeout``), starts the embedded Redis when
``redis_url == "embedded"`` and makes one redis-py client (``make_client``: every call bounded by
the timeout, no client-side retries). Its users are handed the connection (or its ``client``),
never build their own: the alert sink and its node heartbeat, the fleet lease, the control
publisher (``ControlPublisher``), the gates' fingerprint exchange, decisions and report listener.
``revive()`` starts the embedded Redis again when it died (the alert flusher calls it after a
failed flush); ``close()`` releases the client and stops the embedded Redis, once, after every
user has stopped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from vllm_guardian.store import url as store_url
from vllm_guardian.sinks.redis_client import make_client, mask_url, publish_control, resolve_password

log = logging.getLogger(__name__)


class RedisConnection:
    """One redis-py client and, when embedded, the Redis server it talks to."""

    def __init__(
        self,
        client: Any,
        *,
        url_for_log: str = "",
        on_close: Callable[[], None] | None = None,
        on_down: Callable[[], Any] | None = None,
        secrets: tuple[str, ...] = (),
    ) -> None:
        self.client = client
        self.url_for_log = url_for_log  # the URL with any password masked
        self._secrets = tuple(s for s in secrets if s)
        self._on_close = on_close  # stops the embedded Redis
        self._on_down = on_down  # starts the embedded Redis again
        self._closed = False
        self.highly_available = False  # a Sentinel or Cluster store: a lease there waits for replicas

    @classmethod
    def from_config(
        cls,
        alerts: Any,
        state_dir: str | os.PathLike[str],
        *,
        embedded_factory: Callable[[str], Any] | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> RedisConnection:
        """From an ``AlertsConfig``: the embedded Redis started under ``state_dir`` when
        ``redis_url == "embedded"`` (stopped again by ``close()``, and by a failure here)."""
        url = alerts.redis_url
        on_close: Callable[[], None] | None = None
        on_down: Callable[[], Any] | None = None
        if url == "embedded":
            if embedded_factory is None:
                from vllm_guardian.sinks.embedded_redis import EmbeddedRedis

                embedded_factory = EmbeddedRedis
            embedded = embedded_factory(str(state_dir))
            url = embedded.start()
            on_close = embedded.stop
            on_down = getattr(embedded, "revive", None)
        try:
            password = resolve_password(alerts.password_env, alerts.password_file, environ=environ)
            client = make_client(url, password=password, timeout=alerts.timeout)
        except BaseException:
            if on_close is not None:
                on_close()
            raise
        secrets = (password or "", unquote(urlsplit(url).password or ""))
        conn = cls(client, url_for_log=mask_url(url), on_close=on_close, on_down=on_down, secrets=secrets)
        conn.highly_available = store_url.parse(url).highly_available
        return conn

    def secrets(self) -> tuple[str, ...]:
        """The Redis password (configured or in the URL), for the scrubber of written text; never for printing."""
        return self._secrets

    @property
    def revivable(self) -> bool:
        """Can ``revive`` do anything (an embedded Redis)?"""
        return self._on_down is not None

    def revive(self) -> object:
        """Start the embedded Redis again when it died; nothing for an external one."""
        return self._on_down() if self._on_down is not None else None

    def close(self) -> None:
        """Release the client and stop the embedded Redis (once; later calls do nothing)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing must not fail the shutdown
            pass
        if self._on_close is not None:
            self._on_close()


class ControlPublisher:
    """Live control messages (drain, undrain) on ``alerts.control_channel``: each stamped and,
    with trust keys, signed by ``stamp`` (``gates.control.ControlChannel.stamp``), then one
    best-effort ``PUBLISH`` bounded by the timeout, never spooled (``publish_control``)."""

    def __init__(
        self, conn: RedisConnection, channel: str, stamp: Callable[[Mapping[str, Any]], Mapping[str, Any]]
    ) -> None:
        self.conn, self.channel, self.stamp = conn, channel, stamp

    def __call__(self, payload: Mapping[str, Any]) -> bool:
        return publish_control(self.conn.client, self.channel, self.stamp(payload))
