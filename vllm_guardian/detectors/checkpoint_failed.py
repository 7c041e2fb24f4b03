"""checkpoint_failed: vLLM 0.34's own checkpoint failed (``/checkpoint/status`` answers 500 ``failed``).

Reads the checkpoint state the vllm_state probe keeps (``TargetState.vllm_phase``; the state is believed
only with the status code vLLM gives it). Decides: ``failed`` -> confirmed, a warning, never a restart
(the engine's state after a failed prepare or restore is for a person to judge: vLLM keeps it as it
is until ``/checkpoint/restore`` or a restart). Resolves once vLLM reports another state.
"""

from __future__ import annotations

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors.view import TargetView
from vllm_guardian.vllm_versions import CHECKPOINT_FAILED
from vllm_guardian.model import Finding, Kind, Severity

KIND = Kind.CHECKPOINT_FAILED


def evaluate(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    st = view.state
    if st.vllm_phase != CHECKPOINT_FAILED or not st.api_alive:
        return None
    return Finding(
        kind=KIND,
        target=st.target.name,
        severity=Severity.WARNING,
        summary="vLLM's own checkpoint failed (/checkpoint/status: failed); never restarted for it",
        signals={"vllm_phase": CHECKPOINT_FAILED, "pid": st.target.key.pid},
        confirmed=True,
    )
