"""Faults of the remediation sequence, on the unit tier's fake clock and fake kernel:

8  command mode: an unwritable ``log_file`` is found before anything is stopped; a failed start
   is retried, then escalated to a human;
9  a guardian restarted while a sequence is in lease or draining resumes it (the engine would
   stay hung otherwise), and releases the fleet lease when it cannot;
10 a ledger write that fails before the stop fails closed (no signal at all), and an unreadable
   ``restarts.json`` refuses restarts and says so;
11 after a failed verify, readiness comes back once the target is healthy again, and
   ``guardian undrain`` works;
22 before starting anything, the guardian waits a grace for the owner (an operator's deploy,
   systemd, a controller) to bring the target back, and stands down when it does.
"""

from __future__ import annotations

import logging

from vllm_guardian.model import Finding, Kind, Sample, Severity, TargetRef
from vllm_guardian.series import metrics as m
from vllm_guardian.testing.fake_control import FakeControl

from tests.support.remediation_world import API, ARGV, ENGINE, WORKER, World


def restart(tmp_path, **kw):
    return {"mode": "command", "command": ARGV, "stop_timeout": 10, "ready_timeout": 60, **kw}


def signals(w):
    return [sig for _, sig in w.control.signals]


# ---------------------------------------------------------------- 8
def test_an_unwritable_log_file_refuses_the_restart_before_anything_is_stopped(tmp_path):
    w = World(tmp_path, restart=restart(tmp_path, log_file=str(tmp_path / "no-such-dir" / "vllm.log")))
    decision = w.consider(w.open())
    assert "log_file" in decision and "cannot append" in decision
    w.step(1, n=20)
    assert w.control.signals == [] and w.rem.serving("llm")


class FlakyStart(FakeControl):
    def __init__(self, failures: int, **kw):
        super().__init__({API, ENGINE, WORKER}, term_takes_down={API: {ENGINE, WORKER}}, **kw)
        self.failures = failures

    def start(self, argv, env, cwd, log_file):
        if self.failures > 0:
            self.failures -= 1
            raise OSError(24, "Too many open files")
        return super().start(argv, env, cwd, log_file)


def test_a_failed_start_is_retried(tmp_path):
    w = World(tmp_path, control=FlakyStart(2), restart=restart(tmp_path, owner_grace=0))
    w.consider(w.open())
    w.step(1, n=30)
    assert len(w.control.started) == 1
    assert w.rem.phase("llm") == "verifying"


def test_a_start_that_keeps_failing_is_escalated_to_a_human(tmp_path):
    control = FlakyStart(100)
    w = World(tmp_path, control=control, restart=restart(tmp_path, owner_grace=0))
    inc = w.open()
    w.consider(inc)
    w.step(1, n=60)
    seq = w.rem.sequences["llm"]
    assert seq.outcome == "failed" and "a human must start it" in seq.detail
    assert control.failures == 100 - 3


# ---------------------------------------------------------------- 9
class Lease:
    def __init__(self):
        self.acquired, self.released = [], []

    def acquire(self, target):
        from vllm_guardian.remediation.lease import LeaseResult

        self.acquired.append(target)
        return LeaseResult(True, "slot 0", 0, 1)

    def check(self, target, slot, token):
        from vllm_guardian.remediation.lease import LeaseResult

        return LeaseResult(True, "slot 0 still ours", slot, token)

    def renew(self, target, slot, token=None):
        return True

    def release(self, target, slot, token=None):
        self.released.append((target, slot))
        return True


def restarted(w, lease):
    """The guardian restarts: a new remediator on the same state dir, with the fleet lease."""
    return w.new_remediator(lease=lease)


def leak_world(tmp_path, lease):
    w = World(tmp_path, restart=restart(tmp_path, owner_grace=0))
    w.rem = w.new_remediator(lease=lease)
    inc = w.open(Kind.HOST_MEMORY_LEAK)
    w.consider(inc)
    now = w.clock.monotonic()
    for t in range(1, 4):  # requests in flight: the drain goes on
        w.series.add(Sample("llm", "", m.REQ_RUNNING, 2.0, now + t))
        w.series.add(Sample("llm", "", m.REQ_WAITING, 0.0, now + t))
        w.step()
    assert w.rem.phase("llm") == "draining"
    return w


def test_a_guardian_restarted_while_draining_resumes_the_sequence(tmp_path):
    lease = Lease()
    w = leak_world(tmp_path, lease)
    w.rem = restarted(w, lease)
    w.step(1, n=40)
    assert (API, 15) in w.control.signals
    assert len(w.control.started) == 1
    w.new_server_comes_up()
    w.step()
    assert w.rem.sequences["llm"].outcome == "done"
    assert lease.released


def test_a_resumed_sequence_whose_server_is_gone_is_aborted_and_its_lease_released(tmp_path):
    lease = Lease()
    w = leak_world(tmp_path, lease)
    w.control.live.clear()  # the server went away while the guardian was down
    w.rem = restarted(w, lease)
    w.step(1, n=5)
    assert w.rem.sequences["llm"].outcome == "aborted"
    assert lease.released == [("llm", 0)]
    assert w.control.started == []


