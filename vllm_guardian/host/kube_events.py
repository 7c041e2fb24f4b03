"""Kubernetes Events, recorded the way the kubelet records them (client-go's event correlator).

Decides, per Event asked for (an object, a type, a reason, a message):
- spam filter: each object has a token bucket (``burst`` Events, one more every ``refill``
  seconds); an Event beyond it is dropped and counted (``dropped``);
- aggregation: more than ``AGGREGATE_AFTER`` different messages with one reason on one object
  within ``AGGREGATE_WINDOW`` seconds become one Event, "(combined from similar events): <latest>";
- deduplication: the same object, type, reason and message again raises the existing Event's
  ``count`` and ``lastTimestamp`` (a merge patch) instead of creating another; when that Event has
  expired on the server (404), a new one is created.
Sends through ``KubeClient.create_event`` / ``patch_event`` (core/v1 Events, which ``kubectl
describe`` shows with their count). Not thread-safe: one publisher thread owns it.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

from vllm_guardian.host.kube import ApiError, KubeClient

AGGREGATE_AFTER = 10
AGGREGATE_WINDOW = 600.0
COMBINED = "(combined from similar events): "
CACHE_SIZE = 4096
SOURCE = "vllm-guardian"


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about: a Pod, or this Node (namespace ``default``, uid = its name)."""

    kind: str
    namespace: str
    name: str
    uid: str

    def as_involved(self) -> dict[str, Any]:
        out = {"apiVersion": "v1", "kind": self.kind, "name": self.name, "uid": self.uid}
        if self.kind != "Node":
            out["namespace"] = self.namespace
        return out


def rfc3339(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall))


class EventRecorder:
    def __init__(
        self,
        client: KubeClient,
        host: str,
        *,
        burst: int = 25,
        refill: float = 300.0,
        wall: Callable[[], float] = time.time,
        log: logging.Logger | None = None,
    ) -> None:
        self.client, self.host, self.burst, self.refill, self.wall = client, host, burst, refill, wall
        self.log = log or logging.getLogger("guardian.kube")
        self.dropped = 0
        self._last_ns = 0
        self.created = 0
        self.repeated = 0
        self._buckets: dict[str, tuple[float, float]] = {}  # object uid -> (tokens, at)
        self._seen: OrderedDict[tuple[str, ...], tuple[str, int, str]] = OrderedDict()  # key -> (name, count, first)
        self._similar: dict[tuple[str, ...], dict[str, float]] = {}  # (uid, type, reason) -> message -> last wall

    def _allow(self, uid: str, now: float) -> bool:
        tokens, at = self._buckets.get(uid, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) / self.refill)
        if tokens < 1.0:
            self._buckets[uid] = (tokens, now)
            return False
        self._buckets[uid] = (tokens - 1.0, now)
        return True

    def _aggregate(self, obj: ObjectRef, etype: str, reason: str, message: str, now: float) -> str:
        key = (obj.uid, etype, reason)
        recent = {m: t for m, t in self._similar.get(key, {}).items() if now - t < AGGREGATE_WINDOW}
        recent[message] = now
        self._similar[key] = recent
        return COMBINED + message if len(recent) > AGGREGATE_AFTER else message

    def record(self, obj: ObjectRef, etype: str, reason: str, message: str) -> str:
        """Post (or count up) one Event; returns what was done: created, repeated, dropped."""
        now = self.wall()
        if not self._allow(obj.uid, now):
            self.dropped += 1
            self.log.info("kubernetes event held back (rate limit) on %s %s: %s", obj.kind, obj.name, reason)
            return "dropped"
        message = self._aggregate(obj, etype, reason, message[:1024], now)
        # a combined Event is one per object and reason: its count rises, its message is the latest
        same = COMBINED if message.startswith(COMBINED) else message
        key = (obj.kind, obj.namespace, obj.name, obj.uid, etype, reason, same)
        stamp = rfc3339(now)
        if key in self._seen:
            name, count, first = self._seen[key]
            try:
                change = {"count": count + 1, "lastTimestamp": stamp}
                if same == COMBINED:
                    change["message"] = message
                self.client.patch_event(obj.namespace, name, change)
                self._seen[key] = (name, count + 1, first)
                self._seen.move_to_end(key)
                self.repeated += 1
                return "repeated"
            except ApiError as e:
                if e.code != 404:  # expired on the server (events live an hour): create it anew
                    raise
        self._last_ns = max(int(now * 1e9), self._last_ns + 1)  # unique even within one clock tick
        name = f"{obj.name}.{self._last_ns:x}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": obj.namespace},
            "involvedObject": obj.as_involved(),
            "reason": reason,
            "message": message,
            "type": etype,
            "source": {"component": SOURCE, "host": self.host},
            "reportingComponent": SOURCE,
            "reportingInstance": self.host,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self.client.create_event(obj.namespace, event)
        self._seen[key] = (name, 1, stamp)
        if len(self._seen) > CACHE_SIZE:
            self._seen.popitem(last=False)
        self.created += 1
        return "created"
