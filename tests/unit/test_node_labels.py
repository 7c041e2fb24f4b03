"""The node's labels (top-level ``node_labels``) reach the facts a policy profile matches on, and a
hostile label is refused with its key path (docs/policy.md, Profiles; docs/security.md)."""

from __future__ import annotations

import re

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.errors import ConfigError
from vllm_guardian.policy.profiles import select
from vllm_guardian.remediation.settings import RemediationSettings

PROFILES = [
    {"name": "new-nodes", "match": {"node_labels": {"pool": "new"}}},
    {"name": "gpu-a100", "match": {"node_labels": {"example.com/gpu": "a100", "pool": "proven"}}},
]


@pytest.mark.parametrize(
    ("labels", "profile"),
    [
        ({"pool": "new"}, "new-nodes"),
        ({"pool": "proven", "example.com/gpu": "a100"}, "gpu-a100"),
        ({"pool": "proven"}, "default"),  # every label of the match must be there
        ({}, "default"),
    ],
    ids=["one-label", "all-labels", "one-label-missing", "no-labels"],
)
def test_the_configured_labels_choose_the_profile(labels, profile):
    cfg = parse_config({"node": "n1", "node_labels": labels, "policy": {"profiles": PROFILES}})
    facts = RemediationSettings.from_config(cfg).facts("llm")
    assert facts.node_labels == labels and select(cfg.policy, facts).name == profile


@pytest.mark.parametrize(
    ("labels", "problem"),
    [
        ({"pool": 1}, "node_labels.pool: expected a string"),
        ({"pool": "x y"}, "node_labels.pool: expected a label value"),
        ({"pool": "v" * 64}, "node_labels.pool: expected a label value"),
        ({"bad key": "x"}, "node_labels.bad key: expected a label key"),
        ({"Example.com/pool": "x"}, "node_labels.Example.com/pool: expected a label key"),
        ({"k" * 300: "x"}, "node_labels." + "k" * 37 + "...: expected a label key"),
        ({f"k{i}": "v" for i in range(65)}, "node_labels: at most 64 labels"),
        ("pool=new", "node_labels: expected a mapping of strings to strings"),
    ],
    ids=["not-a-string", "space", "too-long-value", "bad-key", "upper-prefix", "huge-key", "too-many", "not-a-map"],
)
def test_a_hostile_node_label_is_refused_with_its_key_path(labels, problem):
    with pytest.raises(ConfigError, match=re.escape(problem)):
        parse_config({"node": "n1", "node_labels": labels})


DP_FLAGS = ("--data-parallel-size", "4", "--data-parallel-address", "10.0.0.5", "--data-parallel-rpc-port", "13345")


@pytest.mark.parametrize(
    ("argv", "group"),
    [
        (("vllm", "serve", "m", *DP_FLAGS), "dp@10.0.0.5:13345"),
        (("vllm", "serve", "m"), None),  # one process: no group
        (("vllm", "serve", "m", "--distributed-executor-backend", "ray"), None),  # Ray's group is not read
        (("vllm", "serve", "m", "--data-parallel-size", "many"), None),  # flags that do not parse
        (("vllm", "serve", "m", "--data-parallel-size", "2", "--data-parallel-rpc-port", "99999"), None),
    ],
    ids=["data-parallel", "single", "ray", "unparsable-size", "port-out-of-range"],
)
def test_a_targets_group_is_the_data_parallel_group_its_flags_name(argv, group):
    from vllm_guardian.model import ProcessInfo, ProcKey, Role, Target
    from vllm_guardian.remediation.target_policy import target_group

    key = ProcKey(100, 1)
    target = Target("llm", key, (ProcessInfo(key, 1, Role.API_SERVER, argv),))
    assert target_group(target) == group
