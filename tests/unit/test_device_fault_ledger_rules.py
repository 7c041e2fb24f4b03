"""The fault ledger judged by ``policy.device_fault_rules``: a configured rule's severity, count
within a window and action replace the catalog's when the daemon asks (the detector's finding, the
remediation's ``blocking``), and a reload's new rules take effect on the next question."""

from __future__ import annotations

import re

import pytest

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.config.schema_policy import DeviceFaultRule
from vllm_guardian.detectors import accel_fault
from vllm_guardian.host.accel import AccelEvent
from vllm_guardian.model import Severity
from vllm_guardian.policy.fault_rules import judge
from vllm_guardian.state.device_faults import DeviceFaults
from vllm_guardian.surface.kube_publisher import _taints

CFG = DetectorsConfig()
WALL = 1_790_000_000.0
DEV = "nvml:0"


def ledger(rules, xids, *, taint_allowed=False):
    """A ledger with ``rules`` that saw each ``(at, xid)`` on nvml:0, which the server ``llm`` runs on."""
    led = DeviceFaults(900.0, judge=judge(tuple(rules), taint_allowed))
    led.target_devices["llm"] = {DEV}
    for at, xid in xids:
        led.record_event(AccelEvent(DEV, "xid", xid, f"XID {xid}"), at, WALL + at)
    return led


def outcome(led, now):
    """(finding severity or None, restart blocked, rule shown in status)."""
    f = accel_fault.evaluate(led.view(DEV, now), CFG)
    blocked = bool(led.blocking("llm", now))
    rule = led.status_section(now)[DEV].worst.rule
    return (None if f is None else f.severity, blocked, rule)


@pytest.mark.parametrize(
    ("rules", "xids", "now", "expected"),
    [
        ((), [(10, 79)], 11, (Severity.CRITICAL, True, "")),
        ([DeviceFaultRule(code="xid:79", action="annotate")], [(10, 79)], 11, (Severity.WARNING, False, "annotate")),
        ([DeviceFaultRule(code="xid:79", action="alert")], [(10, 79)], 11, (Severity.CRITICAL, False, "alert")),
        ([DeviceFaultRule(code="xid:13", count=3, window=60)], [(10, 13), (40, 13)], 41, (None, False, "none")),
        (
            [DeviceFaultRule(code="xid:13", count=3, window=60, action="refuse_restart")],
            [(10, 13), (40, 13), (60, 13)],
            61,
            (Severity.WARNING, True, "refuse_restart"),  # xid:13 is a catalog warning
        ),
        (
            [DeviceFaultRule(code="xid:13", count=3, window=60, action="refuse_restart")],
            [(0, 13), (40, 13), (70, 13)],
            71,
            (None, False, "none"),
        ),
        (
            [DeviceFaultRule(code="xid:*", severity="warning", action="refuse_restart")],
            [(10, 31)],
            11,
            (Severity.WARNING, True, "refuse_restart"),
        ),
    ],
    ids=[
        "no-rule-catalog-default-blocks",
        "fatal-xid-annotate-only",
        "fatal-xid-alert-does-not-block",
        "two-of-three-not-counted",
        "three-in-60s-refuses-restart",
        "three-but-not-within-60s",
        "family-rule-refuses-a-warning",
    ],
)
def test_a_configured_rule_replaces_the_catalog_default(rules, xids, now, expected):
    assert outcome(ledger(rules, xids), now) == expected


def test_taint_needs_the_opt_in_and_a_refuse_restart_rule_never_taints():
    taint = [DeviceFaultRule(code="xid:79", action="taint")]
    opted = ledger(taint, [(10, 79)], taint_allowed=True).view(DEV, 11)
    plain = ledger(taint, [(10, 79)]).view(DEV, 11)
    refuse = ledger([DeviceFaultRule(code="xid:79", action="refuse_restart")], [(10, 79)]).view(DEV, 11)
    findings = [accel_fault.evaluate(v, CFG) for v in (opted, plain, refuse)]
    signals = [f.signals for f in findings if f is not None]
    assert [s["rule"] for s in signals] == ["taint", "refuse_restart", "refuse_restart"]
    assert [_taints("critical", s) for s in signals] == [True, False, False]
    assert _taints("critical", {"rule": ""}) is True  # the catalog's own blocking fault, as before


def test_a_reload_judges_what_was_recorded_by_the_new_rules():
    led = ledger([], [(10, 79)])
    assert outcome(led, 11)[:2] == (Severity.CRITICAL, True)
    led.configure(judge((DeviceFaultRule(code="xid:79", action="annotate"),), False))
    assert outcome(led, 12)[:2] == (Severity.WARNING, False)
    led.configure(judge((), False))
    assert outcome(led, 13)[:2] == (Severity.CRITICAL, True)


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ({"code": "xid:79", "action": "reboot"}, "policy.device_fault_rules[0].action: expected one of"),
        ({"code": "xid:79", "count": 0}, "policy.device_fault_rules[0].count: expected an integer > 0"),
        ({"code": "xid:79", "count": 10**9}, "policy.device_fault_rules[0].count: expected at most 64"),
        ({"code": "xid:79", "window": 1e12}, "policy.device_fault_rules[0].window: expected at most"),
        ({"code": "xid:79", "severity": "fatal"}, "policy.device_fault_rules[0].severity: expected one of"),
        ({"code": ""}, "policy.device_fault_rules[0].code: expected a device-fault code"),
        ({"code": "xid:79\nxid:13"}, "policy.device_fault_rules[0].code: expected a device-fault code"),
        ({"code": "x" * 65}, "policy.device_fault_rules[0].code: expected a device-fault code"),
        ({"action": "alert"}, "policy.device_fault_rules[0].code: required"),
    ],
    ids=[
        "action",
        "count-zero",
        "count-never-reachable",
        "window",
        "severity",
        "empty-code",
        "newline",
        "long",
        "no-code",
    ],
)
def test_a_hostile_rule_is_refused_with_its_key_path(rule, problem):
    from vllm_guardian.config.loader import parse_config
    from vllm_guardian.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(problem)):
        parse_config({"node": "n1", "policy": {"device_fault_rules": [rule]}})


@pytest.mark.parametrize(
    ("rules", "blocked"),
    [
        ((), True),  # the catalog: an NPU alarm refuses the restart
        ((DeviceFaultRule(code="npu_health:Alarm", action="alert"),), False),
        ((DeviceFaultRule(code="npu_health:*", action="annotate"),), False),
        ((DeviceFaultRule(code="npu_health:Alarm", count=2, window=60),), False),  # a condition counts once
    ],
    ids=["catalog", "exact-code-alerts", "family-annotates", "count-not-reached"],
)
def test_an_npu_health_code_read_as_a_condition_is_judged_by_its_rule(rules, blocked):
    from types import SimpleNamespace

    led = DeviceFaults(900.0, judge=judge(rules, False))
    alarm = {"code": "npu_health:Alarm", "detail": "npu-smi: Health Alarm"}
    dev = {"name": "Ascend 910B", "backend": "npu_smi", "conditions": [alarm]}
    reading = SimpleNamespace(devices={"npu:0.0": dev}, events=[], per_target={"llm": [{"device": "npu:0.0"}]})
    led.fold(reading, 5, WALL + 5)
    assert bool(led.blocking("llm", 6)) is blocked
