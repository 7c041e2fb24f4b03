"""What the guardian tells Kubernetes after a tick (surface/kube_plan.py, pure): one Event per
thing that happened since the previous tick, with the reason an SRE filters on, on the pod of
the process it is about (or the Node), and nothing twice."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from vllm_guardian.remediation.remediator import SequenceStatus
from vllm_guardian.model import Action, Incident, Kind, Severity, Status, TargetRef
from vllm_guardian.surface.kube_plan import PlanState, camel, plan

KEY = (100, 1000)


@dataclass
class Target:
    name: str = "llama"
    pid: int = KEY[0]
    starttime: int = KEY[1]
    serving: bool = True
    serving_reason: str = "Serving"
    serving_message: str = "llama: serving"
    remediation: SequenceStatus | None = None


@dataclass
class Snap:
    targets: list[Target] = field(default_factory=lambda: [Target()])
    incidents: list[Incident] = field(default_factory=list)


def incident(kind=Kind.BUSY_LOOP, actions=(), evidence=None) -> Incident:
    return Incident(
        "inc1",
        kind,
        Severity.CRITICAL,
        "n",
        TargetRef("llama", *KEY),
        Status.FIRING,
        "spins",
        0.0,
        evidence_dir=evidence,
        actions=tuple(actions),
    )


def events_between(before: Any, after: Any) -> list[tuple[str | None, str, str]]:
    _, _, state = plan(before, PlanState())
    _, events, _ = plan(after, state)
    return [(e.target, e.type, e.reason) for e in events]


@pytest.mark.parametrize(
    "kind, reason", [("busy_loop", "BusyLoop"), ("kv_cache_leak", "KvCacheLeak"), ("accel_fault", "AccelFault")]
)
def test_kinds_become_camel_case_reasons(kind, reason):
    assert camel(kind) == reason


@pytest.mark.parametrize(
    "before, after, expected",
    [
        (Snap(), Snap(incidents=[incident()]), [("llama", "Warning", "BusyLoop")]),
        (Snap(), Snap(incidents=[incident(Kind.RESTART_BUDGET_EXHAUSTED)]), [("llama", "Warning", "RestartRefused")]),
        (
            Snap(incidents=[incident()]),
            Snap(incidents=[incident(evidence="/b")]),
            [("llama", "Normal", "EvidenceCaptured")],
        ),
        (Snap(incidents=[incident()]), Snap(), [("llama", "Normal", "IncidentResolved")]),
        (Snap(incidents=[incident()]), Snap(incidents=[incident()]), []),
        (
            Snap(incidents=[incident()]),
            Snap(incidents=[incident(actions=[Action("restart", "escalated", 1.0, "restart budget exhausted")])]),
            [("llama", "Warning", "RestartRefused")],
        ),
        (
            Snap(incidents=[incident()]),
            Snap(incidents=[incident(actions=[Action("fleet_lease", "waiting", 1.0, "2 of 2 slots taken")])]),
            [("llama", "Warning", "RestartRefused")],
        ),
        (
            Snap(incidents=[incident()]),
            Snap(incidents=[incident(actions=[Action("restart", "escalated", 1.0, "node-wide anomaly: 3 of 4")])]),
            [("llama", "Warning", "RestartRefused"), (None, "Warning", "NodeAnomaly")],
        ),
        (
            Snap(incidents=[incident()]),
            Snap(incidents=[incident(actions=[Action("restart", "dry_run", 1.0, "would have restarted")])]),
            [],
        ),
    ],
)
def test_incident_events(before, after, expected):
    assert events_between(before, after) == expected


def rem(phase, outcome=None, drain_only=False):
    return Snap(
        targets=[
            Target(
                remediation=SequenceStatus(
                    phase=phase,
                    reason="busy_loop",
                    incident="inc1",
                    mode="signal",
                    since=0.0,
                    detail="",
                    outcome=outcome,
                    drain_only=drain_only,
                )
            )
        ]
    )


@pytest.mark.parametrize(
    "before, after, expected",
    [
        (Snap(), rem("lease"), [("llama", "Normal", "Draining")]),
        (rem("lease"), rem("draining"), []),
        (rem("draining"), rem("stopping"), [("llama", "Normal", "Restarting")]),
        (rem("stopping"), rem("starting"), []),
        (rem("verifying"), rem("done", "done"), [("llama", "Normal", "Restarted")]),
        (rem("draining", drain_only=True), rem("done", "done", drain_only=True), []),
        (rem("verifying"), rem("failed", "failed"), [("llama", "Warning", "RestartFailed")]),
        (rem("done", "done"), rem("done", "done"), []),
    ],
)
def test_remediation_phase_events(before, after, expected):
    assert events_between(before, after) == expected


def test_each_target_gets_its_gate_verdict_on_its_process():
    snap = Snap(targets=[Target(serving=False, serving_reason="Draining", serving_message="m")])
    (gate,), _, _ = plan(snap, PlanState())  # type: ignore[arg-type]  # what plan reads of a StatusSnapshot
    assert (gate.target, gate.key, gate.serving, gate.reason) == ("llama", KEY, False, "Draining")
