"""One alert event into the Redis stream and channel, at most once per event id.

Decides nothing about order or retries (the sink's flusher does): one Lua script that, atomically,
skips an id already recorded in ``{<stream>}:delivered:<node>`` (a sorted set of the recent ids, in
the stream's Cluster slot: ``store_keys.beside``),
else ``XADD``s the event to the stream (``MAXLEN ~``), records the id and ``PUBLISH``es the JSON
on the channel. Raises what the client raises.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from vllm_guardian.sinks.events import event_time_ms
from vllm_guardian.store_keys import beside

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
    ) -> None:
        self.client = client
        self.stream = stream
        self.channel = channel or ""
        self.maxlen = int(maxlen)
        self.delivered_key = delivered_key or delivered_key_of(stream, node)
        self.delivered_keep = int(delivered_keep)
        self._script = client.register_script(DELIVER_SCRIPT)

    def deliver(self, event: Mapping[str, Any]) -> bool:
        """True when delivered now, False when this id had already been delivered. Raises on Redis errors."""
        payload = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        done = self._script(
            keys=[self.delivered_key, self.stream],
            args=[event["id"], payload, self.maxlen, self.channel, event_time_ms(event), self.delivered_keep],
        )
        return int(done) == 1
