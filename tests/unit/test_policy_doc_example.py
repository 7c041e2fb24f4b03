"""docs/policy.md's worked example (a mixed fleet) says what each target gets: its YAML, loaded as a
config, gives exactly the profiles of its table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from vllm_guardian.config.loader import parse_config
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.policy.profiles import TargetFacts, select

DOC = Path(__file__).resolve().parents[2] / "docs" / "policy.md"


def example_policy():
    text = DOC.read_text()
    block = re.search(r"### A worked example.*?```yaml\n(.*?)```", text, re.S)
    assert block, "docs/policy.md lost its worked example"
    return parse_config(yaml.safe_load(block.group(1)), hostname=lambda: "n").policy


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (
            TargetFacts(node="gpu-proven-7", target="llm", device_kind="nvidia", group="dp@10.0.7.1:13345"),
            "big-group-never",
        ),
        (
            TargetFacts(node="gpu-proven-7", target="llm", device_kind="nvidia", node_labels={"pool": "new"}),
            "new-nodes",
        ),
        (TargetFacts(node="gpu-proven-7", target="emb", device_kind="nvidia"), "proven"),
        (TargetFacts(node="gpu-proven-7x", target="emb", device_kind="nvidia"), "default"),
        (TargetFacts(node="npu-1", target="emb", device_kind="ascend"), "default"),
    ],
    ids=["big-group", "new-node", "proven", "full-match", "ascend"],
)
def test_the_worked_example_gives_each_target_its_documented_profile(facts, expected):
    assert select(example_policy(), facts).name == expected


def test_in_the_worked_example_the_big_group_only_alerts_and_new_nodes_only_observe():
    policy = example_policy()
    big = select(policy, TargetFacts(node="gpu-proven-7", target="llm", group="dp@10.0.7.1:13345"))
    new = select(policy, TargetFacts(node="gpu-new-1", target="llm", node_labels={"pool": "new"}))
    assert big.mode_for("busy_loop", Mode.REMEDIATE) is Mode.ALERT
    assert new.mode_for("engine_dead", Mode.REMEDIATE) is Mode.OBSERVE
