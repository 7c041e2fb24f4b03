"""The fleet-wide restart cap (docs/design.md, Safety gates): at most N targets restarting at once across all nodes.

N slots in Redis, ``guardian:lease:{restart}:<i>``, and a fence counter ``guardian:lease:{restart}:fence``
(one hash tag: one Redis Cluster slot, as the one acquisition script needs). A slot holds
``<node>/<target> <token>``; the token is the fence counter's next value, taken when the slot is:
it only ever grows, so a grant is told from any earlier one. Taking a slot we already hold
succeeds and keeps its token (a guardian restarted mid-sequence keeps its lease); ``check``
(before a stop) and ``renew`` succeed only while the slot still holds our token; release deletes
a slot only if it still does (atomic, Lua). When Redis cannot be reached the configured
fail-safe decides (``when_redis_down``: allow | deny).

On a store that can fail over (Sentinel, Cluster), a grant counts only once ``replicas`` replicas
have acknowledged it (``WAIT``, on the connection that wrote it): a failover promotes a replica
that has the grant, so it cannot be handed out twice. When fewer acknowledge within
``replica_timeout`` the slot is given back and the restart waits, saying why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

PREFIX = "guardian:lease:{restart}:"
FENCE = "fence"

# KEYS[1..n] the slots, KEYS[n+1] the fence counter; ARGV[1] '<node>/<target>', ARGV[2] ttl ms.
# Returns {slot, token, new (1) | ours already (0)}, or {-1, 0, 0} when every slot is taken.
_ACQUIRE = """
local n = #KEYS - 1
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  if v then
    local m, t = string.match(v, '^(.*) (%d+)$')
    if m == ARGV[1] then
      redis.call('PEXPIRE', KEYS[i], ARGV[2])
      return {i - 1, tonumber(t), 0}
    end
  end
end
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    local token = redis.call('INCR', KEYS[n + 1])
    redis.call('SET', KEYS[i], ARGV[1] .. ' ' .. token, 'PX', ARGV[2])
    return {i - 1, token, 1}
  end
end
return {-1, 0, 0}
"""
# KEYS[1] a slot; ARGV[1] '<node>/<target> <token>', ARGV[2] ttl ms (renew) or '' (check only)
_HOLDS = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end"


@dataclass(frozen=True)
class LeaseResult:
    granted: bool
    reason: str
    slot: int | None = None
    token: int | None = None  # the fence token of this grant


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class Lease(Protocol):
    """What the restart sequence's lease phase takes, renews and gives back (``FleetLease``, ``GroupGate``)."""

    def acquire(self, target: str) -> LeaseResult: ...

    def check(self, target: str, slot: int | None, token: int | None) -> LeaseResult: ...

    def renew(self, target: str, slot: int | None, token: int | None = None) -> bool: ...

    def release(self, target: str, slot: int | None, token: int | None = None) -> bool: ...


