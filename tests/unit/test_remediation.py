"""The remediation state machine and its safety gates, on a fake clock and a fake kernel."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vllm_guardian.host.launch import MINIMAL_PATH
from vllm_guardian.remediation.sequence import Phase, PhaseProgress
from vllm_guardian.config.schema import RestartConfig
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.model import Kind, ProcKey, Sample
from vllm_guardian.remediation.policy import Maintenance, RestartLedger
from vllm_guardian.series import metrics as m
from vllm_guardian.testing.fake_control import FakeControl
from vllm_guardian.testing.fake_runner import FakeRunner, result
from tests.support.remediation_world import API, ARGV, ENGINE, WORKER, World, target


def test_a_busy_loop_is_drained_stopped_restarted_and_verified(tmp_path):
    w = World(tmp_path)
    inc = w.open()
    assert w.consider(inc) == "started"
    assert not w.rem.serving("llm")  # readiness turns 503 at once
    w.step()
    assert w.published[0]["action"] == "drain"
    w.step(1, n=6)  # a hung engine has nothing to drain: the short drain timeout passes
    assert (API, 15) in w.control.signals  # SIGTERM to the API server first
    assert [s.argv for s in w.control.specs] == [tuple(ARGV)]  # a clean launch (test_launch.py)
    assert w.control.specs[0].env == {"PATH": MINIMAL_PATH, "LANG": "C.UTF-8", "HOME": "/"}
    assert w.rem.phase("llm") == "verifying" and not w.rem.serving("llm")
    w.new_server_comes_up()
    w.step()
    assert w.rem.serving("llm") and w.rem.sequences["llm"].outcome == "done"
    assert w.published[-1]["action"] == "undrain"
    names = [a for a, _ in w.actions(inc)]
    assert names[:1] == ["remediation"] and {"draining", "stopping", "starting", "verifying"} <= set(names)
    assert len(w.ledger.recent("llm", w.clock.wall(), 3600)) == 1


def test_a_leak_drains_until_requests_finish_before_stopping(tmp_path):
    w = World(tmp_path)
    inc = w.open(Kind.HOST_MEMORY_LEAK)
    w.consider(inc)
    now = w.clock.monotonic()
    for t in range(1, 8):
        running = 2.0 if t < 6 else 0.0
        w.series.add(Sample("llm", "", m.REQ_RUNNING, running, now + t))
        w.series.add(Sample("llm", "", m.REQ_WAITING, 0.0, now + t))
        w.step()
        if t < 6:
            assert w.control.signals == []  # still draining: requests in flight
    assert (API, 15) in w.control.signals


@pytest.mark.parametrize(
    "kind, grace",
    [(Kind.BUSY_LOOP, 3), (Kind.HOST_MEMORY_LEAK, 10)],
    ids=["hung tree: hang_stop_grace", "leak: stop_timeout"],
)
def test_an_api_server_ignoring_sigterm_is_killed_with_its_whole_tree_after_its_grace(tmp_path, kind, grace):
    reused = ProcKey(WORKER.pid, 999)  # a stranger now holds an old pid? never signalled
    control = FakeControl({API, ENGINE, WORKER}, ignores_term={API})
    w = World(tmp_path, control=control)
    w.consider(w.open(kind))
    now = w.clock.monotonic()
    for t in range(1, 4):  # idle: nothing to drain
        for metric in (m.REQ_RUNNING, m.REQ_WAITING):
            w.series.add(Sample("llm", "", metric, 0.0, now + t))
        w.step()
    assert control.signals == [(API, 15)]
    term_at = w.rem.sequences["llm"].phase_since
    while not any(s == 9 for _, s in control.signals):
        w.step()
    assert w.clock.monotonic() - term_at == grace
    assert {k for k, s in control.signals if s == 9} == {API, ENGINE, WORKER}
    assert all(k != reused for k, _ in control.signals)
    assert w.rem.phase("llm") in ("starting", "verifying")


def test_a_hung_engine_is_not_drained_it_makes_no_progress(tmp_path):
    w = World(tmp_path)
    w.consider(w.open(Kind.ENGINE_STALL))
    w.step()  # drain published; counters flat (none at all): stop at once
    w.step()
    assert (API, 15) in w.control.signals


def test_a_hang_whose_engine_still_steps_gets_the_short_drain(tmp_path):
    w = World(tmp_path)
    now = w.clock.monotonic()
    for t in range(-5, 1):  # steps before the incident
        w.series.add(Sample("llm", "", m.ITERATIONS, 100.0 * t, now + t))
    w.consider(w.open())
    for t in range(1, 10):
        w.series.add(Sample("llm", "", m.ITERATIONS, 100.0 * t, now + t))
        w.series.add(Sample("llm", "", m.REQ_RUNNING, 1.0, now + t))
        w.series.add(Sample("llm", "", m.REQ_WAITING, 0.0, now + t))
        w.step()
        if t <= 5:
            assert w.control.signals == []
    assert (API, 15) in w.control.signals


def test_a_dead_engine_is_not_drained_even_if_it_stepped_just_before_it_died(tmp_path):
    w = World(tmp_path)
    now = w.clock.monotonic()
    for t in range(-4, 1):  # the request that killed it ran a few steps first
        w.series.add(Sample("llm", "", m.ITERATIONS, 100.0 * t, now + t))
        w.series.add(Sample("llm", "", m.REQ_RUNNING, 1.0, now + t))
        w.series.add(Sample("llm", "", m.REQ_WAITING, 0.0, now + t))
    inc = w.open(Kind.ENGINE_DEAD)
    w.consider(inc)
    w.step()
    assert (API, 15) in w.control.signals  # stopped in the first tick: no drain wait
    drained = next(a for a in w.incident(inc.id).actions if a.name == "draining")
    assert "nothing to drain" in drained.detail


def test_stopping_waits_for_the_evidence_while_draining_goes_on(tmp_path):
    w = World(tmp_path)
    w.holding.add("llm")
    w.consider(w.open())
    w.step(1, n=5)
    assert w.rem.phase("llm") == "draining" and w.control.signals == [] and not w.rem.serving("llm")
    w.holding.clear()
    w.step()
    assert (API, 15) in w.control.signals


def test_a_pid_reused_by_another_process_is_never_signalled(tmp_path):
    stranger = ProcKey(ENGINE.pid, 777)  # same pid, different starttime: not ours
    control = FakeControl({API, stranger}, ignores_term={API})
    w = World(tmp_path, control=control)
    w.consider(w.open())
    w.step(1, n=20)
    assert all(k != stranger for k, _ in control.signals)
    assert stranger in control.live


def test_a_server_that_never_becomes_ready_fails_verify_and_escalates(tmp_path):
    w = World(tmp_path)
    inc = w.open()
    w.consider(inc)
    w.step(1, n=70)
    seq = w.rem.sequences["llm"]
    assert seq.outcome == "failed" and "ready_timeout" in seq.detail
    assert not w.rem.serving("llm")
    assert ("verifying", "failed") in w.actions(inc)
    assert w.consider(inc).startswith("already failed")  # no automatic retry of a failed restart
    assert len(w.ledger.recent("llm", w.clock.wall(), 3600)) == 1  # counted against the budget


def test_processes_surviving_sigkill_fail_the_sequence_for_a_human(tmp_path):
    control = FakeControl({API, ENGINE}, unkillable={ENGINE}, term_takes_down={API: set()})
    w = World(tmp_path, control=control)
    inc = w.open()
    w.consider(inc)
    w.step(1, n=40)
    assert w.rem.sequences["llm"].outcome == "failed"
    assert "survived SIGKILL" in w.rem.sequences["llm"].detail
    assert control.started == []  # never start a second server beside an unkillable one


def test_budget_of_one_per_hour_refuses_the_second_restart_and_goes_observe_only(tmp_path):
    w = World(tmp_path, policy={"budget": {"max_restarts": 1, "period": 3600}})
    first = w.open()
    w.consider(first)
    w.step(1, n=6)
    w.new_server_comes_up()
    w.step()
    assert w.rem.sequences["llm"].outcome == "done"
    w.incidents.resolve_target("llm", "restarted")
    second = w.open()
    decision = w.consider(second)
    assert decision.startswith("escalated: restart budget exhausted")
    assert "llm" in w.rem.exhausted and not w.rem.active("llm")
    assert len(w.control.started) == 1


def test_the_budget_survives_a_guardian_restart(tmp_path):
    w = World(tmp_path, policy={"budget": {"max_restarts": 1, "period": 3600}})
    w.ledger.record("llm", w.clock.wall())
    again = RestartLedger(str(tmp_path))
    assert len(again.recent("llm", w.clock.wall(), 3600)) == 1


def test_backoff_defers_a_restart_soon_after_the_previous_one(tmp_path):
    w = World(tmp_path, policy={"backoff": {"initial": 300, "max": 900}})
    w.ledger.record("llm", w.clock.wall() - 10)
    decision = w.consider(w.open())
    assert decision.startswith("deferred: backoff")
    w.clock.advance(300)
    assert w.consider(w.incidents.open_incidents()[0]) == "started"


@pytest.mark.parametrize(
    "setup, expected",
    [
        ({"policy": {"dry_run": True}}, "dry_run: would have drained"),
        ({"mode": "alert"}, "mode alert: alert only"),
        ({"mode": "observe"}, "mode observe: alert only"),
        ({"tripped": 3, "total": 4}, "escalated: node-wide anomaly"),
    ],
)
def test_gates_that_never_signal_anything(tmp_path, setup, expected):
    w = World(tmp_path, policy=setup.get("policy"))
    decision = w.rem.consider(
        w.open(),
        w.tracker.targets["llm"],
        w.clock.monotonic(),
        mode=Mode(setup.get("mode", "remediate")),
        tripped=setup.get("tripped", 1),
        total=setup.get("total", 1),
    ).text
    w.step(1, n=20)
    assert decision.startswith(expected)
    assert w.control.signals == [] and w.control.started == []


def test_dry_run_is_recorded_on_the_incident_as_would_have(tmp_path):
    w = World(tmp_path, policy={"dry_run": True})
    inc = w.open()
    w.consider(inc)
    w.consider(inc)
    acts = w.incident(inc.id).actions
    assert [(a.name, a.status) for a in acts] == [("restart", "dry_run")]  # recorded once
    assert "would have" in acts[0].detail


def test_maintenance_pauses_remediation(tmp_path):
    w = World(tmp_path)
    Maintenance(str(tmp_path)).turn_on(w.clock.wall(), 3600)
    assert w.consider(w.open()).startswith("skipped: maintenance")
    assert w.control.signals == []


def test_a_target_matched_by_its_argv_port_is_never_restarted_and_the_alert_says_why(tmp_path):
    """Unprivileged: its sockets could not be read, its port is its command line's word only."""
    w = World(tmp_path)
    w.tracker.apply_discovery((replace(target(), socket="argv"),), (), w.clock.monotonic())
    inc = w.open()
    answer = w.consider(inc)
    w.consider(inc)
    assert answer.startswith("escalated: port not verified: the guardian cannot read this process's sockets")
    assert "CAP_SYS_PTRACE/CAP_DAC_READ_SEARCH" in answer
    assert w.actions(inc) == [("restart", "escalated")]  # recorded once
    w.step(1, n=5)
    assert w.control.signals == [] and w.rem.phase("llm") == "serving"


