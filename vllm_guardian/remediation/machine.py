"""Drain → stop → release → start → verify, as a state machine advanced by the loop.

One ``RestartSequence`` per target at most. ``Remediator.tick`` moves each sequence as
far as it can without blocking: signals are instant and identity-checked by
ProcessControl; anything that may block (drain hook, ``systemctl``, the
Kubernetes API, the fleet lease) runs on the AsyncRunner and its result is
picked up on a later tick. Every phase change is persisted under
``<state_dir>/remediation/<target>.json`` so a guardian restarted mid-sequence
resumes without ever issuing a second start, and recorded as an ``Action`` on
the incident (with its duration).

Phases: lease → draining → stopping → releasing → starting → verifying →
done | failed. Readiness (``serving``) is False from draining until a
verified restart; after a failure, until the target serves again (``recovered``)
or ``guardian undrain``.

Before anything is stopped, a command-mode start is checked to be possible (its
``log_file`` writable); the restart is counted in the ledger before the first
signal, and a ledger that cannot be written aborts the sequence with nothing
stopped (fail closed). Before anything is started, the owner of the target (an
operator's deploy, systemd) gets ``restart.owner_grace`` seconds to bring it back
itself — always under systemd, in command mode when the server died or was found
already gone — and when it does, the guardian stands down. A failed start is
retried (``START_ATTEMPTS``), then left to a human.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from vllm_guardian.config.schema import Config, DrainConfig, Mode, PolicyConfig, RestartConfig, TargetConfig
from vllm_guardian.fsutil import atomic_write
from vllm_guardian.model import Action, Incident, Kind, ProcKey
from vllm_guardian.series import metrics as m
from vllm_guardian.remediation.launch import build_launch_spec
from vllm_guardian.remediation.policy import Maintenance, may_restart, node_anomaly
from vllm_guardian.bundle.redact import redact_argv
from vllm_guardian.host.kube import EvictionBlocked
from vllm_guardian.remediation.kube_removal import pod_of, remove_pod

if TYPE_CHECKING:
    from vllm_guardian.host.process_control import ProcessControl

HANG_KINDS = {Kind.BUSY_LOOP.value, Kind.ENGINE_STALL.value, Kind.ENGINE_DEAD.value}
HANG_DRAIN_TIMEOUT = 5.0  # a hung engine has nothing to drain: the most a hang waits, if it still steps
KILL_GRACE = 10.0  # after SIGKILL, how long processes get to disappear
RELEASE_TIMEOUT = 60.0
LEASE_RETRY = 5.0
START_ATTEMPTS = 3  # a command-mode start is tried this many times (2 s, 4 s apart), then left to a human


def start_problem(rc: RestartConfig, control: ProcessControl) -> str | None:
    """Why a command-mode start would fail, checked before anything is stopped: an unwritable
    ``log_file`` (a read-only /var/log under ProtectSystem=strict), a missing ``cwd``, a program
    that is not there, an unknown ``user``/``group`` (``vllm_guardian.remediation.launch.preflight``)."""
    if rc.mode != "command":
        return None
    try:
        problems = control.preflight(build_launch_spec(rc))
    except (ValueError, KeyError, OSError) as e:  # an unknown user or group
        problems = [f"restart: cannot build the launch: {e}"]
    if not problems:
        return None
    return "; ".join(problems) + "; not stopping a server that could not be started again"


def _fields(incident: Incident) -> dict[str, str]:
    """The target / incident / kind keys of a log line (``--log-format json|logfmt``)."""
    return {"target": incident.target.name, "incident": incident.id, "kind": incident.kind.value}


def _seq_fields(seq: RestartSequence) -> dict[str, str]:
    out = {"target": seq.target, "kind": seq.reason}
    if seq.incident_id is not None:
        out["incident"] = seq.incident_id
    return out


_NO_RESULT = object()  # a job that has not answered (None is an answer)


def stop_grace(rc: RestartConfig, reason: str) -> float:
    """SIGTERM → SIGKILL: short for a hung tree (it will not shut down cleanly), else ``stop_timeout``."""
    return min(rc.hang_stop_grace, rc.stop_timeout) if reason in HANG_KINDS else rc.stop_timeout


def _stepping(series, target: str, now: float) -> bool:
    """Did the engine's step or token counters move in the last ``HANG_DRAIN_TIMEOUT`` seconds?"""
    for metric in (m.ITERATIONS, m.GEN_TOKENS):
        pts = series.window(target, "", metric, now - HANG_DRAIN_TIMEOUT)
        if len(pts) >= 2 and pts[-1][1] > pts[0][1]:
            return True
    return False


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

    @classmethod
    def load(cls, data: Mapping[str, Any]) -> PhaseProgress:
        """From the state file (monotonic times mean nothing to the next process: dropped)."""
        begun = bool(data.get("begun") or data.get("drain_started") or data.get("term_sent"))
        return cls(
            Phase(data["phase"]),
            float(data["at"]),
            begun,
            start_issued=bool(data.get("start_issued")),
            start_failures=int(data.get("start_failures") or 0),
        )


