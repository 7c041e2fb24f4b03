"""Is this incident a recurrence (docs/policy.md, Recurrence), and what then? The target's last
sequence, when it ended verified (``done``) for another incident of the same kind within
``recurrence.window`` seconds, makes the next restart one of:

- ``escalate`` — no second blind restart: ``decide`` refuses it as ``recurring`` (the reason names
  the incident it repeats; on Kubernetes, with the catalog's workaround as a proposed patch);
- ``workaround`` — the profile allows it (``recurrence.apply_workaround``), the incident's diagnosis
  names a catalog signature with a machine-readable workaround and the restart method owns the
  command line (command, systemd): one restart with it; the target keeps it until
  ``guardian workaround clear``. A target already running with that workaround escalates instead;
- ``wait`` — the diagnosis is still being made, and it decides: the workaround is allowed, or the
  incident is of another kind than the one restarted, which was diagnosed (the same bug can read
  as a busy loop or, its spin starved of CPU, as an engine stall): nothing yet.

The same fault is the same kind, or the same catalog signature under another kind.

Pure: the sequence, the incident, what the catalog knows and what the target runs with in; a
``Recurrence`` or None (no recurrence) out."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass

from vllm_guardian.config.schema import RestartConfig
from vllm_guardian.config.schema_policy import RecurrenceConfig
from vllm_guardian.diagnosis.workaround import Workaround
from vllm_guardian.model import Incident
from vllm_guardian.policy.recurrence import VerifiedRestart, judge
from vllm_guardian.policy.workaround import Applied, kube_patch
from vllm_guardian.remediation.sequence import Phase, RestartSequence


@dataclass(frozen=True)
class Recurrence:
    action: str  # escalate | workaround | wait
    reason: str
    signature: str | None = None  # the catalog signature the incident was diagnosed as
    workaround: Workaround | None = None  # action workaround: what to restart with


def signature_of(incident: Incident, workarounds: Mapping[str, Workaround]) -> str | None:
    """The incident's diagnosis: the best match that has a workaround, else the best match (None:
    not diagnosed, or nothing matched)."""
    ids = [d.get("id") for d in incident.diagnosis]
    ids = [i for i in ids if isinstance(i, str) and i]
    return next((i for i in ids if i in workarounds), ids[0] if ids else None)


def recurring(
    cfg: RecurrenceConfig,
    prev: RestartSequence | None,
    incident: Incident,
    rc: RestartConfig | None,
    wall: float,
    *,
    workarounds: Mapping[str, Workaround] | None = None,
    running_with: Applied | None = None,
    diagnosing: bool = False,
    previous_signature: str | None = None,
) -> Recurrence | None:
    if not cfg.enabled or prev is None or rc is None or prev.drain_only or prev.phase is not Phase.DONE:
        return None
    if prev.incident_id is None or prev.incident_id == incident.id or prev.reason == "manual":
        return None
    known = workarounds or {}
    signature = signature_of(incident, known)
    wa = known.get(signature) if signature else None
    if incident.kind.value != prev.reason and previous_signature is not None and signature is None:
        if not diagnosing or wall - prev.phase_since_wall >= cfg.window:
            return None  # another kind, never diagnosed: another fault
        return Recurrence("wait", f"waiting for the diagnosis: {previous_signature} again, as {incident.kind.value}?")
    already = running_with is not None and (signature is None or running_with.signature == signature)
    allowed = cfg.apply_workaround and not already
    verdict = judge(
        dataclasses.replace(cfg, apply_workaround=allowed),
        history=[VerifiedRestart(prev.incident_id, prev.reason, previous_signature, prev.phase_since_wall)],
        kind=incident.kind.value,
        signature=signature,
        now=wall,
        restart_method=rc.mode,
        has_workaround=wa is not None,
    )
    if verdict.action == "restart":
        return None
    see = f" (see incident {verdict.previous})"
    if allowed and signature is None and diagnosing:
        return Recurrence("wait", f"{verdict.reason.split(':')[0]}: waiting for the diagnosis (a known workaround?)")
    if verdict.action == "workaround":
        return Recurrence("workaround", verdict.reason + see, signature, wa)
    reason = verdict.reason + see
    if already and running_with is not None:
        reason += f"; it already runs with the workaround of {running_with.signature} (since {running_with.incident})"
    if cfg.apply_workaround and wa is not None and rc.mode == "kubernetes":
        patch = json.dumps(kube_patch("<container>", wa), sort_keys=True)
        reason += f"; proposed patch for the pod's controller (not applied): {patch}"
    return Recurrence("escalate", reason, signature)
