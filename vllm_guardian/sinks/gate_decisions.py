"""Publishes the guardian's output-corruption decisions on ``gates.control_channel``.

A transition sink: for each ``output_corruption`` incident opened or resolved it
queues one JSON message for an external executor (a gateway that shifts traffic, a
rollback controller)::

    {"type": "decision", "node": "node-a", "instance_id": "node-a/vllm-8000",
     "incident_id": "...", "decision": "drain_and_restart" | "alert_only" | "resolved",
     "condition": "A".."D", "level": "L1".."L5", "summary": "...", "timestamp": 1767225600.0}

``drain_and_restart`` when the detector's mode is ``remediate`` and the incident does not
rest on external evidence alone (``remediation.external``; the guardian itself then acts
through its own state machine and safety gates), else ``alert_only`` (with ``hold``: why).
With trust keys (``gates.trust``) every decision is signed (``kid``, ``sig``) so an
executor can tell it from a forged one. Publishing happens on a small background thread
(best effort, bounded queue): the loop never waits on Redis.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from typing import Any, Callable

from vllm_guardian.gates.trust import Keys, sign
from vllm_guardian.model import Kind, Transition
from vllm_guardian.remediation.external import external_hold

QUEUE_MAX = 1000


class GateDecisions:
    def __init__(
        self,
        client: Any,
        channel: str,
        node: str,
        mode: Callable[[], str],
        wall: Callable[[], float],
        log: logging.Logger,
        keys: Keys | None = None,
    ) -> None:
        self.client, self.channel, self.node, self.mode, self.wall, self.log = client, channel, node, mode, wall, log
        self.keys = keys or Keys()  # the gates' trust keys: decisions out are signed with them
        self._q: queue.Queue[dict | None] = queue.Queue(QUEUE_MAX)
        self._thread = threading.Thread(target=self._run, name="gate-decisions", daemon=True)
        self._thread.start()
        self.published = 0
        self._failing = False

    def __call__(self, tr: Transition) -> None:
        inc = tr.incident
        if inc.kind is not Kind.OUTPUT_CORRUPTION:
            return
        sig = inc.signals
        hold = None
        if tr.previous is not None:
            decision = "resolved"
        elif self.mode() == "remediate" and not sig.get("alert_only"):
            hold = external_hold(sig, self.keys.enabled)
            decision = "alert_only" if hold else "drain_and_restart"
        else:
            decision = "alert_only"
        msg = {
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
        if hold:
            msg["hold"] = hold
        msg = sign(msg, self.keys)
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