def test_an_autodiscovered_target_is_alert_only(tmp_path):
    w = World(tmp_path)
    w.rem = w.new_remediator(targets={})
    assert w.consider(w.open()).startswith("skipped: autodiscovered target")


def test_systemd_mode_restarts_the_unit_with_exactly_systemctl_restart(tmp_path):
    cmd = FakeRunner({("systemctl", "restart"): result("")})
    w = World(
        tmp_path,
        restart={"mode": "systemd", "unit": "vllm@llama.service", "stop_timeout": 10, "owner_grace": 0},
        runner=cmd,
    )
    w.consider(w.open())
    w.step(1, n=8)
    assert cmd.argvs() == [("systemctl", "restart", "vllm@llama.service")]
    assert w.rem.phase("llm") == "verifying"


def test_a_failing_systemctl_fails_the_sequence_with_its_error(tmp_path):
    cmd = FakeRunner({("systemctl", "restart"): result("", returncode=5, stderr="Unit vllm@x.service not found.")})
    w = World(tmp_path, restart={"mode": "systemd", "unit": "vllm@x.service", "owner_grace": 0}, runner=cmd)
    w.consider(w.open())
    w.step(1, n=8)
    seq = w.rem.sequences["llm"]
    assert seq.outcome == "failed" and "not found" in seq.detail


