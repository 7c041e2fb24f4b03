"""Alert delivery to Redis: spool first, then a background flusher, exactly once per event id.

``AlertSink.publish(event)`` only appends the event to the local spool (fsync'd)
and wakes the flusher thread; it never waits on Redis. The flusher delivers
spooled events oldest first through one Lua script that, atomically, skips an
id already recorded in ``{<stream>}:delivered:<node>`` (a sorted set of recent
ids, in the stream's Cluster slot), else ``XADD``s the event to the stream (``MAXLEN ~``), records the id and
``PUBLISH``es the JSON on the channel. Delivered ids are then removed from the
spool; a crash between the two replays the event, which the script skips. On a
Redis error the flusher backs off (exponential, capped) and retries; every
Redis call carries ``alerts.timeout`` and no client-side retries, so a hung
Redis stalls nothing but the flusher, and that only for one timeout.

The node heartbeat (``heartbeat(summary)``) goes through the same thread (latest
summary wins). Control messages (``control(payload)``) are live only: one
best-effort ``PUBLISH`` with the timeout, never spooled. The client, its URL and password are
``sinks/redis_client.py``'s; the once-per-id delivery script is ``sinks/redis_delivery.py``'s; the
events a full disk refused are held by ``sinks/held_events.py``.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from vllm_guardian.sinks.fleet import NodeHeartbeat
from vllm_guardian.sinks.held_events import HeldEvents
from vllm_guardian.sinks.redis_client import publish_control, redis_errors
from vllm_guardian.sinks.redis_delivery import DEFAULT_DELIVERED_KEEP, RedisDelivery
from vllm_guardian.sinks.spool import Spool

if TYPE_CHECKING:
    from vllm_guardian.sinks.redis_conn import RedisConnection

log = logging.getLogger(__name__)


class NotReplicated(Exception):
    """A batch the master took but too few replicas acknowledged: a failover could lose it."""


@dataclass(frozen=True)
class AlertsStatus:
    """The status's ``alerts`` section: what waits, what was delivered or dropped, Redis reachable."""

    spooled: int
    delivered_total: int
    duplicates_total: int
    dropped_total: int
    held_in_memory: int
    spool_error: str | None
    redis_up: bool
    last_error: str | None
    url: str | None
    unacknowledged_total: int = 0  # batches delivered but not acknowledged by the replicas: kept, re-sent
    master: str | None = None  # on a Sentinel store: the master it delivers to (host:port)
    failovers: int = 0  # on a Sentinel store: times the master changed since the start


@dataclass(frozen=True)
class AlertSinkSettings:
    """Where and how the sink delivers: the ``alerts`` config's keys, and the flusher's pace."""

    node: str
    stream: str = "guardian:alerts"
    channel: str | None = "guardian:alerts"  # None: no pub/sub notice
    maxlen: int = 100_000  # XADD MAXLEN ~
    control_channel: str = "guardian:control"
    heartbeat_ttl: float = 30.0
    delivered_keep: int | None = None  # ids remembered as delivered (None: twice the spool)
    batch: int = 100  # events per delivery round
    backoff_initial: float = 0.1  # seconds after a failure, doubled up to backoff_max
    backoff_max: float = 5.0
    idle_interval: float = 5.0  # the flusher's look at the spool when nothing woke it
    url_for_log: str = ""  # the Redis URL, password masked


