"""The fleet seen through Redis: node heartbeats, and the alert stream read back.

- ``NodeHeartbeat.write`` sets ``guardian:node:<node>`` to a JSON node summary
  (``surface/heartbeat.py``) with a TTL; ``fleet_status`` lists every live node (``SCAN``, never ``KEYS``) and
  ``render_fleet`` draws them as a table (``guardian status --fleet``).
- ``tail`` reads the last or the next events of the stream; ``ensure_group``,
  ``read_group``, ``ack`` and ``autoclaim`` are the consumer-group recipe
  (XGROUP CREATE / XREADGROUP / XACK / XAUTOCLAIM) behind ``guardian alerts
  tail|ack`` (``alerts_main``).

Every function takes the Redis client as an argument (the seam).
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Iterable, Mapping, Sequence, TextIO

from vllm_guardian.errors import BackendUnavailable

NODE_PREFIX = "guardian:node:"
Entry = tuple[str, dict[str, Any]]


def _s(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, (bytes, bytearray)) else str(value)


# ---------------------------------------------------------------- heartbeats
def node_key(node: str, prefix: str = NODE_PREFIX) -> str:
    return f"{prefix}{node}"


class NodeHeartbeat:
    """Writes this node's summary under ``guardian:node:<node>`` with a TTL."""

    def __init__(self, client, prefix: str = NODE_PREFIX) -> None:
        self.client = client
        self.prefix = prefix

    def write(self, node: str, summary: Mapping[str, Any], ttl: float) -> None:
        doc = dict(summary)
        doc["node"] = node
        self.client.set(node_key(node, self.prefix), json.dumps(doc, separators=(",", ":")), px=max(1, int(ttl * 1000)))


def fleet_status(client, prefix: str = NODE_PREFIX, batch: int = 100) -> list[dict[str, Any]]:
    """Every node with a live heartbeat, sorted by node name; ``ttl_s`` is what is left of its TTL."""
    keys = sorted({_s(k) for k in client.scan_iter(match=f"{prefix}*", count=batch)})
    rows: list[dict[str, Any]] = []
    for i in range(0, len(keys), batch):
        chunk = keys[i : i + batch]
        pipe = client.pipeline(transaction=False)
        for k in chunk:
            pipe.get(k)
            pipe.pttl(k)
        replies = pipe.execute()
        for k, raw, pttl in zip(chunk, replies[0::2], replies[1::2], strict=True):
            if raw is None:  # expired between SCAN and GET
                continue
            node = k[len(prefix) :]
            try:
                doc = json.loads(_s(raw))
                if not isinstance(doc, dict):
                    raise ValueError("not an object")
            except ValueError:
                doc = {"error": "unreadable heartbeat"}
            doc["node"] = node
            doc["ttl_s"] = None if pttl is None or int(pttl) < 0 else int(pttl) / 1000.0
            rows.append(doc)
    return sorted(rows, key=lambda r: r["node"])


def _age(then: Any, now: float) -> str:
    if not isinstance(then, (int, float)):
        return "-"
    secs = max(0.0, now - then)
    return f"{secs:.0f}s" if secs < 120 else f"{secs / 60:.0f}m"


