"""The group lease: at most one node acts on a group at a time (Redis, compare-and-set in Lua).

``guardian:group-lease:{<group>}`` holds ``<node> <fence> <nonce>``: ``fence`` is the next value of
``guardian:group-lease:{<group>}:fence`` (one hash tag, one Redis Cluster slot: the one acquisition
script touches both), so every grant of a group carries a larger token than any before it;
``nonce`` is random per acquisition, so only the node that set the value can renew, check or
release it. ``fence(group)`` is the token to check before each step of a group restart
(``check``: still ours?). On a store that can fail over, ``replicas`` replicas must acknowledge a
grant (``WAIT`` on the connection that wrote it) before it counts; else it is given back.
Anyone who can write the fleet Redis can delete or squat the key: the most that causes is that no
node acts (the group is escalated to a human when the lease cannot be had), never that a node acts
without it.
"""

from __future__ import annotations

import secrets
from typing import Any

from vllm_guardian.store.keys import tagged

LEASE_PREFIX = "guardian:group-lease:"
# KEYS[1] the lease, KEYS[2] its fence counter; ARGV[1] node, ARGV[2] nonce, ARGV[3] ttl ms
_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. fence .. ' ' .. ARGV[2], 'PX', ARGV[3])
return fence
"""
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def _s(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, (bytes, bytearray)) else str(value)


def lease_key(group: str, prefix: str = LEASE_PREFIX) -> str:
    return tagged(prefix, group)


def fence_key(group: str, prefix: str = LEASE_PREFIX) -> str:
    return tagged(prefix, group, ":fence")


class GroupLease:
    """This node's hold on group leases (``client``: the Redis seam)."""

    def __init__(
        self, client: Any, node: str, *, prefix: str = LEASE_PREFIX, replicas: int = 0, replica_timeout: float = 1.0
    ) -> None:
        self.client = client
        self.node = node
        self.prefix = prefix
        self.replicas = max(0, int(replicas))
        self.replica_timeout = replica_timeout
        self._held: dict[str, str] = {}  # group -> the value this node set

    def acquire(self, group: str, ttl: float) -> bool:
        """True when this node now holds the lease (newly, or renewed); False when another node
        does, or when too few replicas acknowledged the grant (given back: not safe to act on)."""
        if group in self._held and self.renew(group, ttl):
            return True
        nonce = secrets.token_hex(16)
        keys = [lease_key(group, self.prefix), fence_key(group, self.prefix)]
        args = [self.node, nonce, max(1, int(ttl * 1000))]
        if self.replicas:
            from vllm_guardian.store.client import connection_for

            pipe = connection_for(self.client, keys[0]).pipeline(transaction=False)
            pipe.eval(_ACQUIRE, 2, *keys, *args)
            pipe.wait(self.replicas, max(1, int(self.replica_timeout * 1000)))
            fence, acked = (int(x) for x in pipe.execute())
        else:
            fence, acked = int(self.client.eval(_ACQUIRE, 2, *keys, *args)), 0
        if not fence:
            return False
        self._held[group] = f"{self.node} {fence} {nonce}"
        if self.replicas and acked < self.replicas:
            self.release(group)
            return False
        return True

    def fence(self, group: str) -> int | None:
        """The fence token of this node's grant of ``group`` (None: not held)."""
        value = self._held.get(group)
        return int(value.split(" ")[1]) if value is not None else None

    def check(self, group: str) -> bool:
        """Is the lease still ours, with the grant's token? Asked before each step of a group restart."""
        value = self._held.get(group)
        return value is not None and _s(self.client.get(lease_key(group, self.prefix))) == value

    def renew(self, group: str, ttl: float) -> bool:
        value = self._held.get(group)
        if value is None:
            return False
        ok = bool(self.client.eval(_RENEW, 1, lease_key(group, self.prefix), value, max(1, int(ttl * 1000))))
        if not ok:
            self._held.pop(group, None)
        return ok

    def release(self, group: str) -> bool:
        value = self._held.pop(group, None)
        return value is not None and bool(self.client.eval(_RELEASE, 1, lease_key(group, self.prefix), value))

    def holder(self, group: str) -> str | None:
        """The node named in the lease (None: free). A name, not a proof: only ``acquire`` grants acting."""
        raw = self.client.get(lease_key(group, self.prefix))
        return _s(raw).split(" ", 1)[0][:128] if raw is not None else None
