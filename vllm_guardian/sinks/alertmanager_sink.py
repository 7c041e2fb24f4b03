"""Alerts pushed straight to Alertmanager (API v2), to every configured instance, spooled and retried.

In an Alertmanager HA pair or trio every instance must receive every alert (they gossip silences
and notifications, not alerts), so each instance has its own spool
(``<state_dir>/spool-alertmanager/<hash of the URL>``, the ``Spool`` of the Redis alerts) and its own
flusher thread: one instance down never holds back another.

- ``publish(event)`` (an incident transition, the events the Redis sink gets) turns the event into
  an Alertmanager alert (``sinks/alertmanager_payload.py``), appends it to every instance's spool
  and wakes the flushers; it never waits on the network. Re-notifications are left out: the resend
  below covers them.
- ``resend(events)``: the firing incidents now, handed over every ``resend_interval`` (the runtime
  asks ``resend_due``). Each flusher, after its spool, posts the firing alerts again with a fresh
  ``endsAt`` horizon, so Alertmanager keeps them open while the guardian lives and resolves them by
  itself when it stops.
- When an incident's labels change (its severity rose), the old label set is sent resolved first.

A flusher posts the spool's head in batches (``sinks/alertmanager_client.py``): ``sent`` and
``rejected`` (a 4xx: never accepted, dropped and counted) leave the spool; ``retry`` backs off
(exponential, capped) and tries again, the spool growing up to its bounds meanwhile.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from vllm_guardian.sinks.alertmanager_client import Post, for_log, post_alerts
from vllm_guardian.sinks.alertmanager_payload import alert_of, resolved_copy, stamped
from vllm_guardian.sinks.spool import Spool

log = logging.getLogger(__name__)

SPOOL_DIR = "spool-alertmanager"


@dataclass(frozen=True)
class InstanceStatus:
    """One Alertmanager's delivery: what waits, what went, what it refused, whether it answers."""

    url: str
    spooled: int
    sent_total: int
    rejected_total: int
    dropped_total: int
    failures_total: int
    up: bool
    last_error: str | None


@dataclass(frozen=True)
class AlertmanagerStatus:
    """The status's ``alertmanager`` section: one row per configured instance."""

    instances: tuple[InstanceStatus, ...]
    firing: int


def spool_dir(state_dir: str | os.PathLike[str], url: str) -> Path:
    return Path(state_dir) / SPOOL_DIR / hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]


class _Instance:
    """One Alertmanager: its spool, its flusher thread, its counters."""

    def __init__(self, owner: AlertmanagerSink, url: str, spool: Spool) -> None:
        self.owner = owner
        self.url = url
        self.name = for_log(url)
        self.spool = spool
        self.sent_total = 0
        self.rejected_total = 0
        self.failures_total = 0
        self.up: bool | None = None
        self.last_error: str | None = None
        self.resend_pending = False  # set by the owner's resend()
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"guardian-alertmanager-{self.name}", daemon=True)

    def status(self) -> InstanceStatus:
        return InstanceStatus(
            self.name,
            len(self.spool),
            self.sent_total,
            self.rejected_total,
            self.spool.dropped_total,
            self.failures_total,
            bool(self.up),
            self.last_error,
        )

    def _post(self, alerts: Sequence[Mapping[str, Any]]) -> str:
        o = self.owner
        outcome = o.post(self.url, stamped(list(alerts), o.wall(), o.resend_interval), o.timeout)
        with o.lock:
            if outcome.result == "sent":
                self.sent_total += len(alerts)
            elif outcome.result == "rejected":
                self.rejected_total += len(alerts)
            else:
                self.failures_total += 1
        if outcome.result == "rejected":
            log.warning("alertmanager %s refused %d alert(s), dropped: %s", self.name, len(alerts), outcome.detail)
        self._note(None if outcome.result != "retry" else outcome.detail)
        return outcome.result

    def _note(self, error: str | None) -> None:
        with self.owner.lock:
            was_up, self.up, self.last_error = self.up, error is None, error
        if error is None and was_up is False:
            log.warning("alertmanager %s reachable again; sending the spool", self.name)
        elif error is not None and was_up is not False:
            log.warning("alertmanager %s unreachable (%s); spooling and retrying", self.name, error)

    def flush_once(self) -> bool:
        """Post one batch from the spool head, then (once the spool is empty) the firing alerts if a
        resend is due. True when nothing failed."""
        batch = self.spool.head(self.owner.batch)
        if batch:
            alerts = [e["alert"] for e in batch if isinstance(e.get("alert"), dict)]
            if alerts and self._post(alerts) == "retry":
                return False
            self.spool.remove([e["id"] for e in batch])
            if len(self.spool):
                return True
        with self.owner.lock:
            due, firing = self.resend_pending, list(self.owner.firing.values())
            self.resend_pending = False
        if due and firing and self._post(firing) == "retry":
            with self.owner.lock:
                self.resend_pending = True
            return False
        return True

    def _run(self) -> None:
        o = self.owner
        backoff = o.backoff_initial
        while not o.stop.is_set():
            self.wake.clear()
            try:
                ok = self.flush_once()
            except Exception as e:  # the flusher must outlive any surprise (a full disk rewriting the spool)
                log.exception("alertmanager %s: flusher error", self.name)
                self._note(f"{type(e).__name__}: {e}")
                ok = False
            if o.stop.is_set():
                break
            if not ok:
                o.stop.wait(backoff)
                backoff = min(o.backoff_max, backoff * 2)
                continue
            backoff = o.backoff_initial
            if len(self.spool):
                continue
            self.wake.wait(o.resend_interval)


