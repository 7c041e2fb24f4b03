"""The restart sequence under a target's profile (docs/policy.md): the profile's mode per kind, dry-run
and budget decide in place of the global ones; the pre-restart device check runs before anything is
taken down and a failure ends the sequence with nothing stopped, escalated."""

from __future__ import annotations

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.policy.device_check import DeviceCheck
from vllm_guardian.policy.profiles import TargetFacts
from vllm_guardian.remediation.target_policy import device_kind, scope_key, target_policy
from tests.support.remediation_world import World

OBSERVE_LLM = {"profiles": [{"name": "watch", "match": {"target": "llm"}, "modes": {"*": "observe"}}]}


def policy(**profile):
    return {"profiles": [{"name": "p", "match": {"target": "llm"}, **profile}]}


@pytest.mark.parametrize(
    ("cfg", "kind", "expected"),
    [
        (OBSERVE_LLM, "busy_loop", Mode.OBSERVE),
        ({"profiles": [{"name": "p", "match": {"target": "other"}, "modes": {"*": "observe"}}]}, "busy_loop", None),
        (policy(modes={"busy_loop": "alert"}), "busy_loop", Mode.ALERT),
        (policy(modes={"busy_loop": "alert"}), "engine_stall", None),
        (policy(modes={"engine_stall": "remediate", "*": "alert"}), "busy_loop", Mode.ALERT),
    ],
    ids=["star-observe", "no-match-detector-mode", "kind-named", "kind-not-named", "star-for-the-rest"],
)
def test_the_profile_sets_the_mode_per_kind_else_the_detectors_own(tmp_path, cfg, kind, expected):
    w = World(tmp_path, policy=cfg)
    inc = w.open()
    got = w.rem.target_policy("llm", w.tracker.targets["llm"]).mode_for(kind, Mode.REMEDIATE)
    assert got is (expected or Mode.REMEDIATE)
    assert w.rem.mode_for(inc, w.tracker.targets["llm"], Mode.REMEDIATE) is w.rem.target_policy("llm").mode_for(
        "busy_loop", Mode.REMEDIATE
    )


def test_a_profile_in_dry_run_records_what_it_would_have_done(tmp_path):
    w = World(tmp_path, policy=policy(dry_run=True))
    inc = w.open()
    assert w.consider(inc).startswith("dry_run: would have drained")
    w.step(1, n=5)
    assert w.control.signals == [] and "llm" not in w.rem.sequences


def test_a_profiles_budget_replaces_the_global_one(tmp_path):
    w = World(tmp_path, policy={"budget": {"max_restarts": 5}, **policy(max_restarts=1, budget_period=7200)})
    w.ledger.record("llm", w.clock.wall())
    inc = w.open()
    assert w.consider(inc).startswith("escalated: restart budget exhausted: 1 restarts in the last 7200s (max 1)")


def test_a_target_no_profile_matches_gets_the_global_policy(tmp_path):
    w = World(tmp_path, policy={"dry_run": False, **policy(dry_run=True, match={"target": "nobody"})})
    assert w.rem.target_policy("llm").profile.name == "default"
    assert w.consider(w.open()) == "started"


@pytest.mark.parametrize(
    ("scope", "facts", "key"),
    [
        ("model", TargetFacts("n", "llm", "llama"), "model:llama"),
        ("model", TargetFacts("n", "llm", None), "target:llm"),
        ("group", TargetFacts("n", "llm", "llama", group="g1"), "group:g1"),
        ("group", TargetFacts("n", "llm", "llama"), "target:llm"),
        ("profile", TargetFacts("n", "llm", "llama"), "profile:p"),
    ],
    ids=["model", "model-unknown-counted-alone", "group", "no-group-counted-alone", "profile"],
)
def test_the_breaker_scope_a_target_counts_in(scope, facts, key):
    cfg = parse_config({"policy": policy(breaker={"enabled": True, "scope": scope})})
    tp = target_policy(cfg.policy, facts)
    assert scope_key(tp.profile, facts) == tp.scope == key


@pytest.mark.parametrize(
    ("backends", "kind"),
    [(["nvml"], "nvidia"), (["npu_smi"], "ascend"), ([], "none"), (["kmsg"], "none")],
    ids=["nvml", "npu-smi", "no-device", "kmsg-only"],
)
def test_the_device_kind_a_profile_matches_on(backends, kind):
    assert device_kind(backends) == kind


# ------------------------------------------------------------------ the pre-restart device check
def test_a_failed_device_check_refuses_the_restart_before_anything_is_stopped_and_escalates(tmp_path):
    w = World(tmp_path)
    asked: list[str] = []

    def check(target):
        asked.append(target)
        return DeviceCheck(False, ("device check command dcgmi exited 1: diag failed",), ())

    w.rem = w.new_remediator(pre_restart_check=check)
    inc = w.open()
    assert w.consider(inc) == "started"
    w.step(1, n=5)
    seq = w.rem.sequences["llm"]
    assert seq.outcome == "aborted" and "dcgmi exited 1" in seq.detail
    assert ("device_check", "escalated") in w.actions(inc)
    assert w.control.signals == [] and w.control.specs == [] and w.published == []  # nothing drained or stopped
    assert asked == ["llm"]
    assert w.consider(inc) == "already aborted for this incident"  # not asked again for it


def test_a_device_check_that_passes_lets_the_sequence_go_on(tmp_path):
    w = World(tmp_path)
    w.rem = w.new_remediator(pre_restart_check=lambda target: DeviceCheck(True, (), ("nvml:0",)))
    inc = w.open()
    w.consider(inc)
    w.step(1, n=3)
    assert w.rem.sequences["llm"].phase.value != "aborted" and w.published[0]["action"] == "drain"
    lease = [a for a in w.incident(inc.id).actions if a.name == "lease"]
    assert lease and "device check passed (nvml:0)" in lease[0].detail
