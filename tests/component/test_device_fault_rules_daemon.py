"""``policy.device_fault_rules`` through the whole daemon: the real NVML backend over the fake NVML
reports Xid 79 on the GPU the engine holds memory on; the configured rule, not the catalog, decides
the device's incident and whether the server's restart is refused, and a reload's rule takes over."""

from __future__ import annotations

import dataclasses

from vllm_guardian.config.loader import parse_config
from vllm_guardian.loop.reload import apply_config
from vllm_guardian.model import Kind, Severity
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_nvml import FakeNvmlBackend
from tests.support.daemon_world import ENGINE, World

SCENARIO = {
    "devices": [{"memory_total": 8e10, "processes": [{"pid": ENGINE, "memory": 2e10}]}],
    "xid": [{"at": 6, "device": 0, "code": 79}],
}


def test_an_annotate_rule_makes_xid_79_a_warning_that_refuses_nothing_until_a_reload_says_refuse(tmp_path):
    clock = FakeClock()
    rules = {"policy": {"device_fault_rules": [{"code": "xid:79", "action": "annotate"}]}}
    w = World(tmp_path, rules, accel_backends=[FakeNvmlBackend(SCENARIO, clock=clock)], clock=clock)
    try:
        opened = [t.incident for _ in range(10) for t in w.step() if t.previous is None]
        (dev,) = [i for i in opened if i.kind is Kind.ACCEL_FAULT]
        assert dev.target.name == "nvml:0" and dev.signals["code"] == "xid:79"
        assert dev.severity is Severity.WARNING and dev.signals["rule"] == "annotate"
        assert dev.signals["blocks_restart"] is False
        ledger, now = w.d.readings.device_faults, clock.monotonic()
        (target,) = w.d.tracker.targets
        assert ledger.blocking(target, now) == []

        refuse = {"code": "xid:79", "action": "refuse_restart"}
        policy = parse_config({"node": "n1", "policy": {"device_fault_rules": [refuse]}}).policy
        new = dataclasses.replace(w.cfg, policy=policy)
        assert "policy" in apply_config(w.d, new).applied
        check = w.d.remediator.parts.pre_restart_check
        assert check is not None and check.judge() is ledger.judge  # the device check judges by them too
        w.step()
        assert [f.code for f in ledger.blocking(target, clock.monotonic())] == ["xid:79"]
        assert w.d.status().to_dict()["device_faults"]["nvml:0"]["worst"]["rule"] == "refuse_restart"
    finally:
        w.d.runner.shutdown()
