"""Profiles (docs/policy.md): an ordered rule table, the first match wins, unset keys come from the
global policy; the config names a bad key by its path."""

from __future__ import annotations

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.errors import ConfigError
from vllm_guardian.policy.profiles import TargetFacts, describe, select

MIXED_FLEET = {
    "policy": {
        "dry_run": False,
        "budget": {"max_restarts": 3, "period": 3600},
        "profiles": [
            {"name": "big-group-never", "match": {"group": "big-.*"}, "modes": {"*": "alert"}},
            {"name": "new-nodes", "match": {"node_labels": {"pool": "new"}}, "modes": {"*": "observe"}},
            {
                "name": "proven",
                "match": {"node": "gpu-proven-[0-9]+", "device_kind": "nvidia"},
                "modes": {"busy_loop": "remediate", "engine_stall": "remediate"},
                "max_restarts": 5,
            },
            {"name": "ascend-dry", "match": {"device_kind": "ascend", "model": "qwen.*"}, "dry_run": True},
            {"name": "one-target", "match": {"target": "canary-.*"}, "modes": {"*": "remediate"}},
        ],
    }
}


def policy():
    return parse_config(MIXED_FLEET, hostname=lambda: "n").policy


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (TargetFacts(node="gpu-proven-1", target="llm", device_kind="nvidia", group="big-70b"), "big-group-never"),
        (
            TargetFacts(node="gpu-proven-1", target="llm", device_kind="nvidia", node_labels={"pool": "new"}),
            "new-nodes",
        ),
        (TargetFacts(node="gpu-proven-7", target="llm", device_kind="nvidia"), "proven"),
        (TargetFacts(node="gpu-proven-7", target="llm", device_kind="ascend"), "default"),
        (TargetFacts(node="npu-1", target="q", model="qwen2-7b", device_kind="ascend"), "ascend-dry"),
        (TargetFacts(node="npu-1", target="q", model="llama", device_kind="ascend"), "default"),
        (TargetFacts(node="x", target="canary-3"), "one-target"),
        (TargetFacts(node="gpu-proven-1x", target="llm", device_kind="nvidia"), "default"),
        (TargetFacts(node="x", target="llm", node_labels={"pool": "old"}), "default"),
    ],
    ids=[
        "group-first-wins-over-node",
        "labels-before-node-rule",
        "node-pattern-and-device",
        "device-kind-must-match",
        "model-and-device",
        "model-must-match",
        "target-name-pattern",
        "patterns-are-full-match",
        "label-value-must-equal",
    ],
)
def test_the_first_matching_profile_wins(facts, expected):
    assert select(policy(), facts).name == expected


def test_a_profile_fills_unset_keys_from_the_global_policy():
    p = select(policy(), TargetFacts(node="gpu-proven-2", target="llm", device_kind="nvidia"))
    assert (p.max_restarts, p.budget_period, p.dry_run) == (5, 3600.0, False)


@pytest.mark.parametrize(
    ("kind", "detector_mode", "expected"),
    [
        ("busy_loop", Mode.ALERT, Mode.REMEDIATE),
        ("engine_dead", Mode.ALERT, Mode.ALERT),
        ("engine_dead", Mode.OBSERVE, Mode.OBSERVE),
    ],
    ids=["profile-sets-kind", "unset-kind-keeps-detector-mode", "unset-kind-keeps-observe"],
)
def test_a_profile_mode_overrides_the_detector_mode_only_for_its_kinds(kind, detector_mode, expected):
    p = select(policy(), TargetFacts(node="gpu-proven-2", target="llm", device_kind="nvidia"))
    assert p.mode_for(kind, detector_mode) is expected


def test_a_star_mode_covers_every_kind():
    p = select(policy(), TargetFacts(node="a", target="llm", group="big-405b"))
    assert p.mode_for("engine_dead", Mode.REMEDIATE) is Mode.ALERT


def test_check_config_lines_name_each_targets_profile():
    lines = describe(policy(), [TargetFacts(node="a", target="llm", group="big-1"), TargetFacts(node="a", target="x")])
    assert lines[0].startswith("llm: profile big-group-never (*=alert;")
    assert lines[1].startswith("x: profile default (detector modes; dry_run=false; budget 3/3600s)")


@pytest.mark.parametrize(
    ("profile", "problem"),
    [
        ({"name": "p", "match": {"device_kind": "tpu"}}, "policy.profiles[0].match.device_kind: expected one of"),
        (
            {"name": "p", "modes": {"busy_loop": "reboot"}},
            "policy.profiles[0].modes.busy_loop: expected one of observe, alert, remediate",
        ),
        ({"name": "p", "match": {"node": "("}}, "policy.profiles[0].match.node: expected a valid regular"),
        ({"name": "p", "breaker": {"max_fraction": 2}}, "policy.profiles[0].breaker.max_fraction: expected a number"),
        ({"name": "p", "match": {"zone": "a"}}, "policy.profiles[0].match.zone: unknown key"),
    ],
    ids=["device-kind", "mode", "regex", "fraction", "unknown-key"],
)
def test_a_bad_profile_is_named_by_its_key_path(profile, problem):
    with pytest.raises(ConfigError) as err:
        parse_config({"policy": {"profiles": [profile]}}, hostname=lambda: "n")
    assert problem in str(err.value)


def test_a_profile_without_a_name_is_refused():
    with pytest.raises(ConfigError) as err:
        parse_config({"policy": {"profiles": [{"match": {"model": "x"}}]}}, hostname=lambda: "n")
    assert "policy.profiles[0].name: required" in str(err.value)
