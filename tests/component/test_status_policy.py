"""`guardian status` says which profile each target is remediated under and, when it was started
with a known bug's workaround, which (docs/policy.md)."""

from __future__ import annotations

import pytest

from vllm_guardian.diagnosis.workaround import Workaround
from vllm_guardian.policy.workaround import Applied, WorkaroundState
from vllm_guardian.surface.status_render import render_status
from tests.support.daemon_world import World

PROFILES = {
    "profiles": [{"name": "new-nodes", "match": {"node": "nobody"}}, {"name": "all", "match": {"target": ".*"}}]
}


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path, {"policy": PROFILES})
    yield w
    w.d.runner.shutdown()


def test_status_names_the_first_profile_that_matches_each_target(world):
    world.step(2)
    assert world.target()["profile"] == "all"
    assert "  profile: all" in render_status(world.d.status()).splitlines()


def test_status_shows_a_target_running_with_a_workaround_until_it_is_cleared(world):
    world.step(2)
    name = world.target()["name"]
    assert world.target()["workaround"] is None
    wa = Workaround(("--mm-processor-cache-gb", "0"), (("VLLM_X", "1"),))
    WorkaroundState(world.d.cfg.state_dir).record(Applied(name, "vllm-mm-cache-lru-busy-loop", wa, "inc-7", 1.0))
    world.step(1)
    shown = world.target()["workaround"]
    assert shown["args"] == ["--mm-processor-cache-gb", "0"] and shown["incident"] == "inc-7"
    assert (
        "  running with a workaround: --mm-processor-cache-gb 0 VLLM_X=1 (vllm-mm-cache-lru-busy-loop, since incident "
        "inc-7)" in render_status(world.d.status()).splitlines()
    )
    WorkaroundState(world.d.cfg.state_dir).clear(name)
    world.step(1)
    assert world.target()["workaround"] is None


BY_LABELS = {
    "profiles": [
        {"name": "new-nodes", "match": {"node_labels": {"pool": "new"}}, "modes": {"*": "observe"}},
        {"name": "proven", "match": {"node_labels": {"pool": "proven"}}},
    ]
}


@pytest.mark.parametrize(
    ("labels", "profile"),
    [({"pool": "new", "zone": "a"}, "new-nodes"), ({"pool": "proven"}, "proven"), ({}, "default")],
    ids=["new-node", "proven-node", "unlabelled-node"],
)
def test_status_names_the_profile_the_nodes_labels_choose(tmp_path, labels, profile):
    w = World(tmp_path, {"node_labels": labels, "policy": BY_LABELS})
    try:
        w.step(2)
        assert w.target()["profile"] == profile
        assert f"  profile: {profile}" in render_status(w.d.status()).splitlines()
    finally:
        w.d.runner.shutdown()


def test_a_reload_with_new_node_labels_moves_the_target_to_their_profile(tmp_path):
    import dataclasses

    from vllm_guardian.loop.reload import apply_config

    w = World(tmp_path, {"node_labels": {"pool": "new"}, "policy": BY_LABELS})
    try:
        w.step(2)
        assert w.target()["profile"] == "new-nodes"
        assert "node_labels" in apply_config(w.d, dataclasses.replace(w.cfg, node_labels={"pool": "proven"})).applied
        w.step(1)
        assert w.target()["profile"] == "proven"
    finally:
        w.d.runner.shutdown()


def test_status_names_the_profile_the_servers_data_parallel_group_chooses(tmp_path):
    """The group is the one the API server's data-parallel flags name, as every member derives it
    (read for a configured target, each tick, like its model)."""
    from tests.support.daemon_world import API

    policy = {
        "profiles": [{"name": "big-group-never", "match": {"group": r"dp@10\.0\.0\.5:.*"}, "modes": {"*": "alert"}}]
    }
    w = World(
        tmp_path,
        {
            "policy": policy,
            "autodiscover": False,
            "targets": [{"name": "llm", "match": {"cmdline_regex": "api_server"}}],
        },
    )
    dp = ("--data-parallel-size", "2", "--data-parallel-address", "10.0.0.5", "--data-parallel-rpc-port", "13345")
    w.proc.add_process(API, 1, ("python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000", *dp))
    try:
        w.step(2)
        assert w.target()["profile"] == "big-group-never"
    finally:
        w.d.runner.shutdown()