class AlertSink:
    """Spool-first alert publisher with a background flusher thread (see module doc)."""

    def __init__(
        self,
        *,
        client: Any,
        spool: Spool,
        settings: AlertSinkSettings,
        on_close: Callable[[], None] | None = None,
        on_down: Callable[[], Any] | None = None,
        close_client: bool = True,
        wait_replicas: int = 0,
        replica_timeout: float = 1.0,
        start: bool = True,
    ) -> None:
        node = settings.node
        self.settings = settings
        self.node = node
        self.spool = spool
        self.client = client
        self.control_channel = settings.control_channel
        self.heartbeat_ttl = settings.heartbeat_ttl
        self.batch = max(1, int(settings.batch))
        self.backoff_initial = settings.backoff_initial
        self.backoff_max = max(settings.backoff_max, settings.backoff_initial)
        self.idle_interval = settings.idle_interval
        self.url_for_log = settings.url_for_log
        self._delivery = RedisDelivery(
            client,
            node=node,
            stream=settings.stream,
            channel=settings.channel,
            maxlen=settings.maxlen,
            delivered_keep=settings.delivered_keep or max(DEFAULT_DELIVERED_KEEP, 2 * spool.max_events),
            replicas=wait_replicas,
            replica_timeout=replica_timeout,
        )
        self._unacknowledged_total = 0
        self._master: str | None = None
        self._failovers = 0
        self._wait_replicas = max(0, int(wait_replicas))  # on a store that fails over: WAIT after each batch
        self._heartbeat = NodeHeartbeat(client)
        self._on_close = on_close
        self._close_client = close_client  # False: the client is a shared connection's, closed by it
        self._on_down = on_down  # e.g. start the embedded Redis again when it died
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._delivered_total = 0
        self._duplicates_total = 0
        self._redis_up: bool | None = None
        self._last_error: str | None = None
        self._pending_heartbeat: dict[str, Any] | None = None
        self._held = HeldEvents(spool, self._lock)  # what the spool refused (a full disk)
        self._last_duplicates = 0
        self._thread: threading.Thread | None = None
        self._closed = False
        if start:
            self.start()

    @classmethod
    def from_config(
        cls,
        alerts: Any,
        state_dir: str | os.PathLike[str],
        node: str,
        *,
        embedded_factory: Callable[[str], Any] | None = None,
        environ: Mapping[str, str] = os.environ,
        **kwargs: Any,
    ) -> AlertSink:
        """A sink with a Redis connection of its own (``RedisConnection.from_config``: the embedded
        Redis started when ``redis_url == "embedded"``), closed with the sink. The guardian itself
        shares one connection among all its Redis users: ``on_connection``."""
        from vllm_guardian.sinks.redis_conn import RedisConnection

        conn = RedisConnection.from_config(alerts, state_dir, embedded_factory=embedded_factory, environ=environ)
        try:
            return cls.on_connection(conn, alerts, state_dir, node, owns_connection=True, **kwargs)
        except BaseException:
            conn.close()
            raise

    @classmethod
    def on_connection(
        cls,
        conn: RedisConnection,
        alerts: Any,
        state_dir: str | os.PathLike[str],
        node: str,
        *,
        owns_connection: bool = False,
        start: bool = True,
        **tuning: Any,
    ) -> AlertSink:
        """The sink of an ``AlertsConfig`` on ``conn`` (spool under ``<state_dir>/spool``); a dead
        embedded Redis is revived by the flusher. ``owns_connection``: ``close()`` closes ``conn``
        too; else whoever made ``conn`` closes it after the sink. ``tuning``: other fields of
        ``AlertSinkSettings`` (``backoff_max``, ``idle_interval``, ...)."""
        spool = Spool(Path(state_dir) / "spool", max_events=alerts.spool.max_events, max_bytes=alerts.spool.max_bytes)
        log.info("alerts: stream %s, channel %s on %s", alerts.stream, alerts.channel, conn.url_for_log)
        settings = AlertSinkSettings(
            node=node,
            stream=alerts.stream,
            channel=alerts.channel,
            maxlen=alerts.stream_maxlen,
            control_channel=alerts.control_channel,
            heartbeat_ttl=alerts.heartbeat_ttl,
            url_for_log=conn.url_for_log,
            **tuning,
        )
        return cls(
            client=conn.client,
            spool=spool,
            settings=settings,
            on_close=conn.close if owns_connection else None,
            on_down=conn.revive if conn.revivable else None,
            close_client=False,
            wait_replicas=alerts.wait_replicas if getattr(conn, "highly_available", False) else 0,
            replica_timeout=min(1.0, alerts.timeout / 2),
            start=start,
        )

    # ------------------------------------------------------------ caller side (never blocks on Redis)
    def publish(self, event: Mapping[str, Any]) -> None:
        """Spool ``event`` durably, then let the flusher deliver it. When the disk refuses
        (ENOSPC, EIO) the event is held in memory behind the spooled ones and still delivered,
        in order; the spool error shows in ``stats()`` and is logged once per episode."""
        if self._closed:
            raise ValueError("alert sink is closed")
        if not self._held.any():
            try:
                self.spool.append(event)
                self._held.spool_ok()
                self._wake.set()
                return
            except OSError as e:
                self._held.spool_failed(e)
        self._held.hold(event)
        self._wake.set()

    def __call__(self, event: Mapping[str, Any]) -> None:
        self.publish(event)

    def heartbeat(self, summary: Mapping[str, Any]) -> None:
        """Queue the node summary for ``guardian:node:<node>`` (EX heartbeat_ttl); latest wins."""
        with self._lock:
            self._pending_heartbeat = dict(summary)
        self._wake.set()

    def control(self, payload: Mapping[str, Any]) -> bool:
        """Live control message on the control channel; best effort, bounded by the timeout."""
        return publish_control(self.client, self.control_channel, payload)

    def status_section(self) -> AlertsStatus:
        """The status's ``alerts`` section."""
        return AlertsStatus(**self.stats())

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "spooled": len(self.spool),
                "delivered_total": self._delivered_total,
                "duplicates_total": self._duplicates_total,
                "dropped_total": self.spool.dropped_total + self._held.dropped,
                "held_in_memory": len(self._held.events),
                "spool_error": self._held.error,
                "redis_up": bool(self._redis_up),
                "last_error": self._last_error,
                "url": self.url_for_log,
                "unacknowledged_total": self._unacknowledged_total,
                "master": self._master,
                "failovers": self._failovers,
            }

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"guardian-alerts-{self.node}", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the flusher (what is still spooled stays on disk for the next start), release Redis."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._close_client:
            try:
                self.client.close()
            except Exception:  # noqa: BLE001 - closing must not fail the shutdown
                pass
        self.spool.close()
        if self._on_close is not None:
            self._on_close()

    def __enter__(self) -> AlertSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ the flusher
    def flush_once(self) -> bool:
        """Deliver one batch from the spool head, in order. True when Redis took everything it was given."""
        self._held.respool()
        batch = self.spool.head(self.batch)
        delivered: list[str] = []
        error = self._deliver_all(batch, delivered)
        duplicates = self._last_duplicates
        if delivered:
            try:
                self.spool.remove(delivered)
            except OSError as e:  # a full disk cannot rewrite the spool: re-delivery is a no-op (dedup)
                self._held.spool_failed(e)
            with self._lock:  # counted once acknowledged, so stats never show delivered-but-spooled
                self._delivered_total += len(delivered)
                self._duplicates_total += duplicates
        if error is None and len(batch) < self.batch:  # the whole spool went: then what is held
            error = self._deliver_held()
        if error is None:
            error = self._send_heartbeat()
        if error is None and not batch and not delivered:
            error = self._ping_if_unknown()
        self._note(error)
        return error is None

    def _deliver_all(self, batch: list[dict[str, Any]], delivered: list[str]) -> BaseException | None:
        self._last_duplicates = 0
        if self._wait_replicas and batch:
            return self._deliver_replicated(batch, delivered)
        for event in batch:
            try:
                new = self._delivery.deliver(event)
            except redis_errors() as e:
                return e
            except Exception as e:
                log.exception("alerts: unexpected delivery error")
                return e
            delivered.append(event["id"])
            self._last_duplicates += 0 if new else 1
        return None

    def _deliver_replicated(self, batch: list[dict[str, Any]], delivered: list[str]) -> BaseException | None:
        """The batch and a WAIT on one connection: forgotten only once the replicas hold it."""
        try:
            news, acked = self._delivery.deliver_batch(batch)
        except redis_errors() as e:
            return e
        except Exception as e:
            log.exception("alerts: unexpected delivery error")
            return e
        if acked < self._wait_replicas:
            with self._lock:
                self._unacknowledged_total += 1
            return NotReplicated(
                f"{len(batch)} event(s) acknowledged by {acked} of {self._wait_replicas} replica(s) "
                f"within {self._delivery.replica_timeout:g}s: kept in the spool, sent again (duplicates skipped "
                "by id); alerts.wait_replicas: 0 for a store without replicas"
            )
        delivered.extend(event["id"] for event in batch)
        self._last_duplicates = sum(1 for new in news if not new)
        return None

    def _deliver_held(self) -> BaseException | None:
        """Deliver the events the spool refused, oldest first (they are newer than the spool's)."""
        while True:
            event = self._held.first()
            if event is None:
                return None
            delivered: list[str] = []
            error = self._deliver_all([event], delivered)
            if error is not None:
                return error
            with self._lock:
                self._held.drop_first(event)
                self._delivered_total += 1
                self._duplicates_total += self._last_duplicates

    def _send_heartbeat(self) -> BaseException | None:
        with self._lock:
            summary, self._pending_heartbeat = self._pending_heartbeat, None
        if summary is None:
            return None
        try:
            self._heartbeat.write(self.node, summary, self.heartbeat_ttl)
            return None
        except redis_errors() as e:
            with self._lock:
                if self._pending_heartbeat is None:
                    self._pending_heartbeat = summary
            return e

    def _ping_if_unknown(self) -> BaseException | None:
        if self._redis_up:
            return None
        try:
            self.client.ping()
            return None
        except redis_errors() as e:
            return e

    def _note(self, error: BaseException | None) -> None:
        with self._lock:
            was_up = self._redis_up
            if error is None:
                self._redis_up = True
                self._last_error = None
            else:
                self._redis_up = False
                self._last_error = f"{type(error).__name__}: {error}"
        if error is None and was_up is not True:
            self._learn_master()
        if error is None and was_up is False:
            log.warning("alerts: Redis %s reachable again; delivering the spool", self.url_for_log)
        elif error is not None and was_up is not False:
            log.warning(
                "alerts: Redis %s unreachable (%s: %s); spooling and retrying",
                self.url_for_log,
                type(error).__name__,
                error,
            )

    def _learn_master(self) -> None:
        """On a Sentinel store, after the first delivery and each recovery: which master, and did it change?"""
        ask = getattr(getattr(self.client, "connection_pool", None), "get_master_address", None)
        if not callable(ask):
            return
        try:
            host, port = ask()
        except redis_errors():
            return
        with self._lock:
            before, self._master = self._master, f"{host}:{port}"
            changed = before is not None and before != self._master
            self._failovers += changed
        if changed:
            log.warning("alerts: the fleet store failed over: master %s, now %s", before, self._master)

    def _run(self) -> None:
        backoff = self.backoff_initial
        while not self._stop.is_set():
            self._wake.clear()
            try:
                ok = self.flush_once()
            except Exception as e:  # the flusher must outlive any surprise
                log.exception("alerts: flusher error")
                with self._lock:
                    self._redis_up, self._last_error = False, f"{type(e).__name__}: {e}"
                ok = False
            if self._stop.is_set():
                break
            if not ok:
                if self._on_down is not None:
                    try:
                        self._on_down()
                    except Exception:
                        log.exception("alerts: reviving Redis failed")
                self._stop.wait(backoff)  # publishes do not cut a backoff short
                backoff = min(self.backoff_max, backoff * 2)
                continue
            backoff = self.backoff_initial
            if len(self.spool) and self.spool.head(1):
                continue
            self._wake.wait(self.idle_interval)
