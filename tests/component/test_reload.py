"""A config reload applied to a running daemon in place: what changed is applied, what needs a
restart is kept and named, and nothing the daemon knows is lost (tracker, incidents, probes
that hold start-up state)."""

from __future__ import annotations

import pytest

from tests.support.daemon_world import World
from vllm_guardian.config.loader import parse_config
from vllm_guardian.loop.reload import apply_config, changed_sections
from vllm_guardian.config.schema_fields import Mode


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    yield w
    w.d.runner.shutdown()


def new_config(w: World, data: dict):
    base = {"node": "n1", "state_dir": w.cfg.state_dir, "api": {"http": None}}
    return parse_config(base | data)


def test_new_thresholds_apply_and_what_the_tracker_knows_stays(world):
    world.step(4)
    assert world.target()["ready"]
    res = apply_config(world.d, new_config(world, {"detectors": {"busy_loop": {"mode": "alert"}}}))
    assert res.applied == ("detectors",) and res.needs_restart == ()
    assert world.d.cfg.detectors.busy_loop.mode is Mode.ALERT
    assert world.d.responder.detectors.busy_loop.mode is Mode.ALERT
    assert world.target()["ready"]  # not warming up again
    world.step(2)
    assert world.target()["phase"] == "serving"


def test_sections_wired_at_start_up_are_kept_and_named(world):
    res = apply_config(world.d, new_config(world, {"node": "n2", "interval": 2.0, "lifecycle": {"max_pause": 5.0}}))
    assert set(res.needs_restart) == {"node", "interval"} and res.applied == ("lifecycle",)
    assert (world.d.cfg.node, world.d.cfg.interval) == ("n1", 1.0)
    assert world.d.tracker.lifecycle.max_pause == 5.0
    assert "kept until a restart: node, interval" in res.summary()


def test_probes_are_rebuilt_in_table_order_and_the_accelerator_probe_is_never_built_twice(world):
    before = {p.name: p for p in world.d.probes.probes}
    apply_config(world.d, new_config(world, {"probes": {"canary": {"timeout": 9.0}}}))
    after = {p.name: p for p in world.d.probes.probes}
    assert list(after) == list(before)
    assert after["canary"] is not before["canary"] and after["canary"].cfg.timeout == 9.0
    assert all(after[n] is before[n] for n in ("accel", "gates") if n in before)


def test_an_unchanged_config_changes_nothing(world):
    probes = list(world.d.probes.probes)
    res = apply_config(world.d, world.cfg)
    assert res.changed == () and res.summary() == "config unchanged"
    assert world.d.probes.probes == probes


def test_changed_sections_name_top_level_keys():
    a = parse_config({"node": "n"})
    b = parse_config({"node": "n", "policy": {"dry_run": True}})
    assert changed_sections(a, b) == ("policy",)