def test_signal_mode_stops_and_waits_for_an_external_supervisor(tmp_path):
    w = World(tmp_path, restart={"mode": "signal", "ready_timeout": 60})
    w.consider(w.open())
    w.step(1, n=8)
    assert (API, 15) in w.control.signals and w.control.started == []
    w.new_server_comes_up()
    w.step()
    assert w.rem.sequences["llm"].outcome == "done"


@pytest.mark.parametrize(
    "phase, expect_phase, expect_started",
    [
        ("draining", "lease", None),  # nothing disruptive yet: resumed from the fleet lease
        ("starting", "verifying", 0),  # the start may have been issued: never issue it twice
        ("stopping", "stopping", None),  # resume the stop (identity-checked signals)
    ],
)
def test_a_guardian_restart_mid_sequence_resumes_safely(tmp_path, phase, expect_phase, expect_started):
    w = World(tmp_path)
    w.consider(w.open())
    seq = w.rem.sequences["llm"]
    seq.phase = Phase(phase)
    if phase == "starting":  # the start was issued before the guardian died
        seq.history.append(PhaseProgress(Phase.STARTING, 0.0, start_issued=True))
    w.rem.store.save(seq)
    w.control.started.clear()
    again = w.new_remediator()
    assert again.sequences["llm"].phase == expect_phase
    if expect_started is not None:
        w.rem = again
        w.step(1, n=3)
        assert len(w.control.started) == expect_started


