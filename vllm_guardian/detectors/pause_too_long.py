"""pause_too_long: a server paused or asleep on purpose for longer than ``lifecycle.max_pause``.

Reads the hold the server reports (``/is_paused``, ``/is_sleeping``: see the server_state
probe) and since when. Decides: held longer than the limit -> confirmed, a warning. Never a
restart, whatever the mode (a trainer may be syncing weights): someone should look. Resolves
once the server resumes or wakes up.
"""

from __future__ import annotations

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors.view import TargetView
from vllm_guardian.model import Finding, Kind, Severity

KIND = Kind.PAUSE_TOO_LONG


def evaluate(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    st = view.state
    if st.hold is None or st.hold_since is None or not st.api_alive:
        return None
    held, limit = st.now - st.hold_since, st.lifecycle.max_pause
    if held < limit:
        return None
    return Finding(
        kind=KIND,
        target=st.target.name,
        severity=Severity.WARNING,
        summary=f"{st.hold} on purpose for {held:.0f}s (lifecycle.max_pause {limit:g}s); never restarted for it",
        signals={"hold": st.hold, "held_s": round(held, 1), "max_pause": limit},
        confirmed=True,
    )