# ---------------------------------------------------------------- 10
def test_a_ledger_write_failure_fails_closed_without_any_signal(tmp_path):
    from tests.support.file_limits import file_size_limit

    w = World(tmp_path)
    inc = w.open()
    w.consider(inc)
    with file_size_limit(0):  # from here every file write fails (EFBIG), the ledger's too
        w.step(1, n=40)
    assert w.control.signals == []
    seq = w.rem.sequences["llm"]
    assert seq.outcome == "aborted" and "restart ledger" in seq.detail and "fail closed" in seq.detail
    assert w.rem.serving("llm") and w.published[-1]["action"] == "undrain"


def test_an_unreadable_ledger_refuses_restarts_and_says_so(tmp_path, caplog):
    (tmp_path / "restarts.json").write_text("{garbage")
    with caplog.at_level(logging.ERROR):
        w = World(tmp_path)
    decision = w.consider(w.open())
    assert "restarts.json" in decision and "unreadable" in decision
    assert any("restarts.json" in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    w.step(1, n=20)
    assert w.control.signals == []


# ---------------------------------------------------------------- 11
def failed_verify(tmp_path):
    w = World(tmp_path, restart=restart(tmp_path, owner_grace=0, ready_timeout=5))
    w.consider(w.open())
    w.step(1, n=20)
    assert w.rem.sequences["llm"].outcome == "failed" and not w.rem.serving("llm")
    return w


def test_readiness_comes_back_when_the_target_is_healthy_after_a_failed_verify(tmp_path):
    w = failed_verify(tmp_path)
    w.new_server_comes_up()
    w.step()
    assert w.rem.serving("llm")
    w.rem = w.new_remediator()  # and stays so across a guardian restart
    w.step()
    assert w.rem.serving("llm")


def test_undrain_works_after_a_failed_verify(tmp_path):
    w = failed_verify(tmp_path)
    assert "back in rotation" in w.rem.undrain("llm")
    assert w.rem.serving("llm")
    w.rem = w.new_remediator()
    assert w.rem.serving("llm")


# ---------------------------------------------------------------- 22
def dead_engine_world(tmp_path, grace):
    control = FakeControl({API, ENGINE, WORKER}, term_takes_down={API: {ENGINE, WORKER}})
    w = World(tmp_path, control=control, restart=restart(tmp_path, owner_grace=grace))
    ref = TargetRef("llm", API.pid, API.starttime, 8000, "m", "api_server")
    finding = Finding(Kind.ENGINE_DEAD, "llm", Severity.CRITICAL, "engine dead", {"pid": API.pid})
    w.incidents.update("llm", ref, {Kind.ENGINE_DEAD: finding})  # engine_dead opens on the second sighting
    inc = w.incidents.update("llm", ref, {Kind.ENGINE_DEAD: finding})[0].incident
    w.consider(inc)
    control.live.clear()  # the operator stopped the server (a deploy)
    return w, inc


def test_a_deploy_is_not_taken_for_a_death_the_guardian_stands_down(tmp_path):
    w, inc = dead_engine_world(tmp_path, grace=20)
    w.step(1, n=5)
    w.new_server_comes_up()  # the operator's new version, on the same port
    w.step(1, n=5)
    assert w.control.started == []
    seq = w.rem.sequences["llm"]
    assert seq.outcome == "done" and "stood down" in " ".join(a.detail for a in w.incidents.get(inc.id).actions)


def test_when_nobody_brings_it_back_within_the_grace_the_guardian_starts_it(tmp_path):
    w, inc = dead_engine_world(tmp_path, grace=8)
    w.step(1, n=5)
    assert w.control.started == []
    w.step(1, n=6)
    assert len(w.control.started) == 1
    assert "proceeding" in " ".join(a.detail for a in w.incidents.get(inc.id).actions)


def test_systemd_already_activating_the_unit_makes_the_guardian_stand_down(tmp_path):
    from vllm_guardian.testing.fake_runner import FakeRunner, result

    cmd = FakeRunner(
        {("systemctl", "show"): result("ActiveState=activating\nMainPID=4242\n"), ("systemctl", "restart"): result("")}
    )
    w = World(
        tmp_path,
        restart={"mode": "systemd", "unit": "vllm@llama.service", "stop_timeout": 10, "owner_grace": 20},
        runner=cmd,
    )
    inc = w.open()
    w.consider(inc)
    w.step(1, n=12)
    assert ("systemctl", "restart", "vllm@llama.service") not in cmd.argvs()
    assert w.rem.phase("llm") == "verifying"
    stored = w.incidents.get(inc.id)
    assert stored is not None
    assert "stood down: systemd unit vllm@llama.service is activating" in " ".join(a.detail for a in stored.actions)


def test_a_guardian_restarted_during_the_owner_grace_waits_again_and_starts_exactly_once(tmp_path):
    w, _ = dead_engine_world(tmp_path, grace=8)
    w.step(1, n=4)
    assert w.rem.phase("llm") == "starting" and w.control.started == []
    w.rem = w.new_remediator()  # killed while waiting for the owner: nothing was started yet
    assert w.rem.sequences["llm"].phase == "starting"
    w.step(1, n=12)
    assert len(w.control.started) == 1


def test_a_server_the_guardian_stopped_itself_is_started_without_waiting_for_an_owner(tmp_path):
    w = World(tmp_path, restart=restart(tmp_path, owner_grace=30))
    w.consider(w.open())  # busy_loop: the guardian sends the SIGTERM itself
    w.step(1, n=8)
    assert len(w.control.started) == 1
