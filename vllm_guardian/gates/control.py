"""Control messages (``alerts.control_channel``, default ``guardian:control``): how the guardian
stamps and signs its own, and what it makes of every message on the channel.

The guardian announces ``{"action": "drain" | "undrain", "target", "node", "reason"?}`` there for
a load balancer controller. ``stamp`` adds ``timestamp`` (unix seconds, an integer) and ``id`` (16
random hex digits, unique per message) and, with trust keys (``gates.trust``), signs the message
(``kid``, ``sig``; ``gates.trust``) so a consumer can tell it from a forged, altered or replayed one:
verify the signature, refuse stamps outside ``[now - max_age, now + max_skew]`` and an
(``node``, ``id``) seen before. docs/alerts.md (Control channel) has the recipe.

With keys, the guardian also listens on the channel and checks each message (``accept``), in this
order (the first refusal wins); it never acts on any of them (a drain comes from ``guardian
drain`` on the local socket or from its own decision), it counts and reports them:

1. bounds and fields (8 KiB, 8 levels; ``action`` ``target`` ``node`` ``timestamp`` ``id``)  -> ``malformed``
2. a valid ``kid``/``sig`` under the keys in force                     -> ``unsigned`` | ``bad_signature``
3. stamped within ``[now - max_age, now + max_skew]``                   -> ``future`` | ``stale``
4. not seen before (same ``node`` + ``id``)                              -> ``replay``
5. naming this node: one this guardian sent since it started -> ``own`` (counted, not logged),
   else -> ``not_ours`` (a holder of the key speaking for this node, or a message of the guardian
   before a restart)
6. stamped after this guardian started listening (+ ``max_skew``)       -> ``before_start``
   (as for reports, ``gates.intake``: the replay window lives in memory)
7. otherwise -> ``accepted`` (another guardian's, or a tool holding the key)

Every drop is counted by reason (status ``trust.control_messages``, Prometheus
``guardian_control_messages_total{outcome}``) and logged once per episode (``gates.outcomes``).
Never raises. Memory is bounded: the replay guard and the ids sent are capped.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from vllm_guardian.config.schema import TrustConfig
from vllm_guardian.gates import bounds
from vllm_guardian.gates.outcomes import Outcomes
from vllm_guardian.gates.status import TrustStatus
from vllm_guardian.gates.trust import KeyRing, ReplayGuard, check, sign

MAX_BYTES = 8 * 1024
MAX_FIELD = 200  # characters of action, target, node, id
SENT_KEPT = 1024  # ids of this guardian's own messages, recognised when they come back
OWN, ACCEPTED = "own", "accepted"
DROP_REASONS = ("malformed", "unsigned", "bad_signature", "future", "stale", "replay", "not_ours", "before_start")
OUTCOMES = (ACCEPTED, OWN) + DROP_REASONS


class ControlError(ValueError):
    """Not a control message; the text says which field."""


def parse_control(raw: bytes | str) -> tuple[dict[str, Any], str, str, float]:
    """(the message, its node, its id, its timestamp) within the bounds; ``ControlError`` otherwise."""
    try:
        msg = bounds.loads(raw, MAX_BYTES)
    except bounds.BoundsError as e:
        raise ControlError(str(e)) from None
    if not isinstance(msg, dict):
        raise ControlError(f"expected a JSON object, got {type(msg).__name__}")
    for name in ("action", "target", "node", "id"):
        v = msg.get(name)
        if not isinstance(v, str) or not v or len(v) > MAX_FIELD:
            raise ControlError(f"{name}: expected a string of 1-{MAX_FIELD} characters")
    t = msg.get("timestamp")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        raise ControlError("timestamp: expected unix seconds")
    return msg, msg["node"], msg["id"], float(t)


class ControlChannel:
    def __init__(
        self,
        node: str,
        keys: KeyRing,
        trust: TrustConfig,
        log: logging.Logger,
        wall: Callable[[], float],
        *,
        started: float,
    ) -> None:
        """``started``: the wall time this guardian began listening (step 6)."""
        self.node, self.keys, self.trust, self.log, self.wall = node, keys, trust, log, wall
        self.floor = started + trust.max_skew
        self.checked = keys.enabled  # with keys at start the channel is listened to (loop/runtime.py)
        self.outcomes = Outcomes(OUTCOMES, "control message", log)
        self._replay = ReplayGuard(trust.max_age + trust.max_skew)
        self._sent: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- out
    def stamp(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """``payload`` with ``timestamp`` and ``id``, signed with the keys in force (when any)."""
        msg = dict(payload)
        msg["timestamp"] = int(self.wall())
        msg["id"] = secrets.token_hex(8)
        with self._lock:
            self._sent[msg["id"]] = None
            while len(self._sent) > SENT_KEPT:
                self._sent.popitem(last=False)
        return sign(msg, self.keys.current)

    # ---------------------------------------------------------------- in
    def accept(self, raw: bytes | str, mono: float, wall: float) -> str:
        """One message from the channel: its outcome, counted (drops logged once per episode)."""
        try:
            return self._accept(raw, wall)
        except Exception as e:  # noqa: BLE001 - a hostile message must never reach the listener as an error
            return self.outcomes.drop("malformed", wall, f"could not be read ({type(e).__name__}: {str(e)[:120]})")

    def _accept(self, raw: bytes | str, wall: float) -> str:
        drop = self.outcomes.drop
        try:
            msg, node, mid, t = parse_control(raw)
        except ControlError as e:
            return drop("malformed", wall, str(e))
        what = f"{str(msg['action'])[:16]} {str(msg['target'])[:64]!r} from {node[:64]!r}"
        refused = check(msg, self.keys.current)
        if refused is not None:
            return drop(refused[0], wall, f"{what}: {refused[1]}")
        if t > wall + self.trust.max_skew:
            return drop("future", wall, f"{what} stamped {t - wall:.0f}s ahead")
        if wall - t > self.trust.max_age:
            return drop("stale", wall, f"{what} is {wall - t:.0f}s old")
        if self._replay.seen_before(node, mid, wall):
            return drop("replay", wall, f"{what}: id {mid[:32]!r} again")
        if node == self.node:
            with self._lock:
                ours = mid in self._sent
                self._sent.pop(mid, None)
            if ours:
                return self.outcomes.count(OWN)
            return drop("not_ours", wall, f"{what}: names this node, but this guardian did not send it")
        if t < self.floor:
            return drop(
                "before_start",
                wall,
                f"{what} stamped before this guardian started listening (+ max_skew {self.trust.max_skew:g}s)",
            )
        return self.outcomes.count(ACCEPTED)

    # ---------------------------------------------------------------- status
    def status_section(self) -> TrustStatus:
        keys, last = self.keys.current, self.keys.last_reload
        return TrustStatus(
            source=keys.source,
            kids=keys.kids,
            last_reload=None if last is None else last.summary(),
            control_messages=self.outcomes.snapshot() if self.checked else None,
        )
