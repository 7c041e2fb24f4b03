"""Drain → stop → release → start → verify, as a state machine advanced by the loop (SPEC §7).

One ``Sequence`` per target at most. ``Remediator.tick`` moves each sequence as
far as it can without blocking: signals are instant and identity-checked by
ProcessControl; anything that may block (drain hook, ``systemctl``, the
Kubernetes API, the fleet lease) runs on the AsyncRunner and its result is
picked up on a later tick. Every phase change is persisted under
``<state_dir>/remediation/<target>.json`` so a guardian restarted mid-sequence
resumes without ever issuing a second start, and recorded as an ``Action`` on
the incident (with its duration).

Phases: lease → draining → stopping → releasing → starting → verifying →
done | failed. Readiness (``serving``) is False from draining until a
verified restart.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ..config_schema import Config, RestartConfig, TargetConfig
from ..model import Action, Kind, ProcKey
from ..series import metrics as m
from .launch import build_launch_spec
from .redact import redact_argv

HANG_KINDS = {Kind.BUSY_LOOP.value, Kind.ENGINE_STALL.value, Kind.ENGINE_DEAD.value}
HANG_DRAIN_TIMEOUT = 5.0  # a hung engine has nothing to drain
KILL_GRACE = 10.0  # after SIGKILL, how long processes get to disappear
RELEASE_TIMEOUT = 60.0
LEASE_RETRY = 5.0
ACTIVE = ("lease", "draining", "stopping", "releasing", "starting", "verifying")
PHASE_NAMES = {"lease": "draining", "draining": "draining", "stopping": "stopping", "releasing": "stopping",
               "starting": "starting", "verifying": "verifying"}


@dataclass
class Sequence:
    target: str
    reason: str  # incident kind, or "manual"
    incident_id: str | None
    mode: str
    api_key: tuple[int, int]
    tree: list[tuple[int, int]]
    drain_only: bool = False
    phase: str = "lease"
    phase_since: float = 0.0  # monotonic
    phase_since_wall: float = 0.0
    started_wall: float = 0.0
    lease_slot: int | None = None
    lease_waiting_noted: bool = False
    sigkill_sent: bool = False
    started_pid: int | None = None
    pending_job: str | None = None  # name of an async job in flight for this sequence
    outcome: str | None = None
    detail: str = ""
    history: list[dict] = field(default_factory=list)

    @property
    def keys(self) -> list[ProcKey]:
        return [ProcKey(p, s) for p, s in self.tree]


class Remediator:
    def __init__(self, cfg: Config, clock, control, async_runner, cmd_runner, incidents, ledger, procfs, *,
                 lease=None, kube=None, publish_control: Callable[[dict], object] | None = None,
                 release_check: Callable[[set[int]], bool | None] | None = None,
                 log: logging.Logger | None = None) -> None:
        self.cfg = cfg
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
        self.log = log or logging.getLogger("guardian.remediation")
        self.dir = Path(cfg.state_dir) / "remediation"
        self.sequences: dict[str, Sequence] = {}
        self.on_finish: list[Callable[[Sequence, str], None]] = []
        self.exhausted: set[str] = set()
        self.action_counts: dict[str, int] = {}
        self.restart_counts: dict[str, dict[str, int]] = {}
        self._noted: set[tuple[str, str]] = set()
        self._job_results: dict[str, object] = {}
        self._resume()

    # ------------------------------------------------------------------ queries
    def target_config(self, name: str) -> TargetConfig | None:
        return next((t for t in self.cfg.targets if t.name == name), None)

    def active(self, name: str) -> bool:
        s = self.sequences.get(name)
        return s is not None and s.phase in ACTIVE

    def serving(self, name: str) -> bool:
        """Readiness: False from drain start until a verified restart; False after a failed
        restart; False after a manual drain until ``undrain``."""
        s = self.sequences.get(name)
        if s is None:
            return True
        if s.drain_only:
            return s.phase not in ACTIVE + ("done",)
        return s.phase not in ACTIVE + ("failed",)

    def phase(self, name: str) -> str:
        s = self.sequences.get(name)
        if s is None or s.phase == "done":
            return "serving"
        return PHASE_NAMES.get(s.phase, s.phase)

    def suppress_detection(self, name: str) -> bool:
        """While the guardian itself takes a target down, its death is not news."""
        s = self.sequences.get(name)
        return s is not None and s.phase in ("stopping", "releasing", "starting", "verifying")

    def status(self) -> dict:
        return {name: {"phase": s.phase, "reason": s.reason, "incident": s.incident_id, "mode": s.mode,
                       "since": s.phase_since_wall, "detail": s.detail, "outcome": s.outcome}
                for name, s in self.sequences.items()}

    # ------------------------------------------------------------------ start
    def begin(self, name: str, reason: str, incident_id: str | None, api_key: ProcKey,
              tree: list[ProcKey], now: float, *, drain_only: bool = False) -> Sequence:
        tc = self.target_config(name)
        mode = tc.restart.mode if tc else "signal"
        seq = Sequence(name, reason, incident_id, mode, (api_key.pid, api_key.starttime),
                       [(k.pid, k.starttime) for k in tree], drain_only=drain_only,
                       started_wall=self.clock.wall())
        self.sequences[name] = seq
        self._enter(seq, "lease", now, f"{'drain' if drain_only else 'restart'} of {name} ({reason}), "
                                      f"mode {mode}, tree {[p for p, _ in seq.tree]}")
        return seq

    # ------------------------------------------------------------------ policy gates
    def consider(self, incident, tracked, now: float, *, mode: str, tripped: int, total: int) -> str:
        """Decide whether an open incident gets a restart now. Returns the decision, for status;
        each refusal is recorded on the incident once."""
        from ..policy import Maintenance, may_restart, node_anomaly

        name = incident.target.name
        if self.active(name):
            return "in progress"
        if mode != "remediate":
            return f"mode {mode}: alert only"
        if incident.kind in (Kind.PROBE_FAILURE, Kind.RESTART_BUDGET_EXHAUSTED):
            return "a blind spot or an exhausted budget is never a reason to restart: alert only"
        prev = self.sequences.get(name)
        if prev is not None and prev.incident_id == incident.id and prev.phase in ("failed", "done", "aborted"):
            return f"already {prev.phase} for this incident"
        tc = self.target_config(name)
        if tc is None:
            return self._once(incident, "no_config", "skipped",
                              "autodiscovered target: no restart configured (add it under targets: to remediate)")
        if tc.restart.mode == "kubernetes" and self.kube is None:
            return self._once(incident, "no_kube", "skipped",
                              "restart.mode kubernetes needs the in-cluster API (service account); alert only")
        if tc.restart.mode == "command" and not tc.restart.command:
            return self._once(incident, "no_command", "skipped", "restart.mode command without a command")
        wall = self.clock.wall()
        if Maintenance(self.cfg.state_dir).active(wall):
            return self._once(incident, "maintenance", "skipped", "maintenance mode is on: no remediation")
        anomaly = node_anomaly(self.cfg.policy, tripped, total)
        if anomaly:
            return self._once(incident, "anomaly", "escalated", anomaly)
        if not tracked.ever_ready:
            return self._once(incident, "grace", "skipped", "target never became ready: startup grace")
        verdict = may_restart(self.cfg.policy, self.ledger, name, wall)
        if verdict.exhausted:
            self.exhausted.add(name)
            return self._once(incident, "budget", "escalated", verdict.reason + "; observe-only for this target")
        self.exhausted.discard(name)
        if not verdict.allowed:
            return self._once(incident, "backoff", "deferred", verdict.reason)
        if self.cfg.policy.dry_run:
            keys = [p.pid for p in tracked.target.processes]
            return self._once(incident, "dry_run", "dry_run",
                              f"would have drained, stopped {keys} (SIGTERM, then SIGKILL after "
                              f"{tc.restart.stop_timeout:g}s) and restarted via {tc.restart.mode}")
        self.begin(name, incident.kind.value, incident.id, tracked.target.key,
                   [p.key for p in tracked.target.processes], now)
        return "started"

    def manual(self, name: str, tracked, now: float, action: str, dry_run: bool) -> str:
        """``guardian drain|restart <target>``: the same machine and the same safety checks,
        minus the detector mode and the node-wide anomaly (a human decided)."""
        from ..policy import may_restart

        if tracked is None:
            raise KeyError(f"unknown target {name!r}")
        if self.active(name):
            return f"{name}: a sequence is already in progress ({self.phase(name)})"
        tc = self.target_config(name)
        if action == "restart":
            if tc is None:
                return f"{name}: autodiscovered target has no restart config; refusing to restart it"
            verdict = may_restart(self.cfg.policy, self.ledger, name, self.clock.wall())
            if not verdict.allowed:
                return f"{name}: refused: {verdict.reason}"
        if dry_run or self.cfg.policy.dry_run:
            return (f"{name}: dry run: would have {'drained' if action == 'drain' else 'drained, stopped'} "
                    f"{[p.pid for p in tracked.target.processes]}"
                    + ("" if action == "drain" else f" and restarted via {tc.restart.mode}"))
        self.begin(name, "manual", None, tracked.target.key, [p.key for p in tracked.target.processes], now,
                   drain_only=(action == "drain"))
        return f"{name}: {action} started"

    def undrain(self, name: str) -> str:
        seq = self.sequences.get(name)
        if seq is None or not seq.drain_only:
            return f"{name}: not drained by the guardian"
        if seq.phase in ACTIVE or seq.phase == "done":
            seq.phase, seq.outcome, seq.detail = "undrained", "undrained", "undrained by request"
            self.publish_control({"action": "undrain", "target": name, "node": self.cfg.node})
            self._save(seq)
        return f"{name}: back in rotation"

    def refresh_budgets(self) -> None:
        """A target whose budget frees up leaves observe-only."""
        from ..policy import may_restart

        wall = self.clock.wall()
        for name in list(self.exhausted):
            if not may_restart(self.cfg.policy, self.ledger, name, wall).exhausted:
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
            self.log.warning("remediation %s: %s: %s", incident.target.name, status, detail)
        return f"{status}: {detail}"

    # ------------------------------------------------------------------ the machine
    def tick(self, now: float, tracker, series, done_jobs: dict[str, object]) -> None:
        self._job_results.update(done_jobs)
        for seq in list(self.sequences.values()):
            if seq.phase not in ACTIVE:
                continue
            for _ in range(6):  # several instant steps may chain within one tick
                before = seq.phase
                getattr(self, f"_step_{seq.phase}")(seq, now, tracker, series)
                if seq.phase == before or seq.phase not in ACTIVE:
                    break

    def _step_lease(self, seq: Sequence, now: float, tracker, series) -> None:
        if seq.drain_only:
            self._enter(seq, "draining", now, "drain requested")
            return
        if self.lease is None:
            self._enter(seq, "draining", now, "no fleet lease configured")
            return
        res = self._job(seq, "lease", lambda: self.lease.acquire(seq.target), now, retry_every=LEASE_RETRY)
        if res is None:
            return
        if res.granted:
            seq.lease_slot = res.slot
            self._enter(seq, "draining", now, res.reason)
        elif not seq.lease_waiting_noted:
            seq.lease_waiting_noted = True
            self._record(seq, "fleet_lease", "waiting", res.reason)

    def _step_draining(self, seq: Sequence, now: float, tracker, series) -> None:
        tc = self.target_config(seq.target)
        if not seq.history[-1].get("drain_started"):
            seq.history[-1]["drain_started"] = True
            self.publish_control({"action": "drain", "target": seq.target, "node": self.cfg.node,
                                  "reason": seq.reason})
            if tc and tc.drain.hook:
                hook = tuple(tc.drain.hook)
                self.async_runner.submit(("remediation", f"{seq.target}:hook"),
                                         lambda: self.cmd_runner.run(hook, max(1.0, tc.drain.timeout)),
                                         deadline=now + tc.drain.timeout + 5)
        timeout = tc.drain.timeout if tc else 0.0
        if seq.reason in HANG_KINDS:
            timeout = min(timeout, HANG_DRAIN_TIMEOUT if seq.reason != Kind.ENGINE_DEAD.value else 0.0)
        running = series.latest(seq.target, "", m.REQ_RUNNING)
        waiting = series.latest(seq.target, "", m.REQ_WAITING)
        fresh = running is not None and waiting is not None and now - running[0] <= 3.0 and now - waiting[0] <= 3.0
        empty = fresh and running[1] + waiting[1] == 0 and running[0] > seq.phase_since
        if seq.drain_only:
            if empty or now - seq.phase_since >= timeout:
                self._finish(seq, now, "done", "drained" if empty else "drain timeout reached; left drained")
            return
        if empty:
            self._enter(seq, "stopping", now, f"drained in {now - seq.phase_since:.1f}s")
        elif now - seq.phase_since >= timeout:
            self._enter(seq, "stopping", now, f"drain timeout {timeout:g}s reached")

    def _step_stopping(self, seq: Sequence, now: float, tracker, series) -> None:
        tc = self.target_config(seq.target)
        rc = tc.restart if tc else RestartConfig()
        api = ProcKey(*seq.api_key)
        if not seq.history[-1].get("term_sent"):
            seq.history[-1]["term_sent"] = True
            self._record_restart(seq)
            if seq.mode == "kubernetes" and self.kube is not None:
                uid = seq.history[-1].get("pod_uid")
                self.async_runner.submit(("remediation", f"{seq.target}:kube"),
                                         lambda: self._kube_delete(api, int(rc.stop_timeout)),
                                         deadline=now + 30)
                self._record(seq, "stop", "ok", f"pod delete requested (grace {rc.stop_timeout:g}s) {uid or ''}")
            else:
                sent = self.control.signal(api, 15)
                self._record(seq, "stop", "ok" if sent else "skipped",
                             f"SIGTERM to API server {api}" if sent else f"API server {api} already gone")
        kube_res = self._job_results.pop(f"{seq.target}:kube", None)
        if isinstance(kube_res, BaseException):
            self._record(seq, "stop", "failed", f"pod delete failed: {kube_res}; SIGKILL after stop_timeout")
        alive = [k for k in seq.keys if self.control.alive(k)]
        if alive and not seq.sigkill_sent and now - seq.phase_since >= rc.stop_timeout:
            seq.sigkill_sent = True
            killed = [k.pid for k in alive if self.control.signal(k, 9)]
            self._record(seq, "kill", "ok", f"SIGKILL after {rc.stop_timeout:g}s to {killed}")
            seq.history[-1]["kill_at"] = now
            alive = [k for k in seq.keys if self.control.alive(k)]
        if not alive:
            self._enter(seq, "releasing", now, f"tree stopped in {now - seq.phase_since:.1f}s")
            return
        if seq.sigkill_sent and now - seq.history[-1].get("kill_at", now) >= KILL_GRACE:
            self._finish(seq, now, "failed", f"processes survived SIGKILL: {[k.pid for k in alive]} "
                                             f"(uninterruptible in the kernel?); a human must look")

    def _step_releasing(self, seq: Sequence, now: float, tracker, series) -> None:
        held = self.release_check({p for p, _ in seq.tree})
        if held is None or held is False:
            self._enter(seq, "starting", now, "no accelerator backend" if held is None
                        else f"accelerator memory released in {now - seq.phase_since:.1f}s")
        elif now - seq.phase_since >= RELEASE_TIMEOUT:
            self._enter(seq, "starting", now, f"accelerator memory still held after {RELEASE_TIMEOUT:g}s; "
                                              "starting anyway")

    def _step_starting(self, seq: Sequence, now: float, tracker, series) -> None:
        tc = self.target_config(seq.target)
        rc = tc.restart if tc else RestartConfig()
        if seq.mode == "command":
            try:  # a clean environment, as restart.user/group (guardian.actions.launch)
                spec = build_launch_spec(rc)
                seq.started_pid = self.control.start_spec(spec)
            except (OSError, ValueError) as e:
                self._finish(seq, now, "failed", f"start failed: {e}")
                return
            self._enter(seq, "verifying", now, f"started pid {seq.started_pid}: "
                                               f"{' '.join(redact_argv(spec.argv))[:200]}")
        elif seq.mode == "systemd":
            unit = rc.unit or (tc.match.systemd_unit if tc else None)
            res = self._job(seq, "systemctl", lambda: self.cmd_runner.run(("systemctl", "restart", unit), 60), now)
            if res is None:
                return
            if getattr(res, "ok", False):
                self._enter(seq, "verifying", now, f"systemctl restart {unit}")
            else:
                self._finish(seq, now, "failed", f"systemctl restart {unit} failed: "
                                                 f"{getattr(res, 'error_text', res)!s}"[:300])
        else:  # kubernetes: its controller recreates the pod; signal: an external supervisor restarts
            self._enter(seq, "verifying", now, "waiting for the " +
                        ("controller to recreate the pod" if seq.mode == "kubernetes" else "external supervisor"))

    def _step_verifying(self, seq: Sequence, now: float, tracker, series) -> None:
        tc = self.target_config(seq.target)
        rc = tc.restart if tc else RestartConfig()
        tr = tracker.targets.get(seq.target)
        if tr is not None and tuple((tr.target.key.pid, tr.target.key.starttime)) != tuple(seq.api_key) \
                and tr.ready and tr.api_alive:
            self._finish(seq, now, "done", f"healthy again: pid {tr.target.key.pid}, /health 200 and a canary "
                                           f"answered {now - seq.phase_since:.1f}s after start")
        elif now - seq.phase_since >= rc.ready_timeout:
            self._finish(seq, now, "failed", f"not ready within ready_timeout {rc.ready_timeout:g}s")

    # ------------------------------------------------------------------ helpers
    def _kube_delete(self, api: ProcKey, grace: int):
        from ..host.kube import pod_uid_from_cgroup

        text = self.procfs.read_text(f"{api.pid}/cgroup")
        uid = pod_uid_from_cgroup(text)
        if uid is None:
            raise RuntimeError(f"pid {api.pid} is not in a Kubernetes pod (no pod UID in its cgroup)")
        pod = self.kube.find_pod(uid)
        self.kube.delete_pod(pod, grace)
        return pod

    def _job(self, seq: Sequence, name: str, fn, now: float, retry_every: float | None = None):
        """Run ``fn`` off the loop once per phase (or every ``retry_every`` s); None until it ends."""
        key = f"{seq.target}:{name}"
        if key in self._job_results:
            res = self._job_results.pop(key)
            seq.pending_job = None
            seq.history[-1][f"{name}_at"] = now
            return res
        last = seq.history[-1].get(f"{name}_at")
        if seq.pending_job != key and (last is None or (retry_every is not None and now - last >= retry_every)):
            if self.async_runner.submit(("remediation", key), fn, deadline=now + 90):
                seq.pending_job = key
        return None

    def _record_restart(self, seq: Sequence) -> None:
        """The budget counts the disruptive act: recorded (and persisted) before the first signal."""
        self.ledger.record(seq.target, self.clock.wall())

    def _enter(self, seq: Sequence, phase: str, now: float, detail: str) -> None:
        took = now - seq.phase_since if seq.history else 0.0
        if seq.history:
            self._record(seq, seq.phase, "ok", f"{detail} ({took:.1f}s)")
        else:
            self._record(seq, "remediation", "running", detail)
        seq.phase, seq.phase_since, seq.phase_since_wall, seq.detail = phase, now, self.clock.wall(), detail
        seq.history.append({"phase": phase, "at": seq.phase_since_wall})
        if self.lease is not None and seq.lease_slot is not None:  # a long sequence keeps its slot
            slot = seq.lease_slot
            self.async_runner.submit(("remediation", f"{seq.target}:renew"),
                                     lambda: self.lease.renew(seq.target, slot), deadline=now + 30)
        self.log.info("remediation %s: %s (%s)", seq.target, phase, detail)
        self._save(seq)

    def _finish(self, seq: Sequence, now: float, outcome: str, detail: str) -> None:
        status = "ok" if outcome == "done" else "failed"
        self._record(seq, seq.phase, status, detail)
        seq.phase, seq.outcome, seq.detail = outcome, outcome, detail
        seq.phase_since, seq.phase_since_wall = now, self.clock.wall()
        if self.lease is not None and seq.lease_slot is not None:
            slot = seq.lease_slot
            self.async_runner.submit(("remediation", f"{seq.target}:release"),
                                     lambda: self.lease.release(seq.target, slot), deadline=now + 30)
        if outcome == "done" and not seq.drain_only:
            self.publish_control({"action": "undrain", "target": seq.target, "node": self.cfg.node})
        if not seq.drain_only:
            self._count_restart(seq.target, "ok" if outcome == "done" else "failed")
        self.log.log(logging.INFO if outcome == "done" else logging.ERROR,
                     "remediation %s: %s (%s)", seq.target, outcome, detail)
        for hook in self.on_finish:
            hook(seq, outcome)
        self._save(seq)

    def _count(self, status: str) -> None:
        self.action_counts[status] = self.action_counts.get(status, 0) + 1

    def _count_restart(self, target: str, outcome: str) -> None:
        per = self.restart_counts.setdefault(target, {})
        per[outcome] = per.get(outcome, 0) + 1

    def _record(self, seq: Sequence, name: str, status: str, detail: str) -> None:
        self._count(status)
        if seq.incident_id is None:
            return
        try:
            self.incidents.add_action(seq.incident_id, Action(name, status, self.clock.wall(), detail))
        except KeyError:
            pass  # the incident was resolved and aged out meanwhile

    # ------------------------------------------------------------------ persistence
    def _save(self, seq: Sequence) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{seq.target}.json"
        tmp = path.with_suffix(".tmp")
        data = asdict(seq)
        data["phase_since"] = None  # monotonic times mean nothing to the next process
        with open(tmp, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _resume(self) -> None:
        """A guardian restarted mid-sequence: resume where it is safe, never start twice."""
        if not self.dir.is_dir():
            return
        now = self.clock.monotonic()
        for path in sorted(self.dir.glob("*.json")):
            try:
                data = json.loads(path.read_text())
                data["tree"] = [tuple(x) for x in data["tree"]]
                data["api_key"] = tuple(data["api_key"])
                seq = Sequence(**data)
            except (ValueError, TypeError, KeyError) as e:
                self.log.warning("ignoring unreadable remediation state %s: %s", path, e)
                continue
            seq.phase_since = now
            seq.pending_job = None
            if seq.phase in ("lease", "draining"):
                # nothing disruptive happened yet: abort and put it back in rotation
                seq.phase, seq.outcome = "aborted", "aborted"
                seq.detail = "guardian restarted before the stop; aborted, target left untouched"
                self.publish_control({"action": "undrain", "target": seq.target, "node": self.cfg.node})
            elif seq.phase == "starting":
                # the start may or may not have been issued: never issue it twice; wait for it
                seq.phase = "verifying"
                seq.detail = "guardian restarted during start; verifying without starting again"
            elif seq.phase in ("stopping", "releasing"):
                seq.history.append({"phase": seq.phase, "at": self.clock.wall(), "term_sent": True})
                seq.detail = f"guardian restarted during {seq.phase}; resuming"
            self.sequences[seq.target] = seq
            self._record(seq, "resume", "ok", seq.detail)
            self.log.warning("remediation %s: %s", seq.target, seq.detail)
            self._save(seq)

    def forget_finished(self) -> None:
        for name, seq in list(self.sequences.items()):
            if seq.phase not in ACTIVE:
                try:
                    (self.dir / f"{name}.json").unlink()
                except FileNotFoundError:
                    pass