class AlertmanagerSink:
    """Spool-first push of incident alerts to every configured Alertmanager (see module doc)."""

    def __init__(
        self,
        urls: Sequence[str],
        state_dir: str | os.PathLike[str],
        *,
        max_events: int,
        max_bytes: int,
        resend_interval: float,
        timeout: float,
        post: Post = post_alerts,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        batch: int = 64,
        backoff_initial: float = 0.2,
        backoff_max: float = 30.0,
        start: bool = True,
    ) -> None:
        self.post = post
        self.wall = wall
        self.monotonic = monotonic
        self.resend_interval = float(resend_interval)
        self.timeout = float(timeout)
        self.batch = max(1, int(batch))
        self.backoff_initial = backoff_initial
        self.backoff_max = max(backoff_initial, min(backoff_max, self.resend_interval))
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.firing: dict[str, dict[str, Any]] = {}  # incident id -> its alert as last announced
        self._next_resend = float("-inf")
        self._closed = False
        self.instances = [
            _Instance(self, url, Spool(spool_dir(state_dir, url), max_events=max_events, max_bytes=max_bytes))
            for url in dict.fromkeys(urls)
        ]
        if start:
            self.start()

    @classmethod
    def from_config(cls, alerts: Any, state_dir: str | os.PathLike[str], **kwargs: Any) -> AlertmanagerSink | None:
        """The sink of ``alerts.alertmanager`` (None when no URL is configured)."""
        am = alerts.alertmanager
        if not am.urls:
            return None
        log.info("alertmanager: pushing alerts to %s", ", ".join(for_log(u) for u in am.urls))
        return cls(
            am.urls,
            state_dir,
            max_events=alerts.spool.max_events,
            max_bytes=alerts.spool.max_bytes,
            resend_interval=am.resend_interval,
            timeout=am.timeout,
            **kwargs,
        )

    # ------------------------------------------------------------ caller side (never blocks on the network)
    def publish(self, event: Mapping[str, Any]) -> None:
        """Spool the alert of an incident transition for every instance (re-notifications skipped)."""
        if self._closed:
            raise ValueError("alertmanager sink is closed")
        if event.get("reason") == "renotify":
            return
        records = self._track(str(event.get("incident_id")), alert_of(event), str(event["id"]))
        for inst in self.instances:
            for record in records:
                try:
                    inst.spool.append(record)
                except OSError as e:  # a full disk: the resend still carries what fires
                    log.warning("alertmanager %s: spool refused an alert (%s)", inst.name, e)
            inst.wake.set()

    def __call__(self, event: Mapping[str, Any]) -> None:
        self.publish(event)

    def resend_due(self) -> bool:
        return self.monotonic() >= self._next_resend

    def resend(self, events: Sequence[Mapping[str, Any]]) -> None:
        """The firing incidents now (events of open incidents): posted again by every flusher."""
        self._next_resend = self.monotonic() + self.resend_interval
        wanted = {str(e.get("incident_id")): e for e in events if e.get("status") == "firing"}
        for incident_id, event in wanted.items():
            for record in self._track(incident_id, alert_of(event), f"{event['id']}-resend"):
                if record["alert"].get("endsAt") is not None:  # only a changed label set's end is spooled
                    for inst in self.instances:
                        try:
                            inst.spool.append(record)
                        except OSError as e:
                            log.warning("alertmanager %s: spool refused an alert (%s)", inst.name, e)
        with self.lock:
            for gone in set(self.firing) - set(wanted):
                del self.firing[gone]
            for inst in self.instances:
                inst.resend_pending = True
        for inst in self.instances:
            inst.wake.set()

    def _track(self, incident_id: str, alert: dict[str, Any], record_id: str) -> list[dict[str, Any]]:
        """The spool records for this alert: the old label set resolved first when the labels changed;
        the firing map updated."""
        records: list[dict[str, Any]] = []
        with self.lock:
            before = self.firing.get(incident_id)
            if before is not None and before["labels"] != alert["labels"]:
                records.append({"id": f"{record_id}-relabel", "alert": resolved_copy(before, self.wall())})
            if alert.get("endsAt") is None:
                self.firing[incident_id] = alert
            else:
                self.firing.pop(incident_id, None)
        records.append({"id": record_id, "alert": alert})
        return records

    def status_section(self) -> AlertmanagerStatus:
        with self.lock:
            return AlertmanagerStatus(tuple(i.status() for i in self.instances), len(self.firing))

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        for inst in self.instances:
            if not inst.thread.is_alive():
                inst.thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the flushers (what is still spooled stays on disk for the next start)."""
        if self._closed:
            return
        self._closed = True
        self.stop.set()
        for inst in self.instances:
            inst.wake.set()
        for inst in self.instances:
            if inst.thread.is_alive():
                inst.thread.join(timeout)
            inst.spool.close()
