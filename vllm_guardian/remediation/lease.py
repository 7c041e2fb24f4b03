"""The fleet-wide restart cap (docs/design.md, Safety gates): at most N targets restarting at once across all nodes.

N slots in Redis, ``guardian:lease:restart:<i>``, each taken with ``SET NX EX ttl``
and holding ``<node>/<target>``. Taking a slot we already hold succeeds (a
guardian restarted mid-sequence keeps its lease); release deletes a slot only
if it still holds our value (atomic, Lua). When Redis cannot be reached the
configured fail-safe decides (``when_redis_down``: allow | deny).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

KEY = "guardian:lease:restart:{}"
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end"


@dataclass(frozen=True)
class LeaseResult:
    granted: bool
    reason: str
    slot: int | None = None


class Lease(Protocol):
    """What the restart sequence's lease phase takes, renews and gives back (``FleetLease``, ``GroupGate``)."""

    def acquire(self, target: str) -> LeaseResult: ...

    def renew(self, target: str, slot: int | None) -> bool: ...

    def release(self, target: str, slot: int | None) -> bool: ...


class FleetLease:
    def __init__(self, client: Any, node: str, max_concurrent: int, ttl: float, when_redis_down: str) -> None:
        self.client = client  # a redis.Redis with socket timeouts, or None when no Redis is configured
        self.node = node
        self.max_concurrent = max_concurrent
        self.ttl = max(1, int(ttl))
        self.when_down = when_redis_down

    def _value(self, target: str) -> str:
        return f"{self.node}/{target}"

    def _down(self, why: str) -> LeaseResult:
        if self.when_down == "allow":
            return LeaseResult(True, f"fleet lease not checked ({why}); allowed by policy.fleet.when_redis_down")
        return LeaseResult(False, f"fleet lease unavailable ({why}); denied by policy.fleet.when_redis_down")

    def acquire(self, target: str) -> LeaseResult:
        if self.client is None:
            return self._down("no Redis configured")
        value = self._value(target)
        try:
            for slot in range(self.max_concurrent):
                key = KEY.format(slot)
                if self.client.set(key, value, nx=True, ex=self.ttl):
                    return LeaseResult(True, f"fleet lease slot {slot} of {self.max_concurrent}", slot)
                held = self.client.get(key)
                if held is not None and (held.decode() if isinstance(held, bytes) else held) == value:
                    self.client.expire(key, self.ttl)
                    return LeaseResult(True, f"fleet lease slot {slot} (already ours)", slot)
            holders = []
            for slot in range(self.max_concurrent):
                h = self.client.get(KEY.format(slot))
                if h is not None:
                    holders.append(h.decode() if isinstance(h, bytes) else h)
            return LeaseResult(
                False, f"fleet cap {self.max_concurrent} reached; restarting now: {', '.join(holders) or '?'}"
            )
        except Exception as e:  # noqa: BLE001 - redis.ConnectionError, TimeoutError, ...: the fail-safe decides
            return self._down(f"{type(e).__name__}: {e}")

    def renew(self, target: str, slot: int | None) -> bool:
        if self.client is None or slot is None:
            return False
        try:
            key = KEY.format(slot)
            held = self.client.get(key)
            if held is not None and (held.decode() if isinstance(held, bytes) else held) == self._value(target):
                return bool(self.client.expire(key, self.ttl))
        except Exception:  # noqa: BLE001 - any Redis failure: the lease is not renewed
            return False
        return False

    def release(self, target: str, slot: int | None) -> bool:
        if self.client is None or slot is None:
            return False
        try:
            return bool(self.client.eval(_RELEASE, 1, KEY.format(slot), self._value(target)))
        except Exception:  # noqa: BLE001 - any Redis failure: the TTL frees the slot
            return False  # the TTL frees it