@dataclass(frozen=True)
class RestartSpec:
    """What remediation needs to know about one configured target."""

    restart: RestartConfig = field(default_factory=RestartConfig)
    drain: DrainConfig = field(default_factory=DrainConfig)
    systemd_unit: str | None = None  # the matched unit, when restart.unit is not set

    @classmethod
    def of(cls, tc: TargetConfig) -> RestartSpec:
        return cls(tc.restart, tc.drain, tc.match.systemd_unit)


@dataclass(frozen=True)
class RemediationSettings:
    """The node, where state lives, the policy, and a restart spec per configured target
    (an autodiscovered target has none: it is never restarted)."""

    node: str | None  # as configured (control messages carry it)
    state_dir: str
    policy: PolicyConfig
    targets: Mapping[str, RestartSpec] = field(default_factory=dict)
    pod_removal: str = "evict"  # restart.mode kubernetes: evict | delete (kubernetes.pod_removal)

    @classmethod
    def from_config(cls, cfg: Config) -> RemediationSettings:
        return cls(
            cfg.node or os.uname().nodename,
            cfg.state_dir,
            cfg.policy,
            {t.name: RestartSpec.of(t) for t in cfg.targets},
            cfg.kubernetes.pod_removal,
        )


@dataclass
class RestartSequence:
    target: str
    reason: str  # incident kind, or "manual"
    incident_id: str | None
    mode: str
    api_key: tuple[int, int]
    tree: list[tuple[int, int]]
    drain_only: bool = False
    phase: Phase = Phase.LEASE
    phase_since: float = 0.0  # monotonic
    phase_since_wall: float = 0.0
    started_wall: float = 0.0
    lease_slot: int | None = None
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
    def keys(self) -> list[ProcKey]:
        return [ProcKey(p, s) for p, s in self.tree]

    @property
    def progress(self) -> PhaseProgress:
        return self.history[-1]

    def end(self, outcome: Outcome, detail: str) -> None:
        self.phase, self.outcome, self.detail = Phase(outcome.value), outcome, detail

    @classmethod
    def load(cls, data: dict[str, Any]) -> RestartSequence:
        data = dict(data)
        data["tree"] = [(int(p), int(s)) for p, s in data["tree"]]
        data["api_key"] = (int(data["api_key"][0]), int(data["api_key"][1]))
        data["phase"] = Phase(data["phase"])
        data["outcome"] = None if data.get("outcome") is None else Outcome(data["outcome"])
        data["history"] = [PhaseProgress.load(h) for h in data.get("history", [])]
        return cls(**data)