def test_a_manual_drain_takes_the_target_out_until_undrain_and_signals_nothing(tmp_path):
    w = World(tmp_path)
    msg = w.rem.manual("llm", w.tracker.targets["llm"], w.clock.monotonic(), "drain", dry_run=False)
    assert "drain started" in msg and not w.rem.serving("llm")
    w.step(1, n=40)
    assert w.control.signals == [] and not w.rem.serving("llm")
    w.rem.undrain("llm")
    assert w.rem.serving("llm")


def test_a_manual_restart_dry_run_does_nothing(tmp_path):
    w = World(tmp_path)
    msg = w.rem.manual("llm", w.tracker.targets["llm"], w.clock.monotonic(), "restart", dry_run=True)
    assert "dry run: would have" in msg and not w.rem.active("llm")


def test_a_manual_restart_respects_the_budget(tmp_path):
    w = World(tmp_path, policy={"budget": {"max_restarts": 1, "period": 3600}})
    w.ledger.record("llm", w.clock.wall())
    msg = w.rem.manual("llm", w.tracker.targets["llm"], w.clock.monotonic(), "restart", dry_run=False)
    assert "refused: restart budget exhausted" in msg


class RecordingApi:
    """The opener seam of KubeClient: answers like the API server and records each request."""

    UID = "3f8e2a1c-7b4d-4e9a-9c1f-2d6b8e0a5f71"

    def __init__(self):
        self.requests = []

    def __call__(self, req, timeout):
        import io
        import json

        self.requests.append((req.get_method(), req.full_url, json.loads(req.data) if req.data else None))
        if req.full_url.endswith("/apis/policy"):  # the Eviction version the server serves
            return io.BytesIO(json.dumps({"kind": "APIGroup", "versions": [{"groupVersion": "policy/v1"}]}).encode())
        body = {"items": [{"metadata": {"namespace": "llm", "name": "vllm-llama-0", "uid": self.UID}}]}
        return io.BytesIO(json.dumps(body).encode())


