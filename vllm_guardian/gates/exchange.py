"""L4 across nodes: each guardian publishes its targets' greedy-answer fingerprints in Redis.

One hash per (model, vLLM version): ``guardian:gates:fp:<digest>``, field
``<node>/<target>``, value ``{"fps": {prompt: fingerprint}, "t": wall}``; the key
expires after ``ttl`` seconds without a write. ``peers`` reads the hash back,
leaving out this node's own entries (local peers are compared directly) and
entries older than ``max_age``. Called from the round job (off the loop thread);
errors come back as a note, never raised.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Mapping

PREFIX = "guardian:gates:fp:"


def key_for(model: str, version: str) -> str:
    return PREFIX + hashlib.sha256(f"{model}\x1f{version}".encode()).hexdigest()[:16]


class FingerprintExchange:
    def __init__(self, client: Any, node: str, wall: Callable[[], float]) -> None:
        self.client, self.node, self.wall = client, node, wall

    def share(
        self, model: str, version: str, target: str, fps: Mapping[str, str], ttl: float, max_age: float
    ) -> tuple[list[dict[str, str]], str | None]:
        """Publishes ``fps`` and returns (remote peers' fingerprints, a note on error)."""
        key = key_for(model, version)
        now = self.wall()
        try:
            self.client.hset(key, f"{self.node}/{target}", json.dumps({"fps": dict(fps), "t": now}))
            self.client.expire(key, max(1, int(ttl)))
            raw = self.client.hgetall(key)
        except Exception as e:  # noqa: BLE001 - Redis down or slow: L4 falls back to this node's peers
            return [], f"L4 across nodes unavailable: {type(e).__name__}: {e}"[:200]
        peers: list[dict[str, str]] = []
        for field, value in raw.items():
            name = field.decode() if isinstance(field, bytes) else str(field)
            if name.split("/", 1)[0] == self.node:
                continue
            try:
                entry = json.loads(value)
                if now - float(entry["t"]) <= max_age and isinstance(entry["fps"], dict):
                    peers.append({str(k): str(v) for k, v in entry["fps"].items()})
            except (ValueError, KeyError, TypeError):
                continue  # a foreign or broken entry does not vote
        return peers, None
