"""What the guardian tells Kubernetes after a tick: the readiness gate condition each supervised
pod should carry, and the Events that happened since the last tick.

Pure: reads one status snapshot (targets with their readiness verdict and remediation, the open
incidents with their actions and evidence) and what the previous tick saw (``PlanState``), and
decides ``GateWant`` per target and ``EventWant`` per thing that happened:
- an incident opened: reason its kind in CamelCase (``BusyLoop``, ``EngineDead``, ...; an
  exhausted restart budget is ``RestartRefused``), Warning, message summary + incident id;
- resolved: ``IncidentResolved``; its evidence bundle written: ``EvidenceCaptured``;
- a restart refused or held back (budget, backoff, fleet lease, maintenance, node anomaly): ``RestartRefused`` —
  a node-wide anomaly also as ``NodeAnomaly`` on the Node;
- the remediation's phases: ``Draining``, ``Restarting`` (the stop), ``Restarted`` (verified),
  ``RestartFailed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_guardian.model import Incident
    from vllm_guardian.remediation.remediator import SequenceStatus
    from vllm_guardian.surface.status_snapshot import StatusSnapshot

NORMAL, WARNING = "Normal", "Warning"
REFUSED = {"skipped", "escalated", "deferred", "refused"}
NODE_ANOMALY = "node-wide anomaly"


def camel(kind: str) -> str:
    """``busy_loop`` -> ``BusyLoop``."""
    return "".join(part[:1].upper() + part[1:] for part in kind.split("_"))


@dataclass(frozen=True)
class GateWant:
    target: str
    key: tuple[int, int]  # the API server (pid, starttime) whose pod carries the condition
    serving: bool
    reason: str
    message: str


@dataclass(frozen=True)
class EventWant:
    target: str | None  # None: about the Node
    key: tuple[int, int] | None  # the process whose pod it is about
    type: str
    reason: str
    message: str


@dataclass
class PlanState:
    incidents: dict[str, tuple[str, str, str | None, int]] = field(default_factory=dict)  # id -> target, kind, ev, n
    keys: dict[str, tuple[int, int]] = field(default_factory=dict)  # incident id -> its target's process
    phases: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # target -> (phase, outcome)


def _incident_events(inc: Incident, key: tuple[int, int], before: tuple | None) -> list[EventWant]:
    name, kind = inc.target.name, inc.kind.value
    out: list[EventWant] = []
    if before is None:
        reason = "RestartRefused" if kind == "restart_budget_exhausted" else camel(kind)
        out.append(EventWant(name, key, WARNING, reason, f"{inc.summary} (incident {inc.id})"))
    if inc.evidence_dir and (before is None or not before[2]):
        out.append(
            EventWant(name, key, NORMAL, "EvidenceCaptured", f"evidence of incident {inc.id}: {inc.evidence_dir}")
        )
    seen = 0 if before is None else before[3]
    for action in inc.actions[seen:]:
        held = action.name == "fleet_lease" and action.status == "waiting"  # another node's restart holds the slot
        if (action.name == "restart" and action.status in REFUSED) or held:
            out.append(EventWant(name, key, WARNING, "RestartRefused", f"{action.detail} (incident {inc.id})"))
            if action.detail.startswith(NODE_ANOMALY):
                # about the node, not one incident: the repeats from each target count one Event up
                out.append(EventWant(None, None, WARNING, "NodeAnomaly", action.detail))
    return out


def _phase_events(
    target: str, key: tuple[int, int], rem: SequenceStatus, before: tuple[str | None, str | None] | None
) -> list[EventWant]:
    phase, outcome = rem.phase, rem.outcome
    if before == (phase, outcome):
        return []
    about = f" (incident {rem.incident})" if rem.incident else ""
    detail = rem.detail
    if phase in ("lease", "draining") and (before is None or before[0] not in ("lease", "draining")):
        why = "drained by request" if rem.drain_only else f"to restart it ({rem.reason})"
        return [EventWant(target, key, NORMAL, "Draining", f"taking {target} out of rotation {why}{about}")]
    if phase == "stopping":
        return [EventWant(target, key, NORMAL, "Restarting", f"stopping {target} to restart it{about}: {detail}")]
    if phase == "done" and outcome == "done" and not rem.drain_only:
        return [EventWant(target, key, NORMAL, "Restarted", f"{target} restarted and verified{about}: {detail}")]
    if phase == "failed":
        return [EventWant(target, key, WARNING, "RestartFailed", f"{target}: restart failed{about}: {detail}")]
    return []


def plan(snapshot: StatusSnapshot, state: PlanState) -> tuple[list[GateWant], list[EventWant], PlanState]:
    gates = [
        GateWant(t.name, (t.pid, t.starttime), t.serving, t.serving_reason or "Serving", t.serving_message)
        for t in snapshot.targets
    ]
    key_of = {t.name: (t.pid, t.starttime) for t in snapshot.targets}
    events: list[EventWant] = []
    new = PlanState()
    for inc in snapshot.incidents:
        key = state.keys.get(inc.id) or key_of.get(inc.target.name) or (inc.target.pid, inc.target.starttime)
        events += _incident_events(inc, key, state.incidents.get(inc.id))
        new.incidents[inc.id] = (inc.target.name, inc.kind.value, inc.evidence_dir, len(inc.actions))
        new.keys[inc.id] = key
    for iid, (target, kind, _, _) in state.incidents.items():
        if iid not in new.incidents:
            key = key_of.get(target) or state.keys[iid]
            events.append(EventWant(target, key, NORMAL, "IncidentResolved", f"{kind} incident {iid} resolved"))
    for t in snapshot.targets:
        rem = t.remediation
        before = state.phases.get(t.name)
        if rem is not None:
            events += _phase_events(t.name, (t.pid, t.starttime), rem, before)
            new.phases[t.name] = (rem.phase, rem.outcome)
        elif before is not None:
            new.phases[t.name] = before
    return gates, events, new