@pytest.mark.parametrize(
    "pod_removal, method, path, options",
    [
        ("evict", "POST", "/api/v1/namespaces/llm/pods/vllm-llama-0/eviction", lambda b: b["deleteOptions"]),
        ("delete", "DELETE", "/api/v1/namespaces/llm/pods/vllm-llama-0", lambda b: b),
    ],
)
def test_kubernetes_mode_evicts_the_pod_or_deletes_it_when_configured(tmp_path, pod_removal, method, path, options):
    from vllm_guardian.host.kube import KubeClient
    from vllm_guardian.testing.fake_proc import FakeProcTree

    proc = FakeProcTree(tmp_path / "proc")
    proc.add_process(API.pid, 1, ("python3", "-m", "vllm.entrypoints.openai.api_server"), starttime=API.starttime)
    proc.write(f"{API.pid}/cgroup", f"0::/kubepods/burstable/pod{RecordingApi.UID}/abc\n".encode())
    api = RecordingApi()
    w = World(
        tmp_path / "state", restart={"mode": "kubernetes", "stop_timeout": 10}, control=FakeControl({API, ENGINE})
    )
    w.rem = w.new_remediator(
        kube=KubeClient("https://k8s", "tok", None, "gpu-node-17", opener=api),
        procfs=proc.procfs(),
        pod_removal=pod_removal,
    )
    assert w.consider(w.open()) == "started"
    w.step(1, n=7)
    sent, url, body = api.requests[-1]
    assert (sent, url) == (method, "https://k8s" + path)
    # a busy loop: the hung tree's short grace, not stop_timeout
    grace = int(RestartConfig().hang_stop_grace)
    assert options(body)["gracePeriodSeconds"] == grace and options(body)["preconditions"] == {"uid": RecordingApi.UID}
    assert all(sig != 15 for _, sig in w.control.signals)  # the kubelet stops the pod, not the guardian