class FleetLease:
    def __init__(
        self,
        client: Any,
        node: str,
        max_concurrent: int,
        ttl: float,
        when_redis_down: str,
        *,
        replicas: int = 0,
        replica_timeout: float = 1.0,
        prefix: str = PREFIX,
    ) -> None:
        self.client = client  # a redis.Redis with socket timeouts, or None when no Redis is configured
        self.node = node
        self.max_concurrent = max_concurrent
        self.ttl = max(1, int(ttl))
        self.when_down = when_redis_down
        self.replicas = max(0, int(replicas))  # WAIT for this many replicas' word on a grant (0: none)
        self.replica_timeout = replica_timeout
        self.prefix = prefix

    def key(self, slot: int) -> str:
        return f"{self.prefix}{slot}"

    def _member(self, target: str) -> str:
        return f"{self.node}/{target}"

    def _value(self, target: str, token: int) -> str:
        return f"{self._member(target)} {token}"

    def _down(self, why: str) -> LeaseResult:
        if self.when_down == "allow":
            return LeaseResult(True, f"fleet lease not checked ({why}); allowed by policy.fleet.when_redis_down")
        return LeaseResult(False, f"fleet lease unavailable ({why}); denied by policy.fleet.when_redis_down")

    def acquire(self, target: str) -> LeaseResult:
        if self.client is None:
            return self._down("no Redis configured")
        keys = [self.key(i) for i in range(self.max_concurrent)] + [self.prefix + FENCE]
        args = [self._member(target), self.ttl * 1000]
        try:
            if self.replicas:
                slot, token, new, acked = self._acquire_replicated(keys, args)
            else:
                slot, token, new = (int(x) for x in self.client.eval(_ACQUIRE, len(keys), *keys, *args))
                acked = 0
            if slot < 0:
                return LeaseResult(False, f"fleet cap {self.max_concurrent} reached; restarting now: {self._holders()}")
            if self.replicas and acked < self.replicas:
                self.release(target, slot, token)
                return LeaseResult(
                    False,
                    f"fleet lease slot {slot} (token {token}) acknowledged by {acked} of {self.replicas} replica(s) "
                    f"within {self.replica_timeout:g}s: a failover of the fleet store could hand it out twice; "
                    "not acting on it (waiting)",
                )
            how = "" if new else " (already ours)"
            return LeaseResult(
                True, f"fleet lease slot {slot} of {self.max_concurrent}{how}, token {token}", slot, token
            )
        except Exception as e:  # noqa: BLE001 - redis.ConnectionError, TimeoutError, ...: the fail-safe decides
            return self._down(f"{type(e).__name__}: {e}")

    def _acquire_replicated(self, keys: list[str], args: list[Any]) -> tuple[int, int, int, int]:
        """The acquisition and a ``WAIT`` on one connection (WAIT counts that connection's writes)."""
        from vllm_guardian.store.client import connection_for

        pipe = connection_for(self.client, keys[0]).pipeline(transaction=False)
        pipe.eval(_ACQUIRE, len(keys), *keys, *args)
        pipe.wait(self.replicas, max(1, int(self.replica_timeout * 1000)))
        (slot, token, new), acked = pipe.execute()
        return int(slot), int(token), int(new), int(acked)

    def _holders(self) -> str:
        holders = []
        for slot in range(self.max_concurrent):
            h = self.client.get(self.key(slot))
            if h is not None:
                holders.append(_text(h).rsplit(" ", 1)[0])
        return ", ".join(holders) or "?"

    def check(self, target: str, slot: int | None, token: int | None) -> LeaseResult:
        """Do we still hold ``slot`` with ``token``? Asked before a stop: False when a failover or
        an expiry lost the grant (whoever holds the slot now may be restarting)."""
        if self.client is None or slot is None or token is None:
            return self._down("no lease token to check")
        try:
            if int(self.client.eval(_HOLDS, 1, self.key(slot), self._value(target, token), "")):
                return LeaseResult(True, f"fleet lease slot {slot} still ours (token {token})", slot, token)
            held = self.client.get(self.key(slot))
            now = "free" if held is None else f"held by {_text(held)}"
            return LeaseResult(False, f"fleet lease slot {slot} token {token} lost (the slot is {now})", slot, token)
        except Exception as e:  # noqa: BLE001 - Redis down: the fail-safe decides
            return self._down(f"{type(e).__name__}: {e}")

    def renew(self, target: str, slot: int | None, token: int | None = None) -> bool:
        if self.client is None or slot is None or token is None:
            return False
        try:
            return bool(int(self.client.eval(_HOLDS, 1, self.key(slot), self._value(target, token), self.ttl * 1000)))
        except Exception:  # noqa: BLE001 - any Redis failure: the lease is not renewed
            return False

    def release(self, target: str, slot: int | None, token: int | None = None) -> bool:
        if self.client is None or slot is None or token is None:
            return False
        try:
            return bool(self.client.eval(_RELEASE, 1, self.key(slot), self._value(target, token)))
        except Exception:  # noqa: BLE001 - any Redis failure: the TTL frees the slot
            return False  # the TTL frees it
