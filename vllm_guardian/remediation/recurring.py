"""Is this incident a recurrence (docs/policy.md, Recurrence)? The target's last sequence, when it
ended verified (``done``) for another incident of the same kind within ``policy.recurrence.window``
seconds, makes ``decide`` escalate ("recurring") instead of restarting blindly again. Applying the
catalog's workaround on that restart is not wired into the sequence yet, so a recurrence always
escalates here. Pure: the sequence, the incident and the wall time in, a reason or None out."""

from __future__ import annotations

import dataclasses

from vllm_guardian.config.schema import RestartConfig
from vllm_guardian.config.schema_policy import RecurrenceConfig
from vllm_guardian.model import Incident
from vllm_guardian.policy.recurrence import VerifiedRestart, judge
from vllm_guardian.remediation.sequence import Phase, RestartSequence


def recurring(
    cfg: RecurrenceConfig, prev: RestartSequence | None, incident: Incident, rc: RestartConfig | None, wall: float
) -> str | None:
    if not cfg.enabled or prev is None or rc is None or prev.drain_only or prev.phase is not Phase.DONE:
        return None
    if prev.incident_id is None or prev.incident_id == incident.id or prev.reason == "manual":
        return None
    verdict = judge(
        dataclasses.replace(cfg, apply_workaround=False),
        history=[VerifiedRestart(prev.incident_id, prev.reason, None, prev.phase_since_wall)],
        kind=incident.kind.value,
        signature=None,
        now=wall,
        restart_method=rc.mode,
        has_workaround=False,
    )
    if verdict.action != "escalate":
        return None
    return f"{verdict.reason} (see incident {verdict.previous})"
