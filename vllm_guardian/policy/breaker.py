"""The percentage breaker (docs/policy.md, Breaker): at most ``max_fraction`` of the targets of one
scope (a model, a group or a profile) restarting within ``window`` seconds, fleet-wide, beside the
absolute cap of ``remediation/lease.py``. Kept in the fleet store (Redis), per scope:

- ``guardian:breaker:{<scope>}:targets`` — a sorted set of ``<node>/<target>`` by last-seen time: every
  guardian registers its targets of the scope each round (``register``); members unseen for
  ``target_ttl`` seconds drop out, so the whole counts only live targets;
- ``guardian:breaker:{<scope>}:restarts`` — ``<node>/<target>`` by the time its restart was admitted;
- ``guardian:breaker:{<scope>}:held`` — who was refused in this trip; ``...:paged`` — set once (NX) per
  trip by the guardian that pages, with the held list. The scope is the keys' hash tag: one
  scope's keys share a Redis Cluster slot, as its one admission script needs (``store_keys``).

Admission is one Lua script (atomic across guardians): allowed = max(1, floor(fraction x live
targets)). Redis unreachable: ``when_redis_down`` decides, as for the lease. A member's restart is
re-admitted (a guardian restarted mid-sequence keeps its place)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_guardian.store.keys import tagged

PREFIX = "guardian:breaker:"


def scope_prefix(scope: str) -> str:
    """``guardian:breaker:{<scope>}:``: every key of one scope in one Cluster slot."""
    return tagged(PREFIX, scope, ":")


_ADMIT = """
local now = tonumber(ARGV[1]); local window = tonumber(ARGV[2]); local member = ARGV[3]
local fraction = tonumber(ARGV[4]); local ttl = tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
redis.call('ZADD', KEYS[2], now, member)
redis.call('EXPIRE', KEYS[2], math.ceil(ttl))
local total = redis.call('ZCARD', KEYS[2])
local allowed = math.max(1, math.floor(fraction * total + 1e-9))
if redis.call('ZSCORE', KEYS[1], member) then
  return {1, redis.call('ZCARD', KEYS[1]), allowed, total}
end
local n = redis.call('ZCARD', KEYS[1])
if n < allowed then
  redis.call('ZADD', KEYS[1], now, member)
  redis.call('EXPIRE', KEYS[1], math.ceil(window))
  redis.call('SREM', KEYS[3], member)
  return {1, n + 1, allowed, total}
end
redis.call('SADD', KEYS[3], member)
redis.call('EXPIRE', KEYS[3], math.ceil(window))
return {0, n, allowed, total}
"""


@dataclass(frozen=True)
class BreakerResult:
    granted: bool
    reason: str
    page: tuple[str, ...] = ()  # set on the one refusal that pages: what is held so far


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class PercentBreaker:
    def __init__(
        self, client: Any, *, node: str, max_fraction: float, window: float, when_redis_down: str, target_ttl: float
    ) -> None:
        self.client = client  # a redis.Redis with socket timeouts, or None
        self.node = node
        self.fraction = max_fraction
        self.window = max(1.0, window)
        self.when_down = when_redis_down
        self.ttl = max(1.0, target_ttl)

    def _member(self, target: str) -> str:
        return f"{self.node}/{target}"

    def _down(self, why: str) -> BreakerResult:
        if self.when_down == "allow":
            return BreakerResult(True, f"breaker not checked ({why}); allowed by policy.fleet.when_redis_down")
        return BreakerResult(False, f"breaker unavailable ({why}); denied by policy.fleet.when_redis_down")

    def register(self, scope: str, targets: list[str], now: float) -> bool:
        """Count these targets of ``scope`` as live (each guardian, every round)."""
        if self.client is None or not targets:
            return False
        key = scope_prefix(scope) + "targets"
        try:
            self.client.zadd(key, {self._member(t): now for t in targets})
            self.client.expire(key, int(self.ttl) + 1)
            return True
        except Exception:  # noqa: BLE001 - Redis down: admission's fail-safe decides later
            return False

    def admit(self, scope: str, target: str, now: float) -> BreakerResult:
        if self.client is None:
            return self._down("no Redis configured")
        p = scope_prefix(scope)
        member = self._member(target)
        try:
            ok, n, allowed, total = self.client.eval(
                _ADMIT, 3, p + "restarts", p + "targets", p + "held", now, self.window, member, self.fraction, self.ttl
            )
            if ok:
                return BreakerResult(True, f"breaker {scope}: {n} of {allowed} allowed ({total} targets)")
            reason = (
                f"breaker {scope} tripped: {n} of {total} targets restarted within {self.window:g}s "
                f"(at most {allowed}); held"
            )
            if self.client.set(p + "paged", member, nx=True, ex=int(self.window)):
                held = tuple(sorted(_text(m) for m in self.client.smembers(p + "held")))
                return BreakerResult(False, reason, page=held)
            return BreakerResult(False, reason)
        except Exception as e:  # noqa: BLE001 - redis.ConnectionError, TimeoutError, ...: the fail-safe decides
            return self._down(f"{type(e).__name__}: {e}")

    def held(self, scope: str) -> list[str]:
        if self.client is None:
            return []
        try:
            return sorted(_text(m) for m in self.client.smembers(scope_prefix(scope) + "held"))
        except Exception:  # noqa: BLE001
            return []
