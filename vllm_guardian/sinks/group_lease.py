"""The group lease: at most one node acts on a group at a time (Redis ``SET NX PX``).

``guardian:group-lease:<group>`` holds ``<node> <token>``; the token is random per acquisition, so
only the node that set it can renew or release it (compare-and-set in a Lua script). Anyone who can
write the fleet Redis can delete or squat the key: the most that causes is that no node acts (the
group is escalated to a human when the lease cannot be had), never that a node acts without it.
"""

from __future__ import annotations

import secrets
from typing import Any

LEASE_PREFIX = "guardian:group-lease:"
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def _s(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, (bytes, bytearray)) else str(value)


def lease_key(group: str, prefix: str = LEASE_PREFIX) -> str:
    return f"{prefix}{group}"


class GroupLease:
    """This node's hold on group leases (``client``: the Redis seam)."""

    def __init__(self, client: Any, node: str, *, prefix: str = LEASE_PREFIX) -> None:
        self.client = client
        self.node = node
        self.prefix = prefix
        self._held: dict[str, str] = {}  # group -> the value this node set

    def acquire(self, group: str, ttl: float) -> bool:
        """True when this node now holds the lease (newly, or renewed); False when another node does."""
        if group in self._held and self.renew(group, ttl):
            return True
        value = f"{self.node} {secrets.token_hex(16)}"
        if self.client.set(lease_key(group, self.prefix), value, nx=True, px=max(1, int(ttl * 1000))):
            self._held[group] = value
            return True
        return False

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
