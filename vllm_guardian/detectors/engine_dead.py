"""engine_dead: the server is down, or its engine is.

Reads the daemon's liveness facts (``TargetState``) and the latest ``/health``
sample. Confirmed when:

- ``api_server_gone``: the target has been ready once and its API server vanished
  (vLLM may even exit 0 when its engine dies);
- ``engine_core_gone``: the API server lives but its EngineCore is gone;
- ``health_failed``: the target has been ready once and the latest ``/health``
  sample (not older than 3 probe intervals) is a 5xx or a refused connection;
- ``fault_tolerance_dead``: vLLM's own fault tolerance reports an engine DEAD once no engine is
  in a round (``--enable-fault-tolerance``: its round ended without recovering it).

Nothing but a vanished API server while an engine is in vLLM's own fault-tolerance round (its
``retry`` or ``scale_down`` may stop or replace the engine), and nothing for an elastic-EP rank vLLM
retired on purpose (it awaits its shutdown).

Nothing during a first warm-up (never ready, engine alive or not yet seen).
"""

from __future__ import annotations

from typing import Any

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.model import Finding, Kind, Role, Severity
from vllm_guardian.series import metrics
from vllm_guardian.detectors.view import TargetView
from vllm_guardian.vllm_versions import RETIRED

KIND = Kind.ENGINE_DEAD
HEALTH_FRESH_INTERVALS = 3.0


def evaluate(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    st = view.state
    tgt = st.target
    sig: dict[str, Any] = {
        "api_pid": tgt.key.pid,
        "api_starttime": tgt.key.starttime,
        "engine_pids": [p.pid for p in tgt.by_role(Role.ENGINE_CORE)],
        "ever_ready": st.ever_ready,
    }
    if st.vllm_phase == RETIRED:
        return None  # an elastic-EP rank retired on purpose awaits its shutdown
    if st.ever_ready and not st.api_alive:
        gone = {} if st.gone_since is None else {"gone_for_s": round(st.now - st.gone_since, 3)}
        return _finding(
            view,
            dict(sig, reason="api_server_gone", pid=tgt.key.pid, role=Role.API_SERVER.value, **gone),
            f"API server {tgt.key.pid} is gone",
        )
    if st.api_alive and st.ft_dead and not st.recovering:
        engine = st.ft_dead[0]
        return _finding(
            view,
            dict(sig, reason="fault_tolerance_dead", dp_rank=engine, vllm_phase="engine_dead", role="EngineCore"),
            f"vLLM's own fault tolerance reports engine {engine} DEAD after its round",
        )
    if st.recovering:
        return None  # vLLM's own round may stop or replace its engine: judged once it ends
    if st.api_alive and st.engine_alive is False:
        return _finding(
            view,
            dict(sig, reason="engine_core_gone", role=Role.ENGINE_CORE.value),
            f"EngineCore is gone while API server {tgt.key.pid} lives",
        )
    if st.ever_ready:
        latest = view.series.latest(tgt.name, "", metrics.HEALTH_OK)
        fresh = latest is not None and st.now - latest[0] <= HEALTH_FRESH_INTERVALS * st.probe_interval + 1e-9
        if latest is not None and fresh and latest[1] == 0:
            return _finding(
                view,
                dict(
                    sig,
                    reason="health_failed",
                    pid=tgt.key.pid,
                    role=Role.API_SERVER.value,
                    health_ok=0,
                    health_age_s=round(st.now - latest[0], 3),
                ),
                "/health fails (5xx or refused) after the server had been ready",
            )
    return None


def _finding(view: TargetView, signals: dict[str, Any], summary: str) -> Finding:
    return Finding(
        kind=KIND,
        target=view.state.target.name,
        severity=Severity.CRITICAL,
        summary=summary,
        signals=signals,
        confirmed=True,
    )
