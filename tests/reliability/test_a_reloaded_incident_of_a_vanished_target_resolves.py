"""Fault 13: a firing incident reloaded at start-up whose target no longer exists (neither
configured nor discovered) resolves after ``discovery.forget_after``, like a target that
vanished under a running guardian; it is not re-notified forever."""

from __future__ import annotations

import logging

from vllm_guardian.config.loader import parse_config
from vllm_guardian.loop.runtime import build_daemon
from vllm_guardian.seams import Seams
from vllm_guardian.incidents import IncidentStore
from vllm_guardian.model import Incident, Kind, Severity, Status, TargetRef
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_http import FakeHttp
from vllm_guardian.testing.fake_proc import FakeProcTree
from vllm_guardian.testing.fake_control import FakeControl
from vllm_guardian.testing.fake_runner import FakeRunner

ID = "01HF7Z9GDG0TRA5GW6MSKGM012"


def test_a_reloaded_incident_of_a_target_that_is_gone_resolves(tmp_path):
    cfg = parse_config(
        {"node": "n1", "state_dir": str(tmp_path / "state"), "api": {"http": None}, "discovery": {"forget_after": 30}}
    )
    store = IncidentStore(cfg.state_dir)
    store.save(
        Incident(
            ID,
            Kind.BUSY_LOOP,
            Severity.CRITICAL,
            "n1",
            TargetRef("ghost", 10, 20, 8000, "m", "engine_core"),
            Status.FIRING,
            "spins",
            1.7e9,
        )
    )
    clock = FakeClock()
    d = build_daemon(
        cfg,
        Seams(clock, FakeProcTree(tmp_path / "proc").procfs(), FakeHttp({}), FakeRunner(), FakeControl(set())),
        log=logging.getLogger("t"),
    )
    transitions = []
    try:
        assert [i.id for i in d.incidents.open_incidents()] == [ID]
        for _ in range(10):
            clock.advance(1.0)
            transitions += d.tick()
        assert [i.id for i in d.incidents.open_incidents()] == [ID]  # not before forget_after
        for _ in range(30):
            clock.advance(1.0)
            transitions += d.tick()
        assert d.incidents.open_incidents() == []
        loaded = store.load(ID)
        assert loaded is not None and loaded.status is Status.RESOLVED
    finally:
        d.runner.shutdown()
