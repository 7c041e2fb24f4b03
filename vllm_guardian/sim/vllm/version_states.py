"""vLLM 0.32 / 0.33 / 0.34's own states on the simulated server, per ``--vllm-version``.

What each version registers (read from its source; docs/vllm-versions.md cites the files):

- ``GET /version`` answers the chosen version;
- 0.34 with ``--enable-sleep-mode``: ``POST /checkpoint/prepare?mode=abort|wait|keep``,
  ``POST /checkpoint/restore``, ``GET /checkpoint/status`` (``{"state": ...}``: 503 while running,
  preparing or restoring, 200 prepared, 500 failed), as vLLM's ``serve/checkpoint/api_router.py``;
- with ``--enable-fault-tolerance``: ``GET /fault_tolerance/status`` (0.32, 0.33) or
  ``GET /v1/fault_tolerance/status`` (0.34): ``{"schema_version": 1, "total_engines": n, "engines":
  [{"id": i, "status": "healthy|dead|unhealthy|diagnosing"}]}``;
- 0.33+: a retired elastic-EP rank answers every path but ``/health`` and ``/is_scaling_elastic_ep``
  with 503 ``{"error": "This data-parallel rank has been retired and is awaiting shutdown."}``.

Simulator control (not vLLM): ``POST /sim/vllm_state`` with ``{"engine_status": {"0": "diagnosing"}}``,
``{"retired": true}`` or ``{"checkpoint": "failed"}`` sets those states at once, so a test drives a
fault-tolerance round, a retirement or a failed checkpoint on its own clock. While any engine is not
``healthy`` the simulated engine steps no more (requests stay pending), as vLLM's EngineCore waits
for the round's instructions (``engine_recovery_timeout_sec``); all healthy again resumes it.
"""

from __future__ import annotations

import threading
from urllib.parse import parse_qs

from vllm_guardian.vllm_versions import (
    CHECKPOINT_STATES,
    FT_ENGINE_STATES,
    RETIRED_ERROR,
    capabilities_for,
)

OBSERVABLE_WHEN_RETIRED = frozenset({"/health", "/is_scaling_elastic_ep"})
_STATUS_CODE = {"prepared": 200, "failed": 500}


class VersionStates:
    """The version's endpoints and the states behind them; ``get``/``post`` answer or return None."""

    def __init__(self, version: str, *, engines: int, sleep_mode: bool, fault_tolerance: bool, drain) -> None:
        self.version = version
        self.row = capabilities_for(version).row
        self.sleep_mode = sleep_mode
        self.fault_tolerance = fault_tolerance
        self._drain = drain  # callable(mode): pause the engine as /pause?mode= would (waits in "wait")
        self._lock = threading.Lock()
        self.checkpoint = "running"
        self.engine_status = {i: "healthy" for i in range(max(1, engines))}
        self.retired = False

    def _engine_held(self) -> bool:
        """An engine is in a fault-tolerance round or dead: vLLM's EngineCore waits (or is gone)."""
        return any(s != "healthy" for s in self.engine_status.values())

    def _checkpoint_on(self) -> bool:
        return self.sleep_mode and self.row.checkpoint_status_path is not None

    def refuse(self, path: str) -> tuple[int, dict] | None:
        """The elastic-EP middleware's answer for a retired rank, before any route."""
        if self.retired and path not in OBSERVABLE_WHEN_RETIRED and not path.startswith("/sim/"):
            return 503, {"error": RETIRED_ERROR}
        return None

    def get(self, path: str) -> tuple[int, dict] | None:
        if path == "/version":
            return 200, {"version": self.version}
        if self._checkpoint_on() and path == self.row.checkpoint_status_path:
            with self._lock:
                state = self.checkpoint
            return _STATUS_CODE.get(state, 503), {"state": state}
        if self.fault_tolerance and path == self.row.fault_tolerance_status_path:
            with self._lock:
                engines = [{"id": i, "status": s} for i, s in sorted(self.engine_status.items())]
            return 200, {"schema_version": 1, "total_engines": len(engines), "engines": engines}
        return None

    def owns(self, path: str) -> bool:
        """Whether ``post`` answers ``path`` (the handler reads the body only then)."""
        checkpoint = (self.row.checkpoint_prepare_path, self.row.checkpoint_restore_path)
        return path == "/sim/vllm_state" or (self._checkpoint_on() and path in checkpoint)

    def post(self, path: str, query: str, body: object) -> tuple[int, dict] | None:
        if path == "/sim/vllm_state":
            return self._control(body)
        if not self._checkpoint_on():
            return None
        if path == self.row.checkpoint_prepare_path:
            mode = (parse_qs(query).get("mode") or ["wait"])[0]
            if mode not in ("abort", "wait", "keep"):
                return 422, {"detail": "mode must be one of abort, wait, keep"}
            with self._lock:
                if self.checkpoint in ("restoring", "failed"):
                    return 400, {"state": self.checkpoint}
                start = self.checkpoint == "running"
                if start:
                    self.checkpoint = "preparing"
            if start:
                self._drain(mode)
                with self._lock:
                    self.checkpoint = "prepared"
            return 200, {"state": self.checkpoint}
        if path == self.row.checkpoint_restore_path:
            with self._lock:
                if self.checkpoint in ("preparing", "failed"):
                    return 400, {"state": self.checkpoint}
                if self.checkpoint == "prepared":
                    self.checkpoint = "restoring"
            self._drain(None)  # resume the engine
            with self._lock:
                self.checkpoint = "running"
            return 200, {"state": "running"}
        return None

    def _control(self, body: object) -> tuple[int, dict]:
        if not isinstance(body, dict):
            return 400, {"error": "a JSON object"}
        with self._lock:
            held_before = self._engine_held()
            for key, status in (body.get("engine_status") or {}).items():
                if status not in FT_ENGINE_STATES or int(key) not in self.engine_status:
                    return 400, {"error": f"engine_status: {key}={status!r}"}
                self.engine_status[int(key)] = status
            held = self._engine_held()
            if held != held_before:  # an engine in a round waits for vLLM's instructions: it steps no more
                self._drain("keep" if held else None)
            if "retired" in body:
                self.retired = bool(body["retired"]) and self.row.elastic_ep_retire
            if "checkpoint" in body:
                if body["checkpoint"] not in CHECKPOINT_STATES:
                    return 400, {"error": f"checkpoint: {body['checkpoint']!r}"}
                self.checkpoint = body["checkpoint"]
            return 200, {
                "checkpoint": self.checkpoint,
                "engine_status": {str(k): v for k, v in self.engine_status.items()},
                "retired": self.retired,
            }
