"""A restart sequence: where it is (``Phase``), how it ended (``Outcome``), what happened in each
phase (``PhaseProgress``), and its JSON form (``to_json`` / ``RestartSequence.from_json``).

Pure data. The JSON form is the state file ``<state_dir>/remediation/<target>.json``; process
identities are written as ``[pid, starttime]`` pairs (the format of every earlier version, which
``from_json`` still reads), and monotonic times are dropped: they mean nothing to the next process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping

from vllm_guardian.model import ProcKey


class Phase(str, Enum):
    """Where a sequence is. The first six are active; the rest end it (and name its outcome)."""

    LEASE = "lease"
    DRAINING = "draining"
    STOPPING = "stopping"
    RELEASING = "releasing"
    STARTING = "starting"
    VERIFYING = "verifying"
    DONE = "done"
    FAILED = "failed"
    ABORTED = "aborted"  # the guardian restarted before anything disruptive happened
    UNDRAINED = "undrained"  # a manual drain, ended by ``undrain``
    RECOVERED = "recovered"  # failed, then the target served again (its owner or a human fixed it)

    @property
    def active(self) -> bool:
        return self in ACTIVE

    def __str__(self) -> str:
        return self.value


class Outcome(str, Enum):
    DONE = "done"
    FAILED = "failed"
    ABORTED = "aborted"
    UNDRAINED = "undrained"

    def __str__(self) -> str:
        return self.value


ACTIVE = frozenset({Phase.LEASE, Phase.DRAINING, Phase.STOPPING, Phase.RELEASING, Phase.STARTING, Phase.VERIFYING})
# the guardian takes the target down itself from here on: its death is not news
TAKING_DOWN = frozenset({Phase.STOPPING, Phase.RELEASING, Phase.STARTING, Phase.VERIFYING})
# sequences in these phases are over for their incident (a second one is not begun for it)
FINISHED = frozenset({Phase.FAILED, Phase.DONE, Phase.ABORTED})
# what status shows as the target's phase while a sequence runs
PHASE_NAMES = {
    Phase.LEASE: "draining",
    Phase.DRAINING: "draining",
    Phase.STOPPING: "stopping",
    Phase.RELEASING: "stopping",
    Phase.STARTING: "starting",
    Phase.VERIFYING: "verifying",
}


@dataclass
class PhaseProgress:
    """What happened inside one phase (a new one is started on entering the next phase)."""

    phase: Phase
    at: float  # wall time the phase was entered
    begun: bool = False  # draining: drain published (hook started); stopping: SIGTERM sent or pod delete asked
    kill_at: float | None = None  # stopping: monotonic time SIGKILL was sent
    job_at: float | None = None  # monotonic time this phase's off-loop job (lease, systemctl) last ended
    start_issued: bool = False  # starting: the start (command, systemctl) was issued; never again
    owner_wait_since: float | None = None  # starting: monotonic time the owner grace began
    owner_checked: bool = False  # starting: the owner grace is over (stood down or proceeding)
    start_failures: int = 0  # starting: failed command-mode starts so far
    start_retry_at: float | None = None  # starting: monotonic time of the next start attempt
    kube_pending: bool = False  # stopping: the eviction (or delete) job has not answered yet

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase.value,
            "at": self.at,
            "begun": self.begun,
            "kill_at": self.kill_at,
            "job_at": self.job_at,
            "start_issued": self.start_issued,
            "owner_wait_since": self.owner_wait_since,
            "owner_checked": self.owner_checked,
            "start_failures": self.start_failures,
            "start_retry_at": self.start_retry_at,
            "kube_pending": self.kube_pending,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PhaseProgress:
        """From the state file (monotonic times mean nothing to the next process: dropped). Older
        files said ``drain_started`` / ``term_sent`` for ``begun``."""
        begun = bool(data.get("begun") or data.get("drain_started") or data.get("term_sent"))
        return cls(
            Phase(data["phase"]),
            float(data["at"]),
            begun,
            start_issued=bool(data.get("start_issued")),
            start_failures=int(data.get("start_failures") or 0),
        )


def _key(raw: Any) -> ProcKey:
    pid, starttime = raw  # a [pid, starttime] pair
    return ProcKey(int(pid), int(starttime))


@dataclass
class RestartSequence:
    """One drain → stop → release → start → verify of one target (at most one per target)."""

    target: str
    reason: str  # incident kind, or "manual"
    incident_id: str | None
    mode: str  # the restart method's name (``vllm_guardian.remediation.methods``)
    api_key: ProcKey
    tree: list[ProcKey]
    drain_only: bool = False
    phase: Phase = Phase.LEASE
    phase_since: float = 0.0  # monotonic
    phase_since_wall: float = 0.0
    started_wall: float = 0.0
    lease_slot: int | None = None
    lease_token: int | None = None  # the fence token of the slot's grant (remediation/lease.py)
    lease_waiting_noted: bool = False
    sigkill_sent: bool = False
    started_pid: int | None = None
    pending_job: str | None = None  # name of an async job in flight for this sequence
    pod_uid: str | None = None  # kubernetes: the API server's pod, recorded when the sequence began
    found_gone: bool = False  # stopping: the API server was already gone (someone else stopped it)
    outcome: Outcome | None = None
    detail: str = ""
    history: list[PhaseProgress] = field(default_factory=list)

    @property
    def progress(self) -> PhaseProgress:
        return self.history[-1]

    def is_old_server(self, key: ProcKey) -> bool:
        """Is ``key`` the API server or a process of the tree this sequence took down?"""
        return key == self.api_key or key in self.tree

    def end(self, outcome: Outcome, detail: str) -> None:
        self.phase, self.outcome, self.detail = Phase(outcome.value), outcome, detail

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "reason": self.reason,
            "incident_id": self.incident_id,
            "mode": self.mode,
            "api_key": [self.api_key.pid, self.api_key.starttime],
            "tree": [[k.pid, k.starttime] for k in self.tree],
            "drain_only": self.drain_only,
            "phase": self.phase.value,
            "phase_since": None,  # monotonic: means nothing to the next process
            "phase_since_wall": self.phase_since_wall,
            "started_wall": self.started_wall,
            "lease_slot": self.lease_slot,
            "lease_token": self.lease_token,
            "lease_waiting_noted": self.lease_waiting_noted,
            "sigkill_sent": self.sigkill_sent,
            "started_pid": self.started_pid,
            "pending_job": self.pending_job,
            "pod_uid": self.pod_uid,
            "found_gone": self.found_gone,
            "outcome": None if self.outcome is None else self.outcome.value,
            "detail": self.detail,
            "history": [h.to_json() for h in self.history],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RestartSequence:
        """Raises ``ValueError``/``TypeError``/``KeyError`` on a file that is not a sequence."""
        outcome = data.get("outcome")
        lease_slot = data.get("lease_slot")
        lease_token = data.get("lease_token")
        started_pid = data.get("started_pid")
        return cls(
            target=str(data["target"]),
            reason=str(data["reason"]),
            incident_id=None if data.get("incident_id") is None else str(data["incident_id"]),
            mode=str(data["mode"]),
            api_key=_key(data["api_key"]),
            tree=[_key(k) for k in data["tree"]],
            drain_only=bool(data.get("drain_only", False)),
            phase=Phase(data["phase"]),
            phase_since_wall=float(data.get("phase_since_wall") or 0.0),
            started_wall=float(data.get("started_wall") or 0.0),
            lease_slot=None if lease_slot is None else int(lease_slot),
            lease_token=None if lease_token is None else int(lease_token),
            lease_waiting_noted=bool(data.get("lease_waiting_noted", False)),
            sigkill_sent=bool(data.get("sigkill_sent", False)),
            started_pid=None if started_pid is None else int(started_pid),
            pending_job=None,  # a job of the previous process: never delivered to this one
            pod_uid=None if data.get("pod_uid") is None else str(data["pod_uid"]),
            found_gone=bool(data.get("found_gone", False)),
            outcome=None if outcome is None else Outcome(outcome),
            detail=str(data.get("detail", "")),
            history=[PhaseProgress.from_json(h) for h in data.get("history", [])],
        )
