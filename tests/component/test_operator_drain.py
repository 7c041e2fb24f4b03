"""An operator's drain through the daemon: ``guardian drain`` (the control socket's request) takes a
server out of rotation; its spinning engine opens no ``busy_loop`` while drained (status and the
phase metric say ``drained``); after ``guardian undrain`` and ``lifecycle.resume_grace`` it does.
Maintenance keeps detection on and says, per target, that remediation is off."""

from __future__ import annotations

import time

import pytest

from vllm_guardian.host.http import HttpError
from vllm_guardian.model import Kind
from vllm_guardian.remediation.policy import Maintenance
from vllm_guardian.surface.exporter import GuardianCollector
from vllm_guardian.surface.status_render import render_status
from tests.support.daemon_world import World

GRACE = 10


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path, {"lifecycle": {"resume_grace": GRACE}})
    yield w
    w.d.runner.shutdown()


def opened(transitions) -> list[Kind]:
    return [t.incident.kind for t in transitions if t.previous is None]


def phase_metric(snapshot) -> list[str]:
    fams = {f.name: f for f in GuardianCollector(lambda: snapshot).collect()}
    return [s.labels["phase"] for s in fams["guardian_target_phase"].samples]


def test_a_spinning_engine_drained_by_the_operator_opens_no_busy_loop_until_the_grace_after_undrain(world):
    world.step(4)
    name = world.target()["name"]
    assert world.d.control_request({"cmd": "drain", "target": name}) == f"{name}: drain started"
    world.step(2)
    world.http.route("POST", "/v1/completions", HttpError("timeout", "no answer within 5s"))
    assert opened(world.step(40, spin=True)) == []  # a hot thread, a canary that never answers
    snapshot = world.d.status()
    assert snapshot.targets[0].phase == "drained" and phase_metric(snapshot) == ["drained"]
    assert world.d.control_request({"cmd": "undrain", "target": name}) == f"{name}: back in rotation"
    assert opened(world.step(GRACE - 1, spin=True)) == []  # the resume grace
    assert opened(world.step(20, spin=True)) == [Kind.BUSY_LOOP]


def test_maintenance_keeps_detection_on_and_says_per_target_that_remediation_is_off(world):
    world.step(2)
    assert world.target()["auto_remediation"] == "off (autodiscovered: no restart configured)"
    Maintenance(world.d.cfg.state_dir).turn_on(time.time(), 3600)
    world.step(1)
    assert world.target()["auto_remediation"] == "off (maintenance)"
    assert "remediation: off (maintenance); detection and alerts go on" in render_status(world.d.status())
    world.http.route("POST", "/v1/completions", HttpError("timeout", "no answer within 5s"))
    assert opened(world.step(20, spin=True)) == [Kind.BUSY_LOOP]  # a hang is never hidden