def render_fleet(rows: Sequence[Mapping[str, Any]], now_wall: float) -> str:
    """One line per node, then one per target with an open incident."""
    if not rows:
        return "no guardian heartbeats in Redis"
    header = f"{'NODE':<24} {'VERSION':<9} {'SEEN':>5} {'TARGETS':>8} {'SERVING':>8} {'INCIDENTS':>9} {'SPOOL':>6}"
    lines = [header]
    for r in rows:
        targets = r.get("targets") or []
        serving = sum(1 for t in targets if t.get("phase") == "serving")
        spool = (r.get("alerts") or {}).get("spooled")
        lines.append(
            f"{_s(r['node'])[:24]:<24} {_s(r.get('version') or '-')[:9]:<9} "
            f"{_age(r.get('time'), now_wall):>5} {len(targets):>8} {serving:>8} "
            f"{len(r.get('incidents') or []):>9} {'-' if spool is None else spool:>6}"
        )
        if r.get("error"):
            lines.append(f"  {r['error']}")
        for t in targets:
            if t.get("incidents"):
                lines.append(f"  {t.get('name')}: {t.get('phase')} — {', '.join(map(str, t['incidents']))}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the stream, read back
def parse_entry(entry_id: Any, fields: Mapping[Any, Any]) -> Entry:
    """A stream entry ``(id, {event: JSON, id: event id})`` -> ``(entry id, event)``."""
    f = {_s(k): _s(v) for k, v in fields.items()}
    try:
        event = json.loads(f.get("event", ""))
        if not isinstance(event, dict):
            raise ValueError("not an object")
    except ValueError:
        event = {"id": f.get("id"), "error": "unreadable event", "raw": f.get("event")}
    return _s(entry_id), event


def _entries(raw: Iterable[Any]) -> list[Entry]:
    return [parse_entry(eid, fields) for eid, fields in raw if fields is not None]


def tail(client, stream: str, *, count: int = 10, after: str | None = None, block_ms: int | None = None) -> list[Entry]:
    """The last ``count`` entries (oldest first) or, with ``after`` (an entry id or ``$``), the next
    ones, waiting up to ``block_ms``. The client's socket timeout must exceed ``block_ms``."""
    if after is None:
        return list(reversed(_entries(client.xrevrange(stream, "+", "-", count=count))))
    reply = client.xread({stream: after}, count=count, block=block_ms)
    return [e for _stream, raw in (reply or []) for e in _entries(raw)]


def ensure_group(client, stream: str, group: str, start_id: str = "0") -> bool:
    """Create the consumer group (and the stream) if missing; True when created now."""
    import redis

    try:
        client.xgroup_create(stream, group, id=start_id, mkstream=True)
        return True
    except redis.ResponseError as e:
        if "BUSYGROUP" in str(e):
            return False
        raise


def read_group(
    client,
    stream: str,
    group: str,
    consumer: str,
    count: int = 10,
    block_ms: int | None = None,
    *,
    pending: bool = False,
) -> list[Entry]:
    """New entries for this consumer (``>``), or with ``pending`` its own unacknowledged ones."""
    reply = client.xreadgroup(group, consumer, {stream: "0" if pending else ">"}, count=count, block=block_ms)
    return [e for _stream, raw in (reply or []) for e in _entries(raw)]


def ack(client, stream: str, group: str, *entry_ids: str) -> int:
    """Acknowledge entries; returns how many were pending."""
    return int(client.xack(stream, group, *entry_ids)) if entry_ids else 0


def autoclaim(
    client, stream: str, group: str, consumer: str, min_idle_ms: int, *, start_id: str = "0-0", count: int = 10
) -> tuple[str, list[Entry]]:
    """Take over entries pending longer than ``min_idle_ms`` (a dead consumer's); returns the cursor
    to continue from (``0-0`` when the scan is complete) and the claimed entries."""
    reply = client.xautoclaim(stream, group, consumer, min_idle_ms, start_id=start_id, count=count)
    return _s(reply[0]), _entries(reply[1])


def format_event(entry_id: str, event: Mapping[str, Any]) -> str:
    target = event.get("target") or {}
    return (
        f"{entry_id}  {event.get('timestamp') or '-'}  {str(event.get('status') or '?').upper():<8} "
        f"{event.get('severity') or '-':<8} {event.get('node')}/{target.get('name')}  "
        f"{event.get('kind')}  {event.get('summary') or event.get('error') or ''}"
    )


def alerts_main(
    client,
    action: str,
    *,
    stream: str,
    group: str | None = None,
    consumer: str | None = None,
    count: int = 10,
    block_ms: int | None = None,
    follow: bool = False,
    claim_idle_ms: int | None = None,
    entry_ids: Sequence[str] = (),
    as_json: bool = False,
    out: TextIO | None = None,
    keep_going: Callable[[], bool] = lambda: True,
) -> int:
    """``guardian alerts tail|ack``; returns the exit code. Redis errors become BackendUnavailable.

    - ``tail``: the last ``count`` events; with ``follow``, then wait for new ones (``block_ms``
      each round) while ``keep_going()``. With ``group``/``consumer``: first claim entries idle
      over ``claim_idle_ms`` (if given), then read new ones; they stay pending until acked.
    - ``ack``: acknowledge ``entry_ids`` in ``group``.
    """
    import redis

    out = out or sys.stdout

    def show(entries: list[Entry]) -> None:
        for eid, ev in entries:
            out.write((json.dumps({"entry_id": eid, "event": ev}) if as_json else format_event(eid, ev)) + "\n")
        out.flush()

    try:
        if action == "ack":
            if not group or not entry_ids:
                out.write("alerts ack needs --group and at least one entry id\n")
                return 2
            n = ack(client, stream, group, *entry_ids)
            out.write(f"acknowledged {n} of {len(entry_ids)}\n")
            return 0
        if action != "tail":
            out.write(f"unknown alerts action {action!r} (tail | ack)\n")
            return 2
        if group:
            if not consumer:
                out.write("alerts tail --group needs --consumer\n")
                return 2
            ensure_group(client, stream, group)
            if claim_idle_ms is not None:
                show(autoclaim(client, stream, group, consumer, claim_idle_ms, count=count)[1])
            show(read_group(client, stream, group, consumer, count, block_ms))
            while follow and keep_going():
                show(read_group(client, stream, group, consumer, count, block_ms or 5000))
            return 0
        entries = tail(client, stream, count=count)
        show(entries)
        last = entries[-1][0] if entries else "$"
        while follow and keep_going():
            more = tail(client, stream, count=count, after=last, block_ms=block_ms or 5000)
            show(more)
            if more:
                last = more[-1][0]
        return 0
    except BrokenPipeError:
        raise  # our reader went away (`| head`): not Redis's fault; the CLI ends quietly
    except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as e:  # a Cluster's are no RedisError
        raise BackendUnavailable(f"Redis: {type(e).__name__}: {e}") from None
