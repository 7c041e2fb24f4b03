"""Per-code device-fault rules (docs/policy.md): catalog defaults, config overrides per code or family,
a count within a window before a code counts, taint only when opted in."""

from __future__ import annotations

import pytest

from vllm_guardian.config.schema_policy import DeviceFaultRule
from vllm_guardian.detectors.device_catalog import shipped
from vllm_guardian.policy.fault_rules import decide, describe

CATALOG = shipped()

RULES = (
    DeviceFaultRule(code="xid:13", severity="critical", count=3, window=60.0, action="refuse_restart"),
    DeviceFaultRule(code="xid:79", action="taint"),
    DeviceFaultRule(code="xid:*", count=2, window=300.0, action="alert"),
    DeviceFaultRule(code="npu_health:Warning", action="alert"),
)


@pytest.mark.parametrize(
    ("code", "seen_at", "taint_allowed", "action", "source"),
    [
        ("xid:79", [990.0], False, "refuse_restart", "config"),
        ("xid:79", [990.0], True, "taint", "config"),
        ("xid:13", [950.0, 980.0], False, "none", "config"),
        ("xid:13", [950.0, 970.0, 990.0], False, "refuse_restart", "config"),
        ("xid:13", [900.0, 970.0, 990.0], False, "none", "config"),
        ("xid:31", [990.0], False, "none", "config"),
        ("xid:31", [800.0, 990.0], False, "alert", "config"),
        ("npu_health:Warning", [990.0], False, "alert", "config"),
        ("npu_health:Alarm", [990.0], False, "refuse_restart", "catalog"),
        ("throttle:hw_slowdown", [990.0], False, "annotate", "catalog"),
    ],
    ids=[
        "taint-refused-without-opt-in",
        "taint-when-opted-in",
        "below-count-not-counted",
        "count-reached-in-window",
        "old-occurrence-outside-window",
        "family-rule-count-2",
        "family-rule-reached",
        "npu-health-override",
        "npu-catalog-default",
        "warning-annotates-by-default",
    ],
)
def test_device_fault_rule(code, seen_at, taint_allowed, action, source):
    d = decide(CATALOG.lookup(code), RULES, code=code, seen_at=seen_at, now=1000.0, taint_allowed=taint_allowed)
    assert (d.action, d.source) == (action, source)


def test_an_exact_code_wins_over_its_family():
    d = decide(CATALOG.lookup("xid:13"), RULES, code="xid:13", seen_at=[999.0], now=1000.0, taint_allowed=False)
    assert not d.counted  # xid:13 needs 3, the family would have needed 2 and alerted


def test_check_config_lists_each_rule():
    assert describe(RULES)[0] == "xid:13: severity critical, 3 within 60s, action refuse_restart"
    assert describe(RULES)[2] == "xid:*: severity catalog, 2 within 300s, action alert"
    assert describe(RULES)[1] == "xid:79: severity catalog, 1 within 600s, action taint"
