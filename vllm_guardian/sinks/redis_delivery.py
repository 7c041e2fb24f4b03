"""One alert event into the Redis stream and channel, at most once per event id.

Decides nothing about order or retries (the sink's flusher does): one Lua script that, atomically,
skips an id already recorded in ``{<stream>}:delivered:<node>`` (a sorted set of the recent ids, in
the stream's Cluster slot: ``store_keys.beside``),
else ``XADD``s the event to the stream (``MAXLEN ~``), records the id and ``PUBLISH``es the JSON
on the channel. Raises what the client raises.

On a store that fails over (Sentinel, Cluster) ``deliver_batch`` sends a batch and a ``WAIT`` for
``replicas`` replicas down one connection (``WAIT`` counts that connection's writes): the caller
forgets an event only once replicas hold it, so a failover to a replica loses none; what a
failover did lose is sent again, and what it did not is skipped by its id (the script's writes
replicate together: an event and its id survive or vanish as one).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from vllm_guardian.sinks.events import event_time_ms
from vllm_guardian.store.keys import beside

DEFAULT_DELIVERED_KEEP = 100_000

# KEYS[1] delivered-id zset, KEYS[2] stream
# ARGV: 1 event id, 2 event JSON, 3 stream maxlen, 4 channel ('' = none), 5 score (ms), 6 ids to keep
DELIVER_SCRIPT = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'id', ARGV[1], 'event', ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[5], ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(tonumber(ARGV[6]) + 1))
if ARGV[4] ~= '' then
  redis.call('PUBLISH', ARGV[4], ARGV[2])
end
return 1
"""


def delivered_key_of(stream: str, node: str) -> str:
    """``{<stream>}:delivered:<node>``: the node's delivered ids, in the stream's Cluster slot."""
    return beside(stream, f":delivered:{node}")


class RedisDelivery:
    """One event into the stream and the channel, at most once per id (atomic, server side)."""

    def __init__(
        self,
        client,
        *,
        node: str,
        stream: str,
        channel: str | None,
        maxlen: int,
        delivered_key: str | None = None,
        delivered_keep: int = DEFAULT_DELIVERED_KEEP,
        replicas: int = 0,
        replica_timeout: float = 1.0,
    ) -> None:
        self.client = client
        self.stream = stream
        self.channel = channel or ""
        self.maxlen = int(maxlen)
        self.delivered_key = delivered_key or delivered_key_of(stream, node)
        self.delivered_keep = int(delivered_keep)
        self._script = client.register_script(DELIVER_SCRIPT)
        self.replicas = max(0, int(replicas))
        self.replica_timeout = replica_timeout

    def _args(self, event: Mapping[str, Any]) -> list[Any]:
        payload = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        return [event["id"], payload, self.maxlen, self.channel, event_time_ms(event), self.delivered_keep]

    def deliver(self, event: Mapping[str, Any]) -> bool:
        """True when delivered now, False when this id had already been delivered. Raises on Redis errors."""
        done = self._script(keys=[self.delivered_key, self.stream], args=self._args(event))
        return int(done) == 1

    def deliver_batch(self, events: Sequence[Mapping[str, Any]]) -> tuple[list[bool], int]:
        """Each event once (True: new, False: a duplicate skipped), then ``WAIT``: (results, replicas
        that acknowledged them all). Raises on Redis errors (nothing of the batch is then known)."""
        from vllm_guardian.store.client import connection_for

        pipe = connection_for(self.client, self.stream).pipeline(transaction=False)
        for event in events:
            self._script(keys=[self.delivered_key, self.stream], args=self._args(event), client=pipe)
        pipe.wait(self.replicas, max(1, int(self.replica_timeout * 1000)))
        *done, acked = pipe.execute()
        return [int(d) == 1 for d in done], int(acked)