class PdbRefuses(RecordingApi):
    """An API server whose PodDisruptionBudget never allows the eviction: 429 every time."""

    def __call__(self, req, timeout):
        import email.message
        import io
        import json
        import urllib.error

        if req.full_url.endswith("/eviction"):
            self.requests.append((req.get_method(), req.full_url, json.loads(req.data)))
            status = {
                "kind": "Status",
                "code": 429,
                "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            }
            raise urllib.error.HTTPError(
                req.full_url, 429, "Too Many Requests", email.message.Message(), io.BytesIO(json.dumps(status).encode())
            )
        return super().__call__(req, timeout)


class FakeTime:
    """kube_removal's time: sleeping advances the monotonic clock at once."""

    def __init__(self):
        self.now, self.slept = 0.0, []

    def monotonic(self):
        return self.now

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


def test_an_eviction_a_disruption_budget_never_allows_fails_the_restart_without_stopping_anything(
    tmp_path, monkeypatch
):
    """429s are retried with backoff within the drain timeout (30 s here), then the restart fails:
    nothing is signalled behind the budget's back, a person decides."""
    import vllm_guardian.remediation.kube_removal as kube_removal
    from vllm_guardian.host.kube import KubeClient
    from vllm_guardian.testing.fake_proc import FakeProcTree

    clock = FakeTime()
    monkeypatch.setattr(kube_removal, "time", clock)
    proc = FakeProcTree(tmp_path / "proc")
    proc.add_process(API.pid, 1, ("python3", "-m", "vllm.entrypoints.openai.api_server"), starttime=API.starttime)
    proc.write(f"{API.pid}/cgroup", f"0::/kubepods/burstable/pod{RecordingApi.UID}/abc\n".encode())
    api = PdbRefuses()
    w = World(
        tmp_path / "state", restart={"mode": "kubernetes", "stop_timeout": 10}, control=FakeControl({API, ENGINE})
    )
    w.rem = w.new_remediator(
        kube=KubeClient("https://k8s", "tok", None, "gpu-node-17", opener=api), procfs=proc.procfs()
    )
    assert w.consider(w.open()) == "started"
    w.step(1, n=10)
    evictions = [r for r in api.requests if r[1].endswith("/eviction")]
    assert len(evictions) == len(clock.slept) + 1 and sum(clock.slept) == 30  # 2, 4, 8, 16 (then the rest)
    assert w.rem.sequences["llm"].phase.value == "failed"
    assert (
        "disruption budget" in w.rem.sequences["llm"].detail and "nothing was stopped" in w.rem.sequences["llm"].detail
    )
    assert w.control.signals == []


class EvictionFails(RecordingApi):
    """An API server that answers the eviction with ``code`` (or does not answer at all: 0)."""

    def __init__(self, code):
        super().__init__()
        self.code = code

    def __call__(self, req, timeout):
        import email.message
        import io
        import urllib.error

        if req.full_url.endswith("/eviction"):
            self.requests.append((req.get_method(), req.full_url, None))
            if self.code == 0:
                raise urllib.error.URLError("connection refused")
            raise urllib.error.HTTPError(req.full_url, self.code, "no", email.message.Message(), io.BytesIO(b"{}"))
        return super().__call__(req, timeout)


@pytest.mark.parametrize(
    ("code", "falls_back"),
    [
        (0, True),  # unreachable: nobody decided anything, the tree is still ours and hung
        (500, True),
        (503, True),
        (403, False),  # RBAC does not allow eviction: the operator's decision
        (404, False),  # the pod is gone already
        (409, False),  # the UID precondition: the pod was replaced
        (422, False),
    ],
    ids=["unreachable", "500", "503", "403-rbac", "404-gone", "409-replaced", "422"],
)
def test_after_a_failed_eviction_only_an_api_that_gave_no_answer_lets_the_tree_be_stopped(tmp_path, code, falls_back):
    """docs/remediation.md, "When an eviction fails": the guardian stops the snapshotted processes
    itself only when the API server could not answer; every answer it gave escalates."""
    from vllm_guardian.host.kube import KubeClient
    from vllm_guardian.testing.fake_proc import FakeProcTree

    proc = FakeProcTree(tmp_path / "proc")
    proc.add_process(API.pid, 1, ("python3", "-m", "vllm.entrypoints.openai.api_server"), starttime=API.starttime)
    proc.write(f"{API.pid}/cgroup", f"0::/kubepods/burstable/pod{RecordingApi.UID}/abc\n".encode())
    api = EvictionFails(code)
    w = World(
        tmp_path / "state", restart={"mode": "kubernetes", "stop_timeout": 10}, control=FakeControl({API, ENGINE})
    )
    w.rem = w.new_remediator(
        kube=KubeClient("https://k8s", "tok", None, "gpu-node-17", opener=api), procfs=proc.procfs()
    )
    assert w.consider(w.open()) == "started"
    w.step(1, n=20)
    assert any(r[1].endswith("/eviction") for r in api.requests)
    seq = w.rem.sequences["llm"]
    if falls_back:
        assert 9 in {sig for _, sig in w.control.signals}  # SIGKILL of the verified tree after the grace
    else:
        assert w.control.signals == []
        assert seq.phase.value == "failed" and "nothing was stopped" in seq.detail


def test_a_state_file_of_the_previous_format_resumes_a_stop_without_a_second_sigterm(tmp_path):
    import json

    w = World(tmp_path)
    (tmp_path / "remediation").mkdir()
    (tmp_path / "remediation" / "llm.json").write_text(
        json.dumps(
            {
                "target": "llm",
                "reason": "busy_loop",
                "incident_id": None,
                "mode": "command",
                "api_key": [API.pid, API.starttime],
                "tree": [[k.pid, k.starttime] for k in (API, ENGINE, WORKER)],
                "phase": "stopping",
                "phase_since": None,
                "history": [{"phase": "stopping", "at": 1.0, "term_sent": True}],
            }
        )
    )
    again = w.new_remediator()
    seq = again.sequences["llm"]
    assert seq.phase is Phase.STOPPING and seq.progress.begun
    w.rem = again
    w.step()
    assert w.control.signals == []  # SIGTERM was sent before the restart; only SIGKILL may follow


@pytest.mark.parametrize(
    "kind, grace", [(Kind.BUSY_LOOP, "3s"), (Kind.KV_CACHE_LEAK, "10s")]
)  # World: hang grace 3, stop 10
def test_the_dry_run_message_names_the_kill_grace_the_kind_would_get(tmp_path, kind, grace):
    w = World(tmp_path, policy={"dry_run": True})
    inc = w.open(kind)
    w.consider(inc)
    assert f"SIGKILL after {grace})" in w.incident(inc.id).actions[0].detail


def test_the_phase_of_a_drained_target_agrees_with_its_readiness(tmp_path):
    """After a manual drain the status said [SERVING] beside "serving: NO"; the phase now says drained."""
    w = World(tmp_path)
    w.rem.manual("llm", w.tracker.targets["llm"], w.clock.monotonic(), "drain", dry_run=False)
    w.step(1, n=40)
    assert (w.rem.phase("llm"), w.rem.serving("llm")) == ("drained", False)
    w.rem.undrain("llm")
    assert (w.rem.phase("llm"), w.rem.serving("llm")) == ("serving", True)


# ------------------------------------------------------------------ a broken device under the server
def test_a_restart_onto_a_device_with_an_uncorrectable_fault_is_refused_and_escalated(tmp_path):
    w = World(tmp_path)
    reason = "restart refused: device nvml:0 reported Xid 79 (GPU has fallen off the bus); a restart cannot help"
    w.rem = w.new_remediator(device_check=lambda name: reason if name == "llm" else None)
    inc = w.open()
    assert w.consider(inc) == f"escalated: {reason}"
    assert w.consider(inc) == f"escalated: {reason}"  # asked every tick, recorded once
    assert w.actions(inc) == [("restart", "escalated")]
    w.step(1, n=5)
    assert w.control.signals == [] and w.control.specs == [] and w.rem.phase("llm") == "serving"
    assert w.ledger.recent("llm", w.clock.wall(), 3600) == []  # no budget burnt on it
    assert w.rem.manual("llm", w.tracker.targets["llm"], w.clock.monotonic(), "restart", False) == f"llm: {reason}"


def test_a_device_that_is_fine_does_not_hold_a_restart_back(tmp_path):
    w = World(tmp_path)
    w.rem = w.new_remediator(device_check=lambda name: None)
    assert w.consider(w.open()) == "started"


def test_a_device_fault_seen_while_the_tree_stops_fails_the_sequence_before_anything_starts(tmp_path):
    w = World(tmp_path)
    broken: list[str] = []
    w.rem = w.new_remediator(device_check=lambda name: broken[0] if broken else None)
    inc = w.open()
    assert w.consider(inc) == "started"
    broken.append("restart refused: device nvml:0 reported Xid 79 (GPU has fallen off the bus)")  # after the decision
    w.step(1, n=10)  # draining (a hang: nothing to drain), stopping, then the check before starting
    seq = w.rem.sequences["llm"]
    assert seq.outcome == "failed" and "not started again" in seq.detail and "Xid 79" in seq.detail
    assert (API, 15) in w.control.signals  # the hung tree was stopped ...
    assert w.control.specs == []  # ... and nothing launched onto the broken device
