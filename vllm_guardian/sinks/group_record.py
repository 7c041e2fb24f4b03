"""Group records in the fleet store: each node's signed record of its members, and every node's read back.

``guardian:group:<group>`` is a Redis hash, one field per node, each value the signed JSON of
``groups.record.encode``; the key's TTL is refreshed on every write, and a record older than
``max_age`` is stale whatever the TTL says. ``GroupBoard.read`` scans at most ``MAX_NODES`` fields
(HSCAN, never HGETALL) and decodes each with the trust keys: a forged, misfiled, stale or malformed
record is a ``Rejected`` in the view and counted, never a member. Redis errors propagate as the
redis library raises them; the caller logs once, counts, and goes on.
"""

from __future__ import annotations

from typing import Any

from vllm_guardian.gates import trust
from vllm_guardian.groups import record as rec

GROUP_PREFIX = "guardian:group:"
MAX_NODES = 512  # fields of one group's hash read; the rest are ignored and said so


def _s(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, (bytes, bytearray)) else str(value)


def group_key(group: str, prefix: str = GROUP_PREFIX) -> str:
    return f"{prefix}{group}"


class GroupBoard:
    """This node's group records written to, and every node's read from, the fleet store (``client``: the seam)."""

    def __init__(self, client: Any, keys: trust.Keys, *, prefix: str = GROUP_PREFIX, ttl: float = 60.0) -> None:
        self.client = client
        self.keys = keys
        self.prefix = prefix
        self.ttl = ttl

    def publish(self, record: rec.NodeRecord) -> None:
        """Write (replace) this node's record of its members of ``record.group``."""
        key = group_key(record.group, self.prefix)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, record.node, rec.encode(record, self.keys))
        pipe.pexpire(key, max(1, int(self.ttl * 1000)))
        pipe.execute()

    def withdraw(self, group: str, node: str) -> None:
        """Remove this node's record (its members left the group)."""
        self.client.hdel(group_key(group, self.prefix), node)

    def read(self, group: str, *, now: float, max_age: float) -> rec.GroupView:
        """Every node's believed record of ``group`` joined into one view; rejected records listed."""
        items: list[rec.NodeRecord | rec.Rejected] = []
        for n, (field, value) in enumerate(self.client.hscan_iter(group_key(group, self.prefix), count=100)):
            if n >= MAX_NODES:
                items.append(rec.Rejected("*", rec.MALFORMED, f"more than {MAX_NODES} nodes; the rest not read"))
                break
            node = _s(field)[:128]
            items.append(rec.decode(value, self.keys, group=group, node=node, now=now, max_age=max_age))
        return rec.view(group, items)
