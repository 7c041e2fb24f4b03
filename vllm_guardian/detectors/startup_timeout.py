"""startup_timeout: a server that never becomes ready within ``lifecycle.startup_limit``.

Reads the target's readiness and when this incarnation of its API server was first seen
(by this guardian: one restarted beside a server still loading counts from its own start).
Ready means the server said so (``/health`` 200 and ``/v1/models`` answered) or a canary
answered. Decides: still not ready after the limit, its API server alive -> confirmed (the
responder captures what it is doing: py-spy of every process, still loading weights,
compiling, stuck). Alert only by default; resolves once the server becomes ready.
"""

from __future__ import annotations

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors.view import TargetView
from vllm_guardian.model import Finding, Kind, Severity, Subject

KIND = Kind.STARTUP_TIMEOUT


def evaluate(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    st = view.state
    if st.ready or not st.api_alive or st.starting_since is None:
        return None
    waited, limit = st.now - st.starting_since, st.lifecycle.startup_limit
    if waited < limit:
        return None
    api = st.target.api_server
    return Finding(
        kind=KIND,
        target=st.target.name,
        severity=Severity.WARNING,
        summary=f"not ready {waited:.0f}s after it was first seen (limit {limit:g}s): "
        "no /health 200 with /v1/models answered, no canary answered",
        signals={"waited_s": round(waited, 1), "startup_limit": limit, "pid": api.pid if api else None},
        confirmed=True,
        subject=Subject(api.pid).key if api else "",
    )
