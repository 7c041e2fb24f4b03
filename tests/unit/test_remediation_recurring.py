"""The remediation's recurrence gate (docs/policy.md, Recurrence): a target's last sequence that ended
verified for another incident of the same kind, within the window, makes the next restart an
escalation ("recurring"); `decide` refuses with that key."""

from __future__ import annotations

import dataclasses

import pytest

from vllm_guardian.config.schema import PolicyConfig, RestartConfig
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.config.schema_policy import RecurrenceConfig
from vllm_guardian.diagnosis.workaround import Workaround
from vllm_guardian.model import Incident, Kind, ProcKey, Severity, Status, TargetRef
from vllm_guardian.policy.workaround import Applied
from vllm_guardian.remediation.decide import Situation, decide
from vllm_guardian.remediation.policy import Verdict
from vllm_guardian.remediation.recurring import recurring
from vllm_guardian.remediation.sequence import Phase, RestartSequence

ON = RecurrenceConfig(enabled=True, window=600.0)
CMD = RestartConfig(mode="command", command=("vllm", "serve"))


def sequence(phase=Phase.DONE, reason="busy_loop", incident="inc-1", at=1000.0, drain_only=False):
    return RestartSequence(
        "llm", reason, incident, "command", ProcKey(10, 1), [], drain_only=drain_only, phase=phase, phase_since_wall=at
    )


def incident(kind=Kind.BUSY_LOOP, iid="inc-2"):
    return Incident(iid, kind, Severity.CRITICAL, "n", TargetRef("llm", 20, 2), Status.FIRING, "s", 1100.0)


@pytest.mark.parametrize(
    ("cfg", "prev", "inc", "rc", "now", "recurs"),
    [
        (ON, sequence(), incident(), CMD, 1100.0, True),
        (RecurrenceConfig(enabled=False), sequence(), incident(), CMD, 1100.0, False),
        (ON, None, incident(), CMD, 1100.0, False),
        (ON, sequence(phase=Phase.FAILED), incident(), CMD, 1100.0, False),
        (ON, sequence(), incident(kind=Kind.ENGINE_STALL), CMD, 1100.0, False),
        (ON, sequence(), incident(), CMD, 1700.0, False),
        (ON, sequence(incident="inc-2"), incident(), CMD, 1100.0, False),
        (ON, sequence(reason="manual", incident=None), incident(), CMD, 1100.0, False),
        (ON, sequence(drain_only=True), incident(), CMD, 1100.0, False),
        (ON, sequence(), incident(), None, 1100.0, False),
    ],
    ids=[
        "same-kind-after-verified-restart",
        "off-by-default",
        "no-previous-sequence",
        "previous-not-verified",
        "other-kind",
        "outside-the-window",
        "same-incident",
        "manual-restart",
        "drain-only",
        "autodiscovered",
    ],
)
def test_a_recurrence_is_recognised(cfg, prev, inc, rc, now, recurs):
    assert (recurring(cfg, prev, inc, rc, now) is not None) is recurs


def test_a_recurrence_names_the_incident_it_repeats():
    found = recurring(ON, sequence(), incident(), CMD, 1100.0)
    assert found is not None and found.action == "escalate" and "see incident inc-1" in found.reason


SIG = "vllm-mm-cache-lru-busy-loop"
WA = Workaround(("--mm-processor-cache-gb", "0"))
ALLOW = RecurrenceConfig(enabled=True, window=600.0, apply_workaround=True)
SYSTEMD = RestartConfig(mode="systemd", unit="vllm.service")
KUBE = RestartConfig(mode="kubernetes")


def diagnosed(*ids):
    return dataclasses.replace(incident(), diagnosis=tuple({"id": i, "confidence": 0.9} for i in ids))


def running(signature=SIG):
    return Applied("llm", signature, WA, "inc-1", 1000.0)


@pytest.mark.parametrize(
    ("cfg", "inc", "rc", "running_with", "diagnosing", "action", "says"),
    [
        (ALLOW, diagnosed(SIG), CMD, None, False, "workaround", "restart with the workaround"),
        (ALLOW, diagnosed("device:xid:79", SIG), CMD, None, False, "workaround", "restart with the workaround"),
        (ALLOW, diagnosed(SIG), SYSTEMD, None, False, "workaround", "restart with the workaround"),
        (ALLOW, diagnosed(SIG), KUBE, None, False, "escalate", '"$append": ["--mm-processor-cache-gb", "0"]'),
        (ALLOW, diagnosed(SIG), CMD, running(), False, "escalate", "already runs with the workaround"),
        (ALLOW, incident(), CMD, None, True, "wait", "waiting for the diagnosis"),
        (ALLOW, incident(), CMD, None, False, "escalate", "the catalog knows no workaround"),
        (ALLOW, diagnosed("vllm-other"), CMD, None, False, "escalate", "the catalog knows no workaround"),
        (ON, diagnosed(SIG), CMD, None, False, "escalate", "no second blind restart"),
    ],
    ids=[
        "command-mode",
        "a-device-entry-first",
        "systemd-mode",
        "kubernetes-never-silently",
        "already-running-with-it",
        "diagnosis-pending",
        "never-diagnosed",
        "no-workaround-in-catalog",
        "not-allowed-by-the-profile",
    ],
)
def test_what_a_recurrence_comes_to(cfg, inc, rc, running_with, diagnosing, action, says):
    found = recurring(
        cfg, sequence(), inc, rc, 1100.0, workarounds={SIG: WA}, running_with=running_with, diagnosing=diagnosing
    )
    assert found is not None and found.action == action and says in found.reason
    assert (found.workaround == WA) is (action == "workaround")


def test_decide_escalates_a_recurrence_instead_of_restarting():
    situation = Situation(
        kind=Kind.BUSY_LOOP,
        incident_id="inc-2",
        mode=Mode.REMEDIATE,
        active=False,
        previous=("inc-1", Phase.DONE),
        restart=CMD,
        method_refusal=None,
        unstartable=None,
        device_fault=None,
        maintenance=False,
        policy=PolicyConfig(),
        tripped=1,
        total=4,
        ever_ready=True,
        budget=Verdict(True, "ok"),
        pids=(20,),
        recurring="recurring busy_loop 100s after the verified restart ending inc-1",
    )
    refusal = decide(situation).refusal
    assert refusal is not None and (refusal.key, refusal.status) == ("recurring", "escalated")
    assert decide(dataclasses.replace(situation, recurring=None)).start


def stall(*ids):
    return dataclasses.replace(
        incident(kind=Kind.ENGINE_STALL), diagnosis=tuple({"id": i, "confidence": 0.9} for i in ids)
    )


@pytest.mark.parametrize(
    ("inc", "previous_signature", "diagnosing", "action"),
    [
        (stall(SIG), SIG, False, "workaround"),
        (stall(), SIG, True, "wait"),
        (stall(), SIG, False, None),
        (stall(SIG), None, False, None),
        (stall("vllm-other"), SIG, False, None),
    ],
    ids=[
        "same-bug-read-as-a-stall",
        "stall-being-diagnosed",
        "stall-never-diagnosed",
        "previous-never-diagnosed",
        "another-bug",
    ],
)
def test_the_same_bug_under_another_kind_is_a_recurrence(inc, previous_signature, diagnosing, action):
    found = recurring(
        ALLOW,
        sequence(),
        inc,
        CMD,
        1100.0,
        workarounds={SIG: WA},
        diagnosing=diagnosing,
        previous_signature=previous_signature,
    )
    assert (found.action if found is not None else None) == action
