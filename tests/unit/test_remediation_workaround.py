"""A known bug's workaround applied on the restart after a recurrence (docs/policy.md, Workarounds):
command mode adds the catalog's flags and environment to the relaunched command line, systemd mode
writes a unit drop-in (and reloads) before the restart; the incident records what was applied, and
once the record is cleared the next restart uses the configured command again."""

from __future__ import annotations

from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.diagnosis.workaround import Workaround
from vllm_guardian.policy.workaround import WorkaroundState, dropin_path, sync_dropin
from vllm_guardian.testing.fake_runner import FakeRunner, result
from vllm_guardian.model import ProcKey
from tests.support.remediation_world import ARGV, World, target

SIG = "vllm-mm-cache-lru-busy-loop"
WA = Workaround(("--mm-processor-cache-gb", "0"), (("VLLM_MM_CACHE", "off"),))
ALLOW = {
    "recurrence": {"enabled": True, "window": 3600, "apply_workaround": True},
    "backoff": {"initial": 1, "max": 1},  # the timelines below restart again within seconds
}


def world(tmp_path, policy=ALLOW, **kw):
    w = World(tmp_path, policy=policy, **kw)
    w.rem = w.new_remediator(workarounds={SIG: WA}, systemd_dropin_root=str(tmp_path / "run-systemd"))
    return w


def server_comes_up(w, pid):
    key = ProcKey(pid, pid)
    w.tracker.apply_discovery((target(key, (key,)),), (), w.clock.monotonic())
    w.tracker.canary_finished("llm", key, True, "m", w.clock.monotonic())


def verified(w, pid):
    """The running sequence's restart comes up (pid ``pid``) and is verified; its incident resolved."""
    w.step(1, n=8)
    server_comes_up(w, pid)
    w.step()
    assert w.rem.sequences["llm"].outcome == "done"
    w.incidents.resolve_target("llm", "restarted and verified")


def restart_verified(w):
    """One busy loop restarted and verified; its incident resolved, as the loop does."""
    inc = w.open()
    assert w.consider(inc) == "started"
    verified(w, 300)
    return inc


def recur(w, diagnosis=(SIG,)):
    inc = w.open()
    w.incidents.set_diagnosis(inc.id, [{"id": i, "confidence": 0.9} for i in diagnosis], None)
    return w.incident(inc.id)


def test_command_mode_restarts_a_recurrence_with_the_catalogs_arguments_and_says_so(tmp_path):
    w = world(tmp_path)
    first = restart_verified(w)
    inc = recur(w)
    assert w.consider(inc) == "started with the workaround"
    w.step(1, n=8)
    assert w.control.specs[-1].argv == (*ARGV, "--mm-processor-cache-gb", "0")
    assert w.control.specs[-1].env["VLLM_MM_CACHE"] == "off"
    applied = [a for a in w.incident(inc.id).actions if a.name == "workaround"]
    assert applied and applied[0].status == "applied" and "--mm-processor-cache-gb 0" in applied[0].detail
    assert first.id in applied[0].detail
    record = WorkaroundState(str(tmp_path)).load()["llm"]
    assert (record.signature, record.incident, record.workaround) == (SIG, inc.id, WA)


def test_after_workaround_clear_the_next_restart_uses_the_configured_command(tmp_path):
    w = world(tmp_path)
    restart_verified(w)
    w.consider(recur(w))
    verified(w, 400)
    assert WorkaroundState(str(tmp_path)).clear("llm")
    assert (
        w.rem.manual("llm", w.tracker.targets["llm"], w.clock.monotonic(), "restart", False) == "llm: restart started"
    )
    w.step(1, n=40)  # a manual restart drains in full (drain.timeout 30 s)
    assert w.control.specs[-1].argv == tuple(ARGV)


def test_a_recurrence_while_running_with_the_workaround_escalates(tmp_path):
    w = world(tmp_path)
    restart_verified(w)
    w.consider(recur(w))
    verified(w, 400)
    again = recur(w)
    assert w.consider(again).startswith("escalated: recurring busy_loop")
    assert "already runs with the workaround" in w.consider(again)


def test_a_recurrence_waits_for_its_diagnosis_before_deciding(tmp_path):
    w = world(tmp_path)
    restart_verified(w)
    inc = w.open()
    text = w.rem.consider(
        inc,
        w.tracker.targets["llm"],
        w.clock.monotonic(),
        mode=Mode.REMEDIATE,
        tripped=1,
        total=1,
        diagnosing=True,
    ).text
    assert "waiting for the diagnosis" in text and w.actions(inc) == []


def test_systemd_mode_writes_the_drop_in_and_reloads_before_the_restart(tmp_path):
    cmd = FakeRunner({("systemctl", "restart"): result(""), ("systemctl", "daemon-reload"): result("")})
    restart = {"mode": "systemd", "unit": "vllm@llama.service", "stop_timeout": 10, "owner_grace": 0}
    w = world(tmp_path, restart=restart, runner=cmd)
    restart_verified(w)
    assert cmd.argvs() == [("systemctl", "restart", "vllm@llama.service")]
    w.consider(recur(w))
    w.step(1, n=8)
    assert cmd.argvs()[1:] == [("systemctl", "daemon-reload"), ("systemctl", "restart", "vllm@llama.service")]
    dropin = dropin_path(str(tmp_path / "run-systemd"), "vllm@llama.service").read_text()
    assert 'Environment="VLLM_GUARDIAN_EXTRA_ARGS=--mm-processor-cache-gb 0"' in dropin
    assert 'Environment="VLLM_MM_CACHE=off"' in dropin


def test_a_cleared_workaround_takes_its_drop_in_away_at_the_next_restart(tmp_path):
    root, unit = str(tmp_path), "vllm.service"
    assert sync_dropin(root, unit, WA) and not sync_dropin(root, unit, WA)  # written once, then unchanged
    assert sync_dropin(root, unit, None) and not dropin_path(root, unit).exists()
    assert not sync_dropin(root, unit, None)  # nothing to remove: no reload needed