class Remediator:
    def __init__(
        self,
        settings: RemediationSettings,
        clock,
        control,
        async_runner,
        cmd_runner,
        incidents,
        ledger,
        procfs,
        *,
        lease=None,
        kube=None,
        publish_control: Callable[[dict], object] | None = None,
        release_check: Callable[[set[int]], bool | None] | None = None,
        device_check: Callable[[str], str | None] | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        self.settings = settings
        self.pod_removal = settings.pod_removal
        self.device_check = device_check  # target -> why its devices make a restart pointless (None: fine)
        self.policy = settings.policy
        self.node = settings.node
        self.maintenance = Maintenance(settings.state_dir)
        self.clock = clock
        self.control = control
        self.async_runner = async_runner
        self.cmd_runner = cmd_runner
        self.incidents = incidents
        self.ledger = ledger
        self.procfs = procfs
        self.lease = lease
        self.kube = kube
        self.publish_control = publish_control or (lambda payload: None)
        self.release_check = release_check or (lambda pids: None)
        # True while the target's evidence is being captured: draining runs meanwhile, stopping waits
        self.hold_stop: Callable[[str], bool] = lambda target: False
        self.log = log or logging.getLogger("guardian.remediation")
        self.dir = Path(settings.state_dir) / "remediation"
        self.sequences: dict[str, RestartSequence] = {}
        self.on_finish: list[Callable[[RestartSequence, Outcome], None]] = []
        self.exhausted: set[str] = set()
        self.action_counts: dict[str, int] = {}
        self.restart_counts: dict[str, dict[str, int]] = {}
        self._noted: set[tuple[str, str]] = set()
        self._save_failing: set[str] = set()  # targets whose state file could not be written (logged once)
        self._job_results: dict[str, object] = {}
        self._resume()

    # ------------------------------------------------------------------ queries
    def target_config(self, name: str) -> RestartSpec | None:
        return self.settings.targets.get(name)

    def active(self, name: str) -> bool:
        s = self.sequences.get(name)
        return s is not None and s.phase.active

    def serving(self, name: str) -> bool:
        """Readiness: False from drain start until a verified restart; False after a failed
        restart; False after a manual drain until ``undrain``."""
        s = self.sequences.get(name)
        if s is None:
            return True
        if s.drain_only:
            return not (s.phase.active or s.phase is Phase.DONE)
        return not (s.phase.active or s.phase is Phase.FAILED)

    def phase(self, name: str) -> str:
        s = self.sequences.get(name)
        if s is not None and s.drain_only and s.phase is Phase.DONE:
            return "drained"  # out of rotation until `guardian undrain`: what serving() says
        if s is None or s.phase in (Phase.DONE, Phase.UNDRAINED, Phase.RECOVERED, Phase.ABORTED):
            return "serving"
        return PHASE_NAMES.get(s.phase, s.phase.value)

    def suppress_detection(self, name: str) -> bool:
        """While the guardian itself takes a target down, its death is not news."""
        s = self.sequences.get(name)
        return s is not None and s.phase in TAKING_DOWN

    def status(self) -> dict:
        return {
            name: {
                "phase": s.phase.value,
                "reason": s.reason,
                "incident": s.incident_id,
                "mode": s.mode,
                "since": s.phase_since_wall,
                "detail": s.detail,
                "outcome": None if s.outcome is None else s.outcome.value,
                "drain_only": s.drain_only,
            }
            for name, s in self.sequences.items()
        }

    # ------------------------------------------------------------------ start
    def begin(
        self,
        name: str,
        reason: str,
        incident_id: str | None,
        api_key: ProcKey,
        tree: list[ProcKey],
        now: float,
        *,
        drain_only: bool = False,
    ) -> RestartSequence | None:
        """A new sequence, persisted first: one whose state cannot be written (a full disk) could
        not be resumed after a crash, so it is not begun (None)."""
        tc = self.target_config(name)
        mode = tc.restart.mode if tc else "signal"
        seq = RestartSequence(
            name,
            reason,
            incident_id,
            mode,
            (api_key.pid, api_key.starttime),
            [(k.pid, k.starttime) for k in tree],
            drain_only=drain_only,
            started_wall=self.clock.wall(),
        )
        self.sequences[name] = seq
        if not self._save(seq):
            del self.sequences[name]
            return None
        if mode == "kubernetes":
            seq.pod_uid = self._snapshot_pod_uid(api_key)
        self._enter(
            seq,
            Phase.LEASE,
            now,
            f"{'drain' if drain_only else 'restart'} of {name} ({reason}), "
            f"mode {mode}, tree {[p for p, _ in seq.tree]}",
        )
        return seq

    # ------------------------------------------------------------------ policy gates
    def consider(self, incident, tracked, now: float, *, mode: Mode, tripped: int, total: int) -> str:
        """Decide whether an open incident gets a restart now. Returns the decision, for status;
        each refusal is recorded on the incident once."""
        name = incident.target.name
        if self.active(name):
            return "in progress"
        if mode is not Mode.REMEDIATE:
            return f"mode {mode.value}: alert only"
        if incident.kind in (
            Kind.PROBE_FAILURE,
            Kind.RESTART_BUDGET_EXHAUSTED,
            Kind.PAUSE_TOO_LONG,
            Kind.ACCEL_FAULT,
        ):
            return (
                "a blind spot, an exhausted budget, a pause on purpose or a device fault is never a reason "
                "to restart: alert only"
            )
        prev = self.sequences.get(name)
        finished = (Phase.FAILED, Phase.DONE, Phase.ABORTED)
        if prev is not None and prev.incident_id == incident.id and prev.phase in finished:
            return f"already {prev.phase.value} for this incident"
        tc = self.target_config(name)
        if tc is None:
            return self._once(
                incident,
                "no_config",
                "skipped",
                "autodiscovered target: no restart configured (add it under targets: to remediate)",
            )
        if tc.restart.mode == "kubernetes" and self.kube is None:
            return self._once(
                incident,
                "no_kube",
                "skipped",
                "restart.mode kubernetes needs the in-cluster API (service account); alert only",
            )
        if tc.restart.mode == "command" and not tc.restart.command:
            return self._once(incident, "no_command", "skipped", "restart.mode command without a command")
        unstartable = start_problem(tc.restart, self.control)
        if unstartable:
            return self._once(incident, "unstartable", "escalated", unstartable)
        broken = self.device_check(name) if self.device_check is not None else None
        if broken:
            return self._once(incident, "device_fault", "escalated", broken)
        wall = self.clock.wall()
        if self.maintenance.active(wall):
            return self._once(incident, "maintenance", "skipped", "maintenance mode is on: no remediation")
        anomaly = node_anomaly(self.policy, tripped, total)
        if anomaly:
            return self._once(incident, "anomaly", "escalated", anomaly)
        if not tracked.ever_ready:
            return self._once(incident, "grace", "skipped", "target never became ready: startup grace")
        verdict = may_restart(self.policy, self.ledger, name, wall)
        if verdict.exhausted:
            self.exhausted.add(name)
            return self._once(incident, "budget", "escalated", verdict.reason + "; observe-only for this target")
        self.exhausted.discard(name)
        if not verdict.allowed:
            return self._once(incident, "backoff", "deferred", verdict.reason)
        if self.policy.dry_run:
            keys = [p.pid for p in tracked.target.processes]
            return self._once(
                incident,
                "dry_run",
                "dry_run",
                f"would have drained, stopped {keys} (SIGTERM, then SIGKILL after "
                f"{stop_grace(tc.restart, incident.kind.value):g}s) and restarted via {tc.restart.mode}",
            )
        if (
            self.begin(
                name,
                incident.kind.value,
                incident.id,
                tracked.target.key,
                [p.key for p in tracked.target.processes],
                now,
            )
            is None
        ):
            return self._once(
                incident,
                "unsaved",
                "escalated",
                f"remediation state could not be written under {self.dir} (full disk?); "
                "not starting a sequence that could not be resumed after a crash",
            )
        return "started"

    def manual(self, name: str, tracked, now: float, action: str, dry_run: bool) -> str:
        """``guardian drain|restart <target>``: the same machine and the same safety checks,
        minus the detector mode and the node-wide anomaly (a human decided)."""
        if tracked is None:
            raise KeyError(f"unknown target {name!r}")
        if self.active(name):
            return f"{name}: a sequence is already in progress ({self.phase(name)})"
        tc = self.target_config(name)
        if action == "restart":
            if tc is None:
                return f"{name}: autodiscovered target has no restart config; refusing to restart it"
            unstartable = start_problem(tc.restart, self.control)
            if unstartable:
                return f"{name}: refused: {unstartable}"
            broken = self.device_check(name) if self.device_check is not None else None
            if broken:
                return f"{name}: {broken}"
            verdict = may_restart(self.policy, self.ledger, name, self.clock.wall())
            if not verdict.allowed:
                return f"{name}: refused: {verdict.reason}"
        if dry_run or self.policy.dry_run:
            return (
                f"{name}: dry run: would have {'drained' if action == 'drain' else 'drained, stopped'} "
                f"{[p.pid for p in tracked.target.processes]}"
                + ("" if action == "drain" or tc is None else f" and restarted via {tc.restart.mode}")
            )
        if (
            self.begin(
                name,
                "manual",
                None,
                tracked.target.key,
                [p.key for p in tracked.target.processes],
                now,
                drain_only=(action == "drain"),
            )
            is None
        ):
            return f"{name}: refused: remediation state could not be written under {self.dir}"
        return f"{name}: {action} started"

    def undrain(self, name: str) -> str:
        seq = self.sequences.get(name)
        if seq is None or not (seq.drain_only or seq.phase is Phase.FAILED):
            return f"{name}: not drained by the guardian"
        if seq.phase.active or seq.phase in (Phase.DONE, Phase.FAILED):
            seq.end(Outcome.UNDRAINED, "undrained by request")
            self.publish_control({"action": "undrain", "target": name, "node": self.node})
            self._save(seq)
        return f"{name}: back in rotation"

    def refresh_budgets(self) -> None:
        """A target whose budget frees up leaves observe-only."""
        wall = self.clock.wall()
        for name in list(self.exhausted):
            if not may_restart(self.policy, self.ledger, name, wall).exhausted:
                self.exhausted.discard(name)

    def _once(self, incident, key: str, status: str, detail: str) -> str:
        mark = (incident.id, key)
        if mark not in self._noted:
            self._noted.add(mark)
            self._count(status)
            if status == "dry_run":
                self._count_restart(incident.target.name, "dry_run")
            try:
                self.incidents.add_action(incident.id, Action("restart", status, self.clock.wall(), detail))
            except KeyError:
                pass
            self.log.warning("remediation %s: %s: %s", incident.target.name, status, detail, extra=_fields(incident))
        return f"{status}: {detail}"

    # ------------------------------------------------------------------ the machine
    def tick(self, now: float, tracker, series) -> None:
        steps = {
            Phase.LEASE: self._step_lease,
            Phase.DRAINING: self._step_draining,
            Phase.STOPPING: self._step_stopping,
            Phase.RELEASING: self._step_releasing,
            Phase.STARTING: self._step_starting,
            Phase.VERIFYING: self._step_verifying,
        }
        for seq in list(self.sequences.values()):
            if seq.phase is Phase.FAILED and not seq.drain_only:
                self._recover_if_healthy(seq, tracker)
            for _ in range(6):  # several instant steps may chain within one tick
                before = seq.phase
                if not before.active:
                    break
                steps[before](seq, now, tracker, series)
                if seq.phase is before:
                    break

    def _recover_if_healthy(self, seq: RestartSequence, tracker) -> None:
        """After a failed sequence readiness stays down only while the target is unhealthy: once a
        new server of it serves (a human or its owner fixed it) it goes back in rotation."""
        tr = tracker.targets.get(seq.target)
        if tr is None or not (tr.ready and tr.api_alive):
            return
        key = (tr.target.key.pid, tr.target.key.starttime)
        if key == tuple(seq.api_key) or key in {tuple(k) for k in seq.tree}:
            return  # still the server the sequence gave up on
        seq.phase = Phase.RECOVERED
        seq.history.append(PhaseProgress(Phase.RECOVERED, self.clock.wall()))
        self.publish_control({"action": "undrain", "target": seq.target, "node": self.node})
        self.log.warning(
            "remediation %s: healthy again after the failed sequence (pid %d): back in rotation", seq.target, key[0]
        )
        self._save(seq)

    def _step_lease(self, seq: RestartSequence, now: float, tracker, series) -> None:
        if seq.drain_only:
            self._enter(seq, Phase.DRAINING, now, "drain requested")
            return
        if self.lease is None:
            self._enter(seq, Phase.DRAINING, now, "no fleet lease configured")
            return
        res = self._job(seq, "lease", lambda: self.lease.acquire(seq.target), now, retry_every=LEASE_RETRY)
        if res is None:
            return
        if res.granted:
            seq.lease_slot = res.slot
            self._enter(seq, Phase.DRAINING, now, res.reason)
        elif not seq.lease_waiting_noted:
            seq.lease_waiting_noted = True
            self._record(seq, "fleet_lease", "waiting", res.reason)

    def _step_draining(self, seq: RestartSequence, now: float, tracker, series) -> None:
        tc = self.target_config(seq.target)
        if not seq.progress.begun:
            seq.progress.begun = True
            self.publish_control({"action": "drain", "target": seq.target, "node": self.node, "reason": seq.reason})
            if tc and tc.drain.hook:
                hook = tuple(tc.drain.hook)
                self.async_runner.submit(
                    ("remediation", f"{seq.target}:hook"),
                    lambda: self.cmd_runner.run(hook, max(1.0, tc.drain.timeout)),
                    deadline=now + tc.drain.timeout + 5,
                )
        timeout = tc.drain.timeout if tc else 0.0
        if seq.reason == Kind.ENGINE_DEAD.value:
            timeout = 0.0  # a dead engine serves nothing: counters that moved before it died drain nothing
        elif seq.reason in HANG_KINDS:  # a hung engine makes no progress: nothing can drain
            timeout = min(timeout, HANG_DRAIN_TIMEOUT if _stepping(series, seq.target, now) else 0.0)
        running = series.latest(seq.target, "", m.REQ_RUNNING)
        waiting = series.latest(seq.target, "", m.REQ_WAITING)
        fresh = running is not None and waiting is not None and now - running[0] <= 3.0 and now - waiting[0] <= 3.0
        empty = fresh and running[1] + waiting[1] == 0 and running[0] > seq.phase_since
        if seq.drain_only:
            if empty or now - seq.phase_since >= timeout:
                self._finish(seq, now, Outcome.DONE, "drained" if empty else "drain timeout reached; left drained")
            return
        if not empty and now - seq.phase_since < timeout:
            return
        if self.hold_stop(seq.target):
            return  # evidence first: the processes must still be there to be dumped
        if empty:
            self._enter(seq, Phase.STOPPING, now, f"drained in {now - seq.phase_since:.1f}s")
        else:
            self._enter(
                seq,
                Phase.STOPPING,
                now,
                f"drain timeout {timeout:g}s reached" + (" (no progress: nothing to drain)" if timeout == 0 else ""),
            )

    def _step_stopping(self, seq: RestartSequence, now: float, tracker, series) -> None:
        tc = self.target_config(seq.target)
        rc = tc.restart if tc else RestartConfig()
        api = ProcKey(*seq.api_key)
        if not seq.progress.begun:
            try:
                self._record_restart(seq)
            except OSError as e:  # fail closed: an uncounted restart could loop past the budget
                self._finish(
                    seq,
                    now,
                    Outcome.ABORTED,
                    f"restart ledger could not be written ({e}); nothing was stopped (fail closed)",
                )
                self.publish_control({"action": "undrain", "target": seq.target, "node": self.node})
                return
            seq.progress.begun = True
            if seq.mode == "kubernetes" and self.kube is not None:
                uid, ns = seq.pod_uid, rc.namespace
                spec = self.settings.targets.get(seq.target)
                budget = spec.drain.timeout if spec is not None else DrainConfig().timeout
                self.async_runner.submit(
                    ("remediation", f"{seq.target}:kube"),
                    lambda: self._kube_remove(api, int(stop_grace(rc, seq.reason)), uid, ns, budget),
                    deadline=now + budget + 60,
                    on_done=self._job_done,
                )
                seq.progress.kube_pending = True
                self._record(
                    seq,
                    "stop",
                    "ok",
                    f"pod {'eviction' if self.pod_removal == 'evict' else 'delete'} requested "
                    f"(grace {stop_grace(rc, seq.reason):g}s) {uid or ''}",
                )
            else:
                sent = self.control.signal(api, signal.SIGTERM)
                seq.found_gone = not sent
                self._record(
                    seq,
                    "stop",
                    "ok" if sent else "skipped",
                    f"SIGTERM to API server {api}" if sent else f"API server {api} already gone",
                )
        key = f"{seq.target}:kube"
        kube_res = self._job_results.pop(key, None) if key in self._job_results else _NO_RESULT
        if kube_res is not _NO_RESULT:
            seq.progress.kube_pending = False
            if isinstance(kube_res, EvictionBlocked):  # never stop it behind its disruption budget's back
                self._finish(seq, now, Outcome.FAILED, f"{kube_res}: nothing was stopped; a person decides")
                return
            if isinstance(kube_res, BaseException):
                self._record(seq, "stop", "failed", f"pod removal failed: {kube_res}; SIGKILL after stop_timeout")
            elif kube_res is not None:
                self._record(seq, "stop", "ok", str(kube_res))
        alive = [k for k in seq.keys if self.control.alive(k)]
        grace = stop_grace(rc, seq.reason)
        if seq.progress.kube_pending:
            grace = max(grace, now - seq.phase_since + 1)  # the eviction may wait on a budget: no SIGKILL meanwhile
        if alive and not seq.sigkill_sent and now - seq.phase_since >= grace:
            seq.sigkill_sent = True
            killed = [k.pid for k in alive if self.control.signal(k, signal.SIGKILL)]
            self._record(seq, "kill", "ok", f"SIGKILL after {grace:g}s to {killed}")
            seq.progress.kill_at = now
            alive = [k for k in seq.keys if self.control.alive(k)]
        if not alive:
            self._enter(seq, Phase.RELEASING, now, f"tree stopped in {now - seq.phase_since:.1f}s")
            return
        kill_at = seq.progress.kill_at
        if seq.sigkill_sent and now - (now if kill_at is None else kill_at) >= KILL_GRACE:
            self._finish(
                seq,
                now,
                Outcome.FAILED,
                f"processes survived SIGKILL: {[k.pid for k in alive]} "
                f"(uninterruptible in the kernel?); a human must look",
            )

    def _step_releasing(self, seq: RestartSequence, now: float, tracker, series) -> None:
        broken = self.device_check(seq.target) if self.device_check is not None else None
        if broken:  # a device fault seen while the tree was stopped: never start onto it
            self._finish(seq, now, Outcome.FAILED, f"stopped, not started again: {broken}; a human must look")
            return
        held = self.release_check({p for p, _ in seq.tree})
        if held is None or held is False:
            self._enter(
                seq,
                Phase.STARTING,
                now,
                "no accelerator backend"
                if held is None
                else f"accelerator memory released in {now - seq.phase_since:.1f}s",
            )
        elif now - seq.phase_since >= RELEASE_TIMEOUT:
            self._enter(
                seq, Phase.STARTING, now, f"accelerator memory still held after {RELEASE_TIMEOUT:g}s; starting anyway"
            )

    def _owner_is_back(self, seq: RestartSequence, tracker) -> str | None:
        """Is the target's owner already bringing it back? A new API server for the target (a
        new process on its port or matching it) says so."""
        tr = tracker.targets.get(seq.target)
        if tr is None or not tr.api_alive:
            return None
        key = (tr.target.key.pid, tr.target.key.starttime)
        if key == tuple(seq.api_key) or key in {tuple(k) for k in seq.tree}:
            return None
        return f"a new API server pid {key[0]} appeared for {seq.target}"

    def _systemd_activating(self, seq: RestartSequence, unit: str | None, now: float) -> str | None:
        """systemd already (re)starting the unit: ActiveState activating/reloading, or active with a
        MainPID outside the stopped tree."""
        if not unit:
            return None
        res = self._job(
            seq,
            "unit_state",
            lambda: self.cmd_runner.run(("systemctl", "show", "-p", "ActiveState", "-p", "MainPID", unit), 10),
            now,
            retry_every=2.0,
        )
        text = getattr(res, "text", None)
        if not isinstance(text, str) or not getattr(res, "ok", False):
            return None
        props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        state, main = props.get("ActiveState", ""), props.get("MainPID", "0")
        old = {p for p, _ in seq.tree}
        if state in ("activating", "reloading") or (
            state == "active" and main.isdigit() and int(main) not in old and int(main) != 0
        ):
            return f"systemd unit {unit} is {state} (MainPID {main})"
        return None

    def _owner_grace(self, seq: RestartSequence, now: float, tracker, tc: RestartSpec | None) -> bool:
        """True while waiting for the target's owner (a deploy, systemd) to bring it back;
        stands the sequence down when it does. ``owner_grace: 0`` turns the wait off."""
        rc = tc.restart if tc else RestartConfig()
        progress = seq.progress
        if progress.owner_checked or progress.start_issued or rc.owner_grace <= 0:
            return False
        if seq.mode == "command" and not (seq.found_gone or seq.reason == Kind.ENGINE_DEAD.value):
            return False  # the guardian stopped it itself: nobody else is bringing it back
        if progress.owner_wait_since is None:
            progress.owner_wait_since = now
        back = self._owner_is_back(seq, tracker)
        if back is None and seq.mode == "systemd":
            back = self._systemd_activating(seq, rc.unit or (tc.systemd_unit if tc else None), now)
        if back is not None:
            progress.owner_checked = True
            self._record(seq, "owner_check", "stood_down", f"stood down: {back}; not starting a second copy")
            self._enter(seq, Phase.VERIFYING, now, f"stood down: the owner brought it back ({back})")
            return True
        if now - progress.owner_wait_since < rc.owner_grace:
            return True
        progress.owner_checked = True
        self._record(
            seq,
            "owner_check",
            "ok",
            f"proceeding: nothing brought {seq.target} back within owner_grace {rc.owner_grace:g}s",
        )
        return False

    def _step_starting(self, seq: RestartSequence, now: float, tracker, series) -> None:
        tc = self.target_config(seq.target)
        rc = tc.restart if tc else RestartConfig()
        if seq.mode in ("command", "systemd") and self._owner_grace(seq, now, tracker, tc):
            return
        if seq.mode == "command":
            progress = seq.progress
            if progress.start_retry_at is not None and now < progress.start_retry_at:
                return
            progress.start_issued = True  # from here a guardian restarted mid-start never starts again
            self._save(seq)
            try:  # a clean environment, as restart.user/group (vllm_guardian.remediation.launch)
                spec = build_launch_spec(rc)
                seq.started_pid = self.control.start_spec(spec)
            except (OSError, ValueError) as e:
                progress.start_failures += 1
                tries = progress.start_failures
                if tries >= START_ATTEMPTS:
                    self._finish(
                        seq, now, Outcome.FAILED, f"start failed {tries} times, last: {e}; a human must start it"
                    )
                    return
                wait = 2.0**tries
                progress.start_retry_at = now + wait
                self._record(
                    seq, "start", "failed", f"start failed: {e}; retrying in {wait:g}s ({tries} of {START_ATTEMPTS})"
                )
                self._save(seq)
                return
            self._enter(
                seq, Phase.VERIFYING, now, f"started pid {seq.started_pid}: {' '.join(redact_argv(spec.argv))[:200]}"
            )
        elif seq.mode == "systemd":
            unit = rc.unit or (tc.systemd_unit if tc else None)
            if not seq.progress.start_issued:
                seq.progress.start_issued = True
                self._save(seq)
            res = self._job(seq, "systemctl", lambda: self.cmd_runner.run(("systemctl", "restart", unit), 60), now)
            if res is None:
                return
            if getattr(res, "ok", False):
                self._enter(seq, Phase.VERIFYING, now, f"systemctl restart {unit}")
            else:
                self._finish(
                    seq,
                    now,
                    Outcome.FAILED,
                    f"systemctl restart {unit} failed: {getattr(res, 'error_text', res)!s}"[:300],
                )
        else:  # kubernetes: its controller recreates the pod; signal: an external supervisor restarts
            self._enter(
                seq,
                Phase.VERIFYING,
                now,
                "waiting for the "
                + ("controller to recreate the pod" if seq.mode == "kubernetes" else "external supervisor"),
            )

    def _step_verifying(self, seq: RestartSequence, now: float, tracker, series) -> None:
        tc = self.target_config(seq.target)
        rc = tc.restart if tc else RestartConfig()
        tr = tracker.targets.get(seq.target)
        if (
            tr is not None
            and tuple((tr.target.key.pid, tr.target.key.starttime)) != tuple(seq.api_key)
            and tr.ready
            and tr.api_alive
        ):
            self._finish(
                seq,
                now,
                Outcome.DONE,
                f"healthy again: pid {tr.target.key.pid}, /health 200 and a canary "
                f"answered {now - seq.phase_since:.1f}s after start",
            )
        elif now - seq.phase_since >= rc.ready_timeout:
            self._finish(seq, now, Outcome.FAILED, f"not ready within ready_timeout {rc.ready_timeout:g}s")

    # ------------------------------------------------------------------ helpers
    def _snapshot_pod_uid(self, api: ProcKey) -> str | None:
        """The API server's pod UID while it still is the snapshotted process (None when unreadable)."""
        from vllm_guardian.host.kube import pod_uid_of

        if self.procfs is None:
            return None
        try:
            return pod_uid_of(self.procfs, api, self.control.alive)
        except Exception as e:  # noqa: BLE001 - read again, identity-checked, at delete time
            self.log.warning("remediation: pod of pid %d not recorded: %s", api.pid, e)
            return None

    def _kube_remove(self, api: ProcKey, grace: int, uid: str | None, namespace: str | None, budget: float) -> str:
        """Evict (or delete) the target's pod: ``vllm_guardian.remediation.kube_removal``."""
        pod = pod_of(self.kube, self.procfs, api, self.control.alive, uid, namespace)
        return remove_pod(self.kube, pod, grace, self.pod_removal, budget, log=self.log).describe()

    def _job(self, seq: RestartSequence, name: str, fn, now: float, retry_every: float | None = None):
        """Run ``fn`` off the loop once per phase (or every ``retry_every`` s); None until it ends."""
        key = f"{seq.target}:{name}"
        if key in self._job_results:
            res = self._job_results.pop(key)
            seq.pending_job = None
            seq.progress.job_at = now
            return res
        last = seq.progress.job_at
        due = last is None or (retry_every is not None and now - last >= retry_every)
        if (
            seq.pending_job != key
            and due
            and self.async_runner.submit(("remediation", key), fn, deadline=now + 90, on_done=self._job_done)
        ):
            seq.pending_job = key
        return None

    def _job_done(self, done, now: float) -> None:
        self._job_results[done.key[1]] = done.error if done.error is not None else done.result

    def _record_restart(self, seq: RestartSequence) -> None:
        """The budget counts the disruptive act: recorded (and persisted) before the first signal."""
        self.ledger.record(seq.target, self.clock.wall())

    def _enter(self, seq: RestartSequence, phase: Phase, now: float, detail: str) -> None:
        took = now - seq.phase_since if seq.history else 0.0
        if seq.history:
            self._record(seq, seq.phase.value, "ok", f"{detail} ({took:.1f}s)")
        else:
            self._record(seq, "remediation", "running", detail)
        seq.phase, seq.phase_since, seq.phase_since_wall, seq.detail = phase, now, self.clock.wall(), detail
        seq.history.append(PhaseProgress(phase, seq.phase_since_wall))
        if self.lease is not None and seq.lease_slot is not None:  # a long sequence keeps its slot
            slot = seq.lease_slot
            self.async_runner.submit(
                ("remediation", f"{seq.target}:renew"), lambda: self.lease.renew(seq.target, slot), deadline=now + 30
            )
        self.log.info("remediation %s: %s (%s)", seq.target, phase, detail, extra=_seq_fields(seq))
        self._save(seq)

    def _finish(self, seq: RestartSequence, now: float, outcome: Outcome, detail: str) -> None:
        done = outcome is Outcome.DONE
        self._record(seq, seq.phase.value, "ok" if done else "failed", detail)
        seq.end(outcome, detail)
        seq.phase_since, seq.phase_since_wall = now, self.clock.wall()
        if self.lease is not None and seq.lease_slot is not None:
            slot = seq.lease_slot
            self.async_runner.submit(
                ("remediation", f"{seq.target}:release"),
                lambda: self.lease.release(seq.target, slot),
                deadline=now + 30,
            )
        if done and not seq.drain_only:
            self.publish_control({"action": "undrain", "target": seq.target, "node": self.node})
        if not seq.drain_only:
            self._count_restart(seq.target, "ok" if done else "failed")
        self.log.log(
            logging.INFO if done else logging.ERROR, "remediation %s: %s (%s)", seq.target, outcome.value, detail
        )
        for hook in self.on_finish:
            hook(seq, outcome)
        self._save(seq)

    def _count(self, status: str) -> None:
        self.action_counts[status] = self.action_counts.get(status, 0) + 1

    def _count_restart(self, target: str, outcome: str) -> None:
        per = self.restart_counts.setdefault(target, {})
        per[outcome] = per.get(outcome, 0) + 1

    def _record(self, seq: RestartSequence, name: str, status: str, detail: str) -> None:
        self._count(status)
        if seq.incident_id is None:
            return
        try:
            self.incidents.add_action(seq.incident_id, Action(name, status, self.clock.wall(), detail))
        except KeyError:
            pass  # the incident was resolved and aged out meanwhile

    # ------------------------------------------------------------------ persistence
    def _save(self, seq: RestartSequence) -> bool:
        """Persist the sequence (atomic). A disk that refuses (ENOSPC, EIO) is logged once per
        episode and reported (False): a running sequence goes on rather than wedging mid-stop,
        and ``begin`` refuses to start one it could not resume after a crash."""
        path = self.dir / f"{seq.target}.json"
        data = asdict(seq)
        data["phase_since"] = None  # monotonic times mean nothing to the next process
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic_write(path, json.dumps(data))
        except OSError as e:
            if seq.target not in self._save_failing:
                self._save_failing.add(seq.target)
                self.log.error("remediation %s: state could not be written to %s: %s", seq.target, path, e)
            return False
        self._save_failing.discard(seq.target)
        return True

    def _resume(self) -> None:
        """A guardian restarted mid-sequence: resume where it is safe, never start twice."""
        if not self.dir.is_dir():
            return
        now = self.clock.monotonic()
        for path in sorted(self.dir.glob("*.json")):
            try:
                seq = RestartSequence.load(json.loads(path.read_text()))
            except (OSError, ValueError, TypeError, KeyError, IndexError, RecursionError) as e:
                self.log.warning("ignoring unreadable remediation state %s: %s", path, e)
                continue
            seq.phase_since = now
            seq.pending_job = None
            if seq.phase in (Phase.LEASE, Phase.DRAINING) and not self.control.alive(ProcKey(*seq.api_key)):
                # the server changed while the guardian was down: nothing to resume
                seq.end(
                    Outcome.ABORTED,
                    f"guardian restarted before the stop and API server {seq.api_key[0]} "
                    "is gone; aborted, lease released",
                )
                self._release_lease(seq, now)
                self.publish_control({"action": "undrain", "target": seq.target, "node": self.node})
            elif seq.phase in (Phase.LEASE, Phase.DRAINING):
                # nothing disruptive happened yet: take the lease again (ours is kept) and drain again
                seq.phase = Phase.LEASE
                seq.lease_waiting_noted = False
                seq.history.append(PhaseProgress(Phase.LEASE, self.clock.wall()))
                seq.detail = "guardian restarted before the stop; resuming from the fleet lease"
            elif seq.phase is Phase.STARTING and seq.history and not seq.progress.start_issued:
                # still waiting for the owner (nothing was started): wait again, then decide
                seq.history.append(PhaseProgress(Phase.STARTING, self.clock.wall()))
                seq.detail = "guardian restarted before the start was issued; checking for the owner again"
            elif seq.phase is Phase.STARTING:
                # the start may or may not have been issued: never issue it twice; wait for it
                seq.phase = Phase.VERIFYING
                seq.detail = "guardian restarted during start; verifying without starting again"
            elif seq.phase in (Phase.STOPPING, Phase.RELEASING):
                seq.history.append(PhaseProgress(seq.phase, self.clock.wall(), begun=True))
                seq.detail = f"guardian restarted during {seq.phase.value}; resuming"
            self.sequences[seq.target] = seq
            self._record(seq, "resume", "ok", seq.detail)
            self.log.warning("remediation %s: %s", seq.target, seq.detail, extra=_seq_fields(seq))
            self._save(seq)

    def _release_lease(self, seq: RestartSequence, now: float) -> None:
        if self.lease is None or seq.lease_slot is None:
            return
        slot, lease, target = seq.lease_slot, self.lease, seq.target
        seq.lease_slot = None
        self.async_runner.submit(
            ("remediation", f"{target}:release"), lambda: lease.release(target, slot), deadline=now + 30
        )
