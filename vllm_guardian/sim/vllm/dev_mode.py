"""vLLM's development endpoints for pause and sleep, on the simulated server.

Registered only when the server runs with ``VLLM_SERVER_DEV_MODE=1`` (as in vLLM 0.32, which
logs a security warning); otherwise they answer 404:

- ``POST /pause?mode=abort|wait|keep`` -> ``{"status": "paused"}``: ``keep`` freezes queued
  and running requests (they finish after ``/resume``), ``wait`` waits for in-flight requests
  to finish, ``abort`` ends them at once; in ``abort`` / ``wait`` new completions get HTTP 503
  until ``/resume`` (in ``keep`` they queue);
- ``POST /resume``; ``GET /is_paused`` -> ``{"is_paused": bool}``; ``GET /is_sleeping`` is true
  during a pause too (vLLM 0.32: a pause is its level-0 sleep); only a ``/sleep`` sets
  ``vllm:engine_sleep_state{sleep_state="awake"}`` to 0;
- ``POST /sleep?level=1|2&mode=...`` (a pause in that mode, default ``abort``, and asleep);
  ``POST /wake_up``; ``GET /is_sleeping`` -> ``{"is_sleeping": bool}``.

``/is_paused`` and ``/is_sleeping`` are answered by the engine's own loop (a utility call in
vLLM): a hung engine answers neither. With ``VLLM_SIM_PAUSE_ANSWERS=api`` the API server answers
them from its own record of the last ``/pause``, ``/sleep``, ``/resume``, ``/wake_up`` instead (as
vLLM's ``AsyncLLM.is_paused`` does from its own flag): an engine that hangs while paused is still
"paused" to whoever asks.
"""

from __future__ import annotations

import os
import threading
import time
from urllib.parse import parse_qs

MODES = ("abort", "wait", "keep")
ASK_TIMEOUT_S = 60.0  # a hung engine: the client gives up first
WAIT_POLL_S = 0.05


def enabled(environ=os.environ) -> bool:
    return environ.get("VLLM_SERVER_DEV_MODE", "0") == "1"


def answered_by_api(environ=os.environ) -> bool:
    return environ.get("VLLM_SIM_PAUSE_ANSWERS", "engine") == "api"


class DevMode:
    """Pause / sleep state and the endpoints; ``refusing`` says whether completions get 503."""

    def __init__(self, engine, by_api: bool | None = None) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self.refusing = False  # paused or asleep in mode abort / wait
        self.by_api = answered_by_api() if by_api is None else by_api
        self._told = (False, False)  # (paused, asleep) as last told by /pause, /sleep, /resume, /wake_up

    def post(self, path: str, query: str) -> tuple[int, dict] | None:
        q = parse_qs(query)
        mode = (q.get("mode") or ["abort"])[0]
        if path in ("/pause", "/sleep") and mode not in MODES:
            return 422, {"detail": f"mode must be one of {', '.join(MODES)}"}
        if path == "/pause":
            self._pause(mode, sleeping=False)
            return 200, {"status": "paused"}
        if path == "/sleep":
            self._pause(mode, sleeping=True)
            return 200, {"status": "sleeping", "level": int((q.get("level") or ["1"])[0])}
        if path in ("/resume", "/wake_up"):
            with self._lock:
                self.refusing = False
                self._told = (False, False)
                self.engine.pause(False)
            return 200, {"status": "resumed"} if path == "/resume" else {"status": "awake", "tags": None}
        return None

    def get(self, path: str) -> tuple[int, dict] | None:
        if path not in ("/is_paused", "/is_sleeping"):
            return None
        if self.by_api:
            with self._lock:
                told_paused, told_asleep = self._told
            answer: tuple[bool, bool] | None = (told_paused, told_paused or told_asleep)
        else:
            answer = self.engine.ask_paused(ASK_TIMEOUT_S)
        if answer is None:
            return 500, {"error": "engine did not answer"}
        paused, sleeping = answer
        return 200, {"is_paused": paused} if path == "/is_paused" else {"is_sleeping": sleeping}

    def _pause(self, mode: str, sleeping: bool) -> None:
        with self._lock:
            self.refusing = mode in ("abort", "wait")
            self._told = (True, sleeping)
        if mode == "wait":
            while self.engine.alive and (self.engine.stats.running or self.engine.stats.waiting):
                time.sleep(WAIT_POLL_S)
        self.engine.pause(True, abort=mode == "abort", sleeping=sleeping)
