"""Publishes the guardian's output-corruption decisions on ``gates.control_channel``.

For an external executor (a gateway that shifts traffic, a rollback controller), one JSON
message per decision about an ``output_corruption`` incident::

    {"type": "decision", "node": "node-a", "instance_id": "node-a/vllm-8000",
     "incident_id": "...", "decision": "drain_and_restart" | "alert_only" | "resolved",
     "condition": "A".."D", "level": "L1".."L5", "summary": "...", "timestamp": 1767225600.0,
     "hold": "why not, in words", "hold_reason": "dry_run"}

The decision is what the guardian decided, told by the responder each tick (``decided``, a
``loop/responder.py`` ``on_decision`` hook) after the remediation ladder ran
(``remediation/decide.py``): ``drain_and_restart`` only while a restart sequence runs for this
very incident; else ``alert_only`` with ``hold`` (the reason in words) and ``hold_reason`` (in a
word: ``dry_run``, ``maintenance``, ``no_config`` for an autodiscovered target, ``budget``,
``anomaly``, ``mode``, ``external``, ``backoff``, ...). A message goes out when the decision about
an incident first comes and whenever it changes (``alert_only`` for the backoff, then
``drain_and_restart``), never each tick; ``resolved`` when the incident resolves (a transition
sink, ``__call__``). With trust keys (``gates.trust``, the ``KeyRing`` in force) every message is
signed (``kid``, ``sig``) so an executor can tell it from a forged one. Publishing happens on a
small background thread (best effort, bounded queue): the loop never waits on Redis.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from typing import Any, Callable, Protocol

from vllm_guardian.gates.trust import KeyRing, sign
from vllm_guardian.model import Incident, Kind, Transition

QUEUE_MAX = 1000
SAID_MAX = 4096  # open incidents whose last decision is remembered


class Hold(Protocol):
    """Why the guardian holds back from acting (``remediation/decide.py``'s ``Refusal`` is one)."""

    @property
    def detail(self) -> str: ...

    @property
    def why(self) -> str: ...


class GateDecisions:
    def __init__(
        self,
        client: Any,
        channel: str,
        node: str,
        wall: Callable[[], float],
        log: logging.Logger,
        keys: KeyRing | None = None,
    ) -> None:
        self.client, self.channel, self.node, self.wall, self.log = client, channel, node, wall, log
        self.keys = keys or KeyRing.fixed()  # the trust keys in force: decisions out are signed with them
        self._q: queue.Queue[dict | None] = queue.Queue(QUEUE_MAX)
        self._said: dict[str, tuple[str, str | None]] = {}  # open incident id -> (decision, hold reason) published
        self._thread = threading.Thread(target=self._run, name="gate-decisions", daemon=True)
        self._thread.start()
        self.published = 0
        self._failing = False

    def decided(self, inc: Incident, hold: Hold | None) -> None:
        """What the responder decided this tick for an open incident (None: it acts on it)."""
        if inc.kind is not Kind.OUTPUT_CORRUPTION:
            return
        decision, why = ("drain_and_restart", None) if hold is None else ("alert_only", hold.why)
        if self._said.get(inc.id) == (decision, why):
            return
        if len(self._said) >= SAID_MAX:  # incidents resolve and are forgotten; this only bounds a leak
            self._said.clear()
        self._said[inc.id] = (decision, why)
        self._publish(inc, decision, hold)

    def __call__(self, tr: Transition) -> None:
        """A transition sink: an incident that resolved (opening is told by ``decided``)."""
        inc = tr.incident
        if inc.kind is Kind.OUTPUT_CORRUPTION and tr.previous is not None:
            self._said.pop(inc.id, None)
            self._publish(inc, "resolved", None)

    def _publish(self, inc: Incident, decision: str, hold: Hold | None) -> None:
        sig = inc.signals
        msg: dict[str, Any] = {
            "type": "decision",
            "node": self.node,
            "instance_id": f"{self.node}/{inc.target.name}",
            "incident_id": inc.id,
            "decision": decision,
            "condition": sig.get("condition"),
            "level": sig.get("level"),
            "summary": inc.summary,
            "timestamp": self.wall(),
        }
        if hold is not None:
            msg["hold"], msg["hold_reason"] = hold.detail, hold.why
        msg = sign(msg, self.keys.current)
        try:
            self._q.put_nowait(msg)
        except queue.Full:
            self.log.warning("gate decisions: queue full, dropped %s for %s", decision, inc.target.name)

    def _run(self) -> None:
        while True:
            msg = self._q.get()
            if msg is None:
                return
            try:
                self.client.publish(self.channel, json.dumps(msg, separators=(",", ":"), ensure_ascii=False))
                self.published += 1
                self._failing = False
            except Exception as e:  # noqa: BLE001 - best effort: the alert stream carries the incident anyway
                if not self._failing:
                    self.log.warning("gate decisions: cannot publish on %s: %s", self.channel, e)
                self._failing = True

    def close(self, timeout: float = 2.0) -> None:
        try:
            self._q.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(timeout)
