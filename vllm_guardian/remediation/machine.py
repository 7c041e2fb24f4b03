"""Drain → stop → release → start → verify: the state machine that advances restart sequences.

``Machine.tick`` moves each sequence as far as it can without blocking, one step per phase:
signals are instant and identity-checked by ProcessControl; anything that may block (the drain
hook, ``systemctl``, the Kubernetes API, the fleet lease) runs on the AsyncRunner and its typed
result (``JobResult``) is picked up on a later tick. What differs between ways of restarting is the
restart method's (``remediation/methods/``); the phases and timers are here, the stop with its
SIGKILL escalation and the wait for the memory's release in ``remediation/stopping.py``.
Every phase change is persisted (``SequenceStore``) so a guardian restarted mid-sequence resumes
without ever issuing a second start (``remediation.resume``), and recorded as an ``Action`` on the incident.

Phases: lease (device check, breaker, fleet cap: ``remediation/admission.py``) → draining →
stopping → releasing → starting → verifying → done | failed. The restart
is counted in the ledger before the first signal; a ledger that cannot be written aborts the
sequence with nothing stopped (fail closed). Before anything is started, the target's owner (an
operator's deploy, systemd) gets ``restart.owner_grace`` to bring it back itself, when the method
says it may (``owner_may_restart``); when it does, the guardian stands down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, TypeVar

from vllm_guardian.clock import Clock
from vllm_guardian.config.schema import RestartConfig
from vllm_guardian.host.process_control import ProcessControl
from vllm_guardian.host.runner import CommandRunner
from vllm_guardian.model import Action
from vllm_guardian.policy.breaker import PercentBreaker
from vllm_guardian.remediation.admission import Admission, admit
from vllm_guardian.remediation.methods.base import JobResult, RestartMethod
from vllm_guardian.remediation.parts import RemediationParts, Tally
from vllm_guardian.remediation.sequence import Outcome, Phase, PhaseProgress, RestartSequence
from vllm_guardian.remediation.settings import control_message, log_fields
from vllm_guardian.remediation.steps import drain_timeout, queue_empty
from vllm_guardian.remediation.stopping import step_releasing, step_stopping
from vllm_guardian.vllm_versions import drain_via_checkpoint
from vllm_guardian.remediation.jobs import SequenceJobs
from vllm_guardian.remediation.resume import resume
from vllm_guardian.remediation.store import SequenceStore
from vllm_guardian.remediation.target_policy import TargetPolicy, target_policy

if TYPE_CHECKING:
    from vllm_guardian.host.kube import KubeClient
    from vllm_guardian.host.procfs import ProcFS
    from vllm_guardian.series import SeriesStore
    from vllm_guardian.state.tracker import Tracker

T = TypeVar("T")
LEASE_RETRY = 5.0
BREAKER_TTL = 30.0  # seconds a target registered with the breaker counts as live (registered every 10 s)


class Machine:
    """Steps the sequences of ``sequences`` (shared with the ``Remediator`` that begins them)."""

    def __init__(self, parts: RemediationParts, store: SequenceStore, tally: Tally) -> None:
        self.parts, self.store, self.tally = parts, store, tally
        self.settings = parts.settings
        self.clock: Clock = parts.clock
        self.control: ProcessControl = parts.control
        self.cmd_runner: CommandRunner = parts.cmd_runner
        self.kube: KubeClient | None = parts.kube
        self.procfs: ProcFS | None = parts.procfs
        self.log: logging.Logger = parts.log
        self.sequences: dict[str, RestartSequence] = {}
        self.jobs = SequenceJobs(parts.async_runner)
        self._holding: Collection[str] = ()
        self._group_waits: set[str] = set()  # targets whose start waits on the group plan (said once)
        # sequences that ended since the owner last took them (``take_finished``)
        self._finished: list[tuple[RestartSequence, Outcome]] = []
        self._escalated: list[str] = []  # incident ids escalated while a sequence waits (a breaker page)
        self._device_ok: set[str] = set()  # targets whose pre-restart device check passed this sequence
        # the policy each target is remediated under (set by the Remediator: its profile)
        self.policy_of: Callable[[str], TargetPolicy] = lambda name: target_policy(
            self.settings.policy, self.settings.facts(name)
        )

    def reconfigure(self, parts: RemediationParts) -> None:
        self.parts, self.settings = parts, parts.settings

    def method(self, seq: RestartSequence) -> RestartMethod:
        return self.parts.method(seq.mode)

    def rc(self, seq: RestartSequence) -> RestartConfig:
        return self.settings.restart_config_for(seq.target)

    # ------------------------------------------------------------------ the loop
    def tick(self, now: float, tracker: Tracker, series: SeriesStore, holding: Collection[str] = ()) -> None:
        """Step every sequence; ``holding``: targets whose evidence still needs the processes (they
        may drain, but are not stopped yet)."""
        self._holding = holding
        steps: dict[Phase, Callable[[RestartSequence, float, Tracker, SeriesStore], None]] = {
            Phase.LEASE: self._step_lease,
            Phase.DRAINING: self._step_draining,
            Phase.STOPPING: lambda seq, now, _tr, _se: step_stopping(self, seq, now),
            Phase.RELEASING: lambda seq, now, _tr, _se: step_releasing(self, seq, now),
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

    def _new_server(self, seq: RestartSequence, tracker: Tracker, *, ready: bool) -> int | None:
        """The pid of a live API server of the target that is not the one the sequence took down."""
        tr = tracker.targets.get(seq.target)
        if tr is None or not tr.api_alive or (ready and not tr.answered) or seq.is_old_server(tr.target.key):
            return None
        return tr.target.key.pid

    def _recover_if_healthy(self, seq: RestartSequence, tracker: Tracker) -> None:
        """After a failed sequence readiness stays down only while the target is unhealthy: once a
        new server of it serves (a human or its owner fixed it) it goes back in rotation."""
        pid = self._new_server(seq, tracker, ready=True)
        if pid is None:
            return
        seq.phase = Phase.RECOVERED
        seq.history.append(PhaseProgress(Phase.RECOVERED, self.clock.wall()))
        self.parts.publish_control(control_message("undrain", seq.target, self.settings.node))
        self.log.warning(
            "remediation %s: healthy again after the failed sequence (pid %d): back in rotation", seq.target, pid
        )
        self.save(seq)

    def _step_lease(self, seq: RestartSequence, now: float, tracker: Tracker, series: SeriesStore) -> None:
        """The device check, the percentage breaker and the fleet cap (``remediation/admission.py``)."""
        if seq.drain_only:
            self.enter(seq, Phase.DRAINING, now, "drain requested")
            return
        ask = self._admission(seq)
        if ask is None:
            self.enter(seq, Phase.DRAINING, now, "no fleet lease configured")
            return
        res = self.job(seq, "lease", ask, now, retry_every=LEASE_RETRY)
        if res is None:
            return
        got = res.value
        if got is None:
            got = Admission(False, f"fleet lease: {res.error}")
        if got.device_ok:
            self._device_ok.add(seq.target)
        if got.refused is not None:
            self.record(seq, "device_check", "escalated", got.reason)
            self._device_ok.discard(seq.target)
            self.finish(seq, now, Outcome.ABORTED, f"restart refused, nothing stopped: {got.reason}")
        elif got.granted:
            self._device_ok.discard(seq.target)
            seq.lease_slot, seq.lease_token = got.slot, got.token
            self.enter(seq, Phase.DRAINING, now, got.reason)
        elif got.page:
            seq.lease_waiting_noted = True
            held = ", ".join(got.page)
            self.record(seq, "breaker", "escalated", f"{got.reason}; paging once for the fleet, held: {held}")
            if seq.incident_id is not None:
                self._escalated.append(seq.incident_id)
        elif not seq.lease_waiting_noted:
            seq.lease_waiting_noted = True
            self.record(seq, "breaker" if got.held else "fleet_lease", "held" if got.held else "waiting", got.reason)

    def _admission(self, seq: RestartSequence) -> Callable[[], Admission] | None:
        """The off-loop job of the lease phase for this sequence (only what is configured is asked)."""
        target, lease, parts = seq.target, self.parts.lease, self.parts
        tp = self.policy_of(target)
        check = parts.pre_restart_check
        device = None if check is None or target in self._device_ok else (lambda: check(target))
        breaker = None
        if tp.breaker_on:
            fleet = self.settings.policy.fleet
            b = PercentBreaker(
                parts.fleet_client,
                node=self.settings.node or "",
                max_fraction=tp.profile.breaker.max_fraction,
                window=tp.profile.breaker.window,
                when_redis_down=fleet.when_redis_down,
                target_ttl=BREAKER_TTL,
            )
            wall = self.clock.wall()
            breaker = lambda: b.admit(tp.scope, target, wall)  # noqa: E731
        acquire = None if lease is None else (lambda: lease.acquire(target))
        if device is None and breaker is None and acquire is None:
            return None  # nothing to ask: no job
        return lambda: admit(device=device, breaker=breaker, lease=acquire)

    def take_escalated(self) -> list[str]:
        """Incidents escalated by a sequence since the last call (their alert goes out again)."""
        out, self._escalated = self._escalated, []
        return out

    def _step_draining(self, seq: RestartSequence, now: float, tracker: Tracker, series: SeriesStore) -> None:
        drain = self.settings.drain_config_for(seq.target)
        if not seq.progress.begun:
            seq.progress.begun = True
            self.parts.publish_control(control_message("drain", seq.target, self.settings.node, seq.reason))
            wait = drain_timeout(drain.timeout, seq.reason, series, seq.target, now)
            if drain.checkpoint != "off" and not seq.drain_only and wait > 0:  # a hung engine drains nothing
                self._checkpoint_drain(seq, now, tracker, wait)
            if drain.hook:
                hook, runner = tuple(drain.hook), self.cmd_runner
                self.parts.async_runner.submit(
                    ("remediation", f"{seq.target}:hook"),
                    lambda: runner.run(hook, max(1.0, drain.timeout)),
                    deadline=now + drain.timeout + 5,
                )
        timeout = drain_timeout(drain.timeout, seq.reason, series, seq.target, now)
        empty = queue_empty(series, seq.target, now, seq.phase_since)
        if seq.drain_only:
            if empty or now - seq.phase_since >= timeout:
                self.finish(seq, now, Outcome.DONE, "drained" if empty else "drain timeout reached; left drained")
            return
        if not empty and now - seq.phase_since < timeout:
            return
        if seq.target in self._holding:
            return  # evidence first: the processes must still be there to be dumped
        if not self._fenced(seq, now):
            return
        if empty:
            self.enter(seq, Phase.STOPPING, now, f"drained in {now - seq.phase_since:.1f}s")
        else:
            nothing = " (no progress: nothing to drain)" if timeout == 0 else ""
            self.enter(seq, Phase.STOPPING, now, f"drain timeout {timeout:g}s reached{nothing}")

    def _checkpoint_drain(self, seq: RestartSequence, now: float, tracker: Tracker, timeout: float) -> None:
        """Where the server offers it (its capability row, its checkpoint status answered), ask vLLM to
        drain itself: ``POST /checkpoint/prepare?mode=wait`` (in-flight requests finish, then it holds).
        Only before a stop: a drain alone would leave it prepared until someone restores it."""
        tr = tracker.targets.get(seq.target)
        http, url = self.parts.http, tr.target.api_url if tr is not None else None
        facts = tr.vllm if tr is not None else None
        path = drain_via_checkpoint(facts.match.row, sleep_mode=facts.checkpoint is not None) if facts else None
        if http is None or url is None or path is None:
            return
        self.record(seq, "checkpoint_drain", "started", f"POST {path} (vLLM's own drain, offered by this server)")
        target_url = url.rstrip("/") + path
        self.parts.async_runner.submit(
            ("remediation", f"{seq.target}:checkpoint"),
            lambda: http.request("POST", target_url, max(1.0, timeout)),
            deadline=now + timeout + 5,
        )

    def _fenced(self, seq: RestartSequence, now: float) -> bool:
        """Before the stop: is the fleet lease still ours, with the token it was granted under? A
        failover of the fleet store or an expiry may have handed the slot to another guardian; then
        this sequence fails (nothing stopped; the target stays drained) and says why: a human
        decides. The start after a stop is never held back by the lease (it ends the outage)."""
        lease, slot = self.parts.lease, seq.lease_slot
        if lease is None or slot is None:
            return True  # no lease configured, or allowed without one by policy.fleet.when_redis_down
        token = seq.lease_token
        res = self.job(seq, "fence", lambda: lease.check(seq.target, slot, token), now)
        if res is None:
            return False  # asked; the answer comes on a later tick
        got = res.value
        if got is not None and got.granted:
            self.record(seq, "fleet_lease", "ok", f"checked before the stop: {got.reason}")
            return True
        why = got.reason if got is not None else f"fleet lease: {res.error}"
        self.finish(seq, now, Outcome.FAILED, f"not stopping: {why}; escalated to a human, target left drained")
        return False

    def _owner_grace(self, seq: RestartSequence, now: float, tracker: Tracker) -> bool:
        """True while waiting for the target's owner (a deploy, systemd) to bring it back;
        stands the sequence down when it does. ``owner_grace: 0`` turns the wait off."""
        rc, method, progress = self.rc(seq), self.method(seq), seq.progress
        if progress.owner_checked or progress.start_issued or rc.owner_grace <= 0:
            return False
        if not method.owner_may_restart(seq):
            return False  # the guardian stopped it itself: nobody else is bringing it back
        if progress.owner_wait_since is None:
            progress.owner_wait_since = now
        pid = self._new_server(seq, tracker, ready=False)
        back = None if pid is None else f"a new API server pid {pid} appeared for {seq.target}"
        if back is None:
            back = method.owner_restarting(seq, rc, now, self)
        if back is not None:
            progress.owner_checked = True
            self.record(seq, "owner_check", "stood_down", f"stood down: {back}; not starting a second copy")
            self.enter(seq, Phase.VERIFYING, now, f"stood down: the owner brought it back ({back})")
            return True
        if now - progress.owner_wait_since < rc.owner_grace:
            return True
        progress.owner_checked = True
        why = f"proceeding: nothing brought {seq.target} back within owner_grace {rc.owner_grace:g}s"
        self.record(seq, "owner_check", "ok", why)
        return False

    def _step_starting(self, seq: RestartSequence, now: float, tracker: Tracker, series: SeriesStore) -> None:
        if self._owner_grace(seq, now, tracker):
            return
        wait = self.parts.before_start(seq.target, seq.incident_id, now)
        if wait is not None:  # a group member: the plan's earlier steps run on other nodes first
            if seq.target not in self._group_waits:
                self._group_waits.add(seq.target)
                self.record(seq, "group_order", "running", wait)
            return
        self._group_waits.discard(seq.target)
        step = self.method(seq).start(seq, self.rc(seq), now, self)
        if step.outcome == "verify":
            self.enter(seq, Phase.VERIFYING, now, step.detail)
        elif step.outcome == "fail":
            self.finish(seq, now, Outcome.FAILED, step.detail)

    def _step_verifying(self, seq: RestartSequence, now: float, tracker: Tracker, series: SeriesStore) -> None:
        rc = self.rc(seq)
        tr = tracker.targets.get(seq.target)
        # a canary answered, not only the server's word: a replacement that listens but hangs is no fix
        if tr is not None and tr.target.key != seq.api_key and tr.answered and tr.api_alive:
            took = now - seq.phase_since
            why = f"healthy again: pid {tr.target.key.pid}, /health 200 and a canary answered {took:.1f}s after start"
            self.finish(seq, now, Outcome.DONE, why)
        elif now - seq.phase_since >= rc.ready_timeout:
            self.finish(seq, now, Outcome.FAILED, f"not ready within ready_timeout {rc.ready_timeout:g}s")

    # ------------------------------------------------------------------ what a method may use
    def job(
        self, seq: RestartSequence, name: str, fn: Callable[[], T], now: float, retry_every: float | None = None
    ) -> JobResult[T] | None:
        return self.jobs.job(seq, name, fn, now, retry_every)

    def submit(self, seq: RestartSequence, name: str, fn: Callable[[], object], now: float, deadline: float) -> None:
        self.jobs.submit(seq, name, fn, deadline)

    def take(self, seq: RestartSequence, name: str) -> JobResult[object] | None:
        return self.jobs.take(seq, name)

    def record(self, seq: RestartSequence, name: str, status: str, detail: str) -> None:
        self.tally.count(status)
        if seq.incident_id is None:
            return
        try:
            self.parts.incidents.add_action(seq.incident_id, Action(name, status, self.clock.wall(), detail))
        except KeyError:
            pass  # the incident was resolved and aged out meanwhile

    def save(self, seq: RestartSequence) -> bool:
        return self.store.save(seq)

    @staticmethod
    def _fields(seq: RestartSequence) -> dict[str, str]:
        return log_fields(seq.target, seq.reason, seq.incident_id)

    def take_finished(self) -> list[tuple[RestartSequence, Outcome]]:
        """The sequences that ended (with how) since the last call, oldest first."""
        done, self._finished = self._finished, []
        return done

    # ------------------------------------------------------------------ phase changes
    def enter(self, seq: RestartSequence, phase: Phase, now: float, detail: str) -> None:
        if seq.history:
            self.record(seq, seq.phase.value, "ok", f"{detail} ({now - seq.phase_since:.1f}s)")
        else:
            self.record(seq, "remediation", "running", detail)
        seq.phase, seq.phase_since, seq.phase_since_wall, seq.detail = phase, now, self.clock.wall(), detail
        seq.history.append(PhaseProgress(phase, seq.phase_since_wall))
        lease, slot, token, target = self.parts.lease, seq.lease_slot, seq.lease_token, seq.target
        if lease is not None and slot is not None:  # a long sequence keeps its slot
            self.parts.async_runner.submit(
                ("remediation", f"{target}:renew"), lambda: lease.renew(target, slot, token), deadline=now + 30
            )
        self.log.info("remediation %s: %s (%s)", seq.target, phase, detail, extra=self._fields(seq))
        self.save(seq)

    def finish(self, seq: RestartSequence, now: float, outcome: Outcome, detail: str) -> None:
        done = outcome is Outcome.DONE
        self._device_ok.discard(seq.target)
        self.record(seq, seq.phase.value, "ok" if done else "failed", detail)
        seq.end(outcome, detail)
        seq.phase_since, seq.phase_since_wall = now, self.clock.wall()
        self.release_lease(seq, now, forget=False)
        if done and not seq.drain_only:
            self.parts.publish_control(control_message("undrain", seq.target, self.settings.node))
        if not seq.drain_only:
            self.tally.restart(seq.target, "ok" if done else "failed")
        level = logging.INFO if done else logging.ERROR
        self.log.log(level, "remediation %s: %s (%s)", seq.target, outcome.value, detail)
        self._finished.append((seq, outcome))
        self.save(seq)

    def release_lease(self, seq: RestartSequence, now: float, *, forget: bool) -> None:
        lease, slot, token, target = self.parts.lease, seq.lease_slot, seq.lease_token, seq.target
        if lease is None or slot is None:
            return
        if forget:
            seq.lease_slot = seq.lease_token = None
        self.parts.async_runner.submit(
            ("remediation", f"{target}:release"), lambda: lease.release(target, slot, token), deadline=now + 30
        )

    def resume(self, found: Sequence[RestartSequence]) -> None:
        """Take up the sequences a previous guardian left (``remediation.resume``)."""
        now, wall = self.clock.monotonic(), self.clock.wall()
        for seq in found:
            if resume(seq, self.control.alive(seq.api_key), now, wall):
                self.release_lease(seq, now, forget=True)
                self.parts.publish_control(control_message("undrain", seq.target, self.settings.node))
            self.sequences[seq.target] = seq
            self.record(seq, "resume", "ok", seq.detail)
            self.log.warning("remediation %s: %s", seq.target, seq.detail, extra=self._fields(seq))
            self.save(seq)
