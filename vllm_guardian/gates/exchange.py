"""L4 across nodes: each guardian publishes its targets' greedy-answer fingerprints in Redis.

One hash per (model, vLLM version): ``guardian:gates:fp:<digest>``, field
``<node>/<target>``, value ``{"node", "target", "fps": {prompt: fingerprint}, "t": wall}``,
signed (``kid``, ``sig``; ``gates.trust``) when trust keys are configured. The key expires
after ``ttl`` seconds without a write.

``share`` pages through the hash (HSCAN, ``PAGE`` fields a call, at most ``MAX_SCAN`` fields
a round: a hash stuffed with junk costs a bounded amount of work and never switches L4 across
nodes off) and keeps an entry only when it

- is another node's (local peers are compared directly) and names the node and target
  of its own field (a signed entry copied under another field does not vote);
- is at most ``MAX_ENTRY`` bytes of JSON with a ``fps`` object of at most ``MAX_PROMPTS``;
- with keys, is signed by one of them (unsigned / badly signed entries are dropped);
- is stamped neither older than ``max_age`` nor ahead of this clock by more than
  ``max_skew`` (a forged entry stamped in the future is not fresh forever);

then counts each node once (its newest entry) and returns nothing unless at least
``min_nodes`` distinct nodes remain: a few entries cannot outvote a healthy instance.
Pages are read as bytes: a field or value that is not UTF-8 is junk like any other, not an
error of every page. What can never vote here is deleted (HDEL, page by page) — unreadable (a
field that is not UTF-8 ``<node>/<target>``, a value that is not an entry), foreign (misfiled; with keys, unsigned or
badly signed: every guardian of the fleet signs with the same keys), from the future or older
than twice ``max_age`` (this node's own fields too) — so the EXPIRE each guardian renews on the
hash never keeps junk alive, and a flood shrinks by up to ``MAX_SCAN`` fields a round. Every
dropped entry is counted by reason (``dropped()``), every deleted one too (``deleted()``).
Called from the round job (off the loop thread); errors come back as a note, never raised.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from vllm_guardian.gates.trust import KeyRing, check, sign

PREFIX = "guardian:gates:fp:"
MAX_ENTRY = 16 * 1024
MAX_PROMPTS = 64
PAGE = 256  # HSCAN COUNT: fields asked for per call (a hint Redis follows closely on large hashes)
MAX_SCAN = 2048  # fields read per round at most; what lies beyond waits for a later round
REASONS = ("unsigned", "bad_signature", "malformed", "misfiled", "stale", "future")
# redis-py's option to read one reply as bytes on a client that decodes (as the guardian's does):
# a field that is not UTF-8 must not turn a whole page into a UnicodeDecodeError
NEVER_DECODE = "NEVER_DECODE"


@dataclass(frozen=True)
class Vote:
    node: str
    t: float
    fps: dict[str, str]


class RedisHashes(Protocol):
    """The Redis calls the exchange makes (a redis-py client has them)."""

    def hset(self, name: str, key: str, value: str) -> object: ...

    def expire(self, name: str, time: int) -> object: ...

    def execute_command(self, *args: Any, **options: Any) -> Any: ...  # HSCAN, undecoded (see ``_scan``)

    def hdel(self, name: str, *keys: Any) -> object: ...


class PeerFingerprints(Protocol):
    """What the gates probe asks of an exchange (``FingerprintExchange``; tests hand in fakes)."""

    def share(
        self, model: str, version: str, target: str, fps: Mapping[str, str], ttl: float, max_age: float
    ) -> tuple[list[dict[str, str]], str | None]: ...

    def dropped(self) -> dict[str, int]: ...

    def deleted(self) -> dict[str, int]: ...


def key_for(model: str, version: str) -> str:
    return PREFIX + hashlib.sha256(f"{model}\x1f{version}".encode()).hexdigest()[:16]


class FingerprintExchange:
    def __init__(
        self,
        client: RedisHashes,
        node: str,
        wall: Callable[[], float],
        keys: KeyRing | None = None,
        max_skew: float = 30.0,
        min_nodes: int = 1,
    ) -> None:
        self.client, self.node, self.wall = client, node, wall
        self.keys = keys or KeyRing.fixed()  # the keys in force: a reload swaps them
        self.max_skew, self.min_nodes = max_skew, min_nodes
        self._dropped = {r: 0 for r in REASONS}
        self._deleted = {r: 0 for r in REASONS}
        self._lock = threading.Lock()

    def dropped(self) -> dict[str, int]:
        with self._lock:
            return dict(self._dropped)

    def deleted(self) -> dict[str, int]:
        with self._lock:
            return dict(self._deleted)

    def share(
        self, model: str, version: str, target: str, fps: Mapping[str, str], ttl: float, max_age: float
    ) -> tuple[list[dict[str, str]], str | None]:
        """Publishes ``fps`` and returns (remote peers' fingerprints, a note on error)."""
        key = key_for(model, version)
        now = self.wall()
        entry = sign({"node": self.node, "target": target, "fps": dict(fps), "t": now}, self.keys.current)
        newest: dict[str, tuple[float, dict[str, str]]] = {}  # node -> (t, fps)
        note = None
        try:
            self.client.hset(key, f"{self.node}/{target}", json.dumps(entry, ensure_ascii=False))
            self.client.expire(key, max(1, int(ttl)))
            cursor, read = 0, 0
            while True:
                cursor, page = self._scan(key, cursor)
                read += len(page)
                self._page(key, page, now, max_age, newest)
                if not cursor:
                    break
                if read >= MAX_SCAN:  # bounded work: the rest (and its junk) in a later round
                    note = f"L4 across nodes: {key} holds over {MAX_SCAN} entries; read {MAX_SCAN} a round"
                    break
        except Exception as e:  # noqa: BLE001 - Redis down or slow: L4 falls back to this node's peers
            return [], f"L4 across nodes unavailable: {type(e).__name__}: {e}"[:200]
        if len(newest) < self.min_nodes:
            return [], note
        return [peer for _, peer in newest.values()], note

    def _scan(self, key: str, cursor: int) -> tuple[int, Mapping[Any, Any]]:
        """One HSCAN page as bytes: ``(next cursor, {field: value})``."""
        reply = self.client.execute_command("HSCAN", key, cursor, "COUNT", PAGE, **{NEVER_DECODE: []})
        nxt, flat = reply  # redis-py's HSCAN callback: (int cursor, dict)
        page = flat if isinstance(flat, Mapping) else dict(zip(flat[::2], flat[1::2], strict=False))
        return int(nxt), page

    def _page(
        self,
        key: str,
        page: Mapping[Any, Any],
        now: float,
        max_age: float,
        newest: dict[str, tuple[float, dict[str, str]]],
    ) -> None:
        """Sorts one HSCAN page: votes into ``newest``, drops counted, what can never vote deleted."""
        doomed: list[Any] = []
        gone: dict[str, int] = {}
        for fld, value in page.items():
            verdict = self._entry(fld, value, now, max_age)
            if verdict is None:
                continue
            if isinstance(verdict, Vote):
                if verdict.node not in newest or verdict.t > newest[verdict.node][0]:
                    newest[verdict.node] = (verdict.t, verdict.fps)
                continue
            reason, delete = verdict
            self._count(self._dropped, reason)
            if delete:
                doomed.append(fld)
                gone[reason] = gone.get(reason, 0) + 1
        if doomed:
            try:
                self.client.hdel(key, *doomed)
            except Exception:  # noqa: BLE001 - cleaning up is best effort; they do not vote anyway
                return
            for reason, n in gone.items():
                self._count(self._deleted, reason, n)

    def _entry(self, fld: Any, value: Any, now: float, max_age: float) -> Vote | tuple[str, bool] | None:
        """A voting entry, (drop reason, delete it?), or None for a sound entry of this node's own."""
        try:
            name = fld.decode() if isinstance(fld, bytes) else str(fld)
        except UnicodeDecodeError:
            return "malformed", True  # deleted by its bytes
        node, _, target = name.partition("/")
        verdict = self._judge(node, target, value, now, max_age)
        if node == self.node:  # this node's own field: only junk under it is of interest (deleted)
            return verdict if isinstance(verdict, tuple) and verdict[1] else None
        return verdict

    def _judge(self, node: str, target: str, value: Any, now: float, max_age: float) -> Vote | tuple[str, bool]:
        if not node or not target:
            return "malformed", True  # not a `<node>/<target>` field: nobody's entry
        try:
            if len(value) > MAX_ENTRY:
                return "malformed", True
            entry = json.loads(value)
            t = float(entry["t"])
            fps = entry["fps"]
            if not isinstance(fps, dict) or len(fps) > MAX_PROMPTS or t != t:
                return "malformed", True
        except (ValueError, KeyError, TypeError, RecursionError):
            return "malformed", True
        if t > now + self.max_skew:
            return "future", True
        if now - t > max_age:
            return "stale", now - t > 2 * max_age
        keys = self.keys.current
        if keys.enabled:
            refused = check(entry, keys)
            if refused is not None:
                return refused[0], True  # every guardian of the fleet signs with the same keys
        if entry.get("node") != node or entry.get("target") != target:
            return "misfiled", True
        return Vote(node, t, {str(k)[:200]: str(v)[:200] for k, v in fps.items()})

    def _count(self, counts: dict[str, int], reason: str, n: int = 1) -> None:
        with self._lock:
            counts[reason] = counts.get(reason, 0) + n
