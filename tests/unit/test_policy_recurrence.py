"""Escalate on recurrence (docs/policy.md): the same fault soon after a verified restart is escalated,
or restarted with the catalog's workaround when the profile allows it and the method owns the argv."""

from __future__ import annotations

import pytest

from vllm_guardian.config.schema_policy import RecurrenceConfig
from vllm_guardian.policy.recurrence import VerifiedRestart, judge

BUSY = VerifiedRestart("inc-1", "busy_loop", "vllm-mm-lru-busy-loop", at=1000.0)
PLAIN = RecurrenceConfig(window=600.0)
ALLOW = RecurrenceConfig(window=600.0, apply_workaround=True)


@pytest.mark.parametrize(
    ("cfg", "history", "kind", "signature", "now", "method", "has_wa", "action"),
    [
        (PLAIN, [], "busy_loop", None, 1100.0, "command", True, "restart"),
        (PLAIN, [BUSY], "busy_loop", "vllm-mm-lru-busy-loop", 1100.0, "command", True, "escalate"),
        (PLAIN, [BUSY], "busy_loop", None, 1100.0, "command", True, "escalate"),
        (PLAIN, [BUSY], "busy_loop", "other-signature", 1100.0, "command", True, "restart"),
        (PLAIN, [BUSY], "engine_stall", None, 1100.0, "command", True, "restart"),
        (PLAIN, [BUSY], "engine_stall", "vllm-mm-lru-busy-loop", 1100.0, "command", True, "escalate"),
        (PLAIN, [BUSY], "busy_loop", None, 1700.0, "command", True, "restart"),
        (ALLOW, [BUSY], "busy_loop", "vllm-mm-lru-busy-loop", 1100.0, "command", True, "workaround"),
        (ALLOW, [BUSY], "busy_loop", "vllm-mm-lru-busy-loop", 1100.0, "systemd", True, "workaround"),
        (ALLOW, [BUSY], "busy_loop", "vllm-mm-lru-busy-loop", 1100.0, "kubernetes", True, "escalate"),
        (ALLOW, [BUSY], "busy_loop", "vllm-mm-lru-busy-loop", 1100.0, "command", False, "escalate"),
    ],
    ids=[
        "first-incident-restarts",
        "same-kind-and-signature-escalates",
        "unmatched-signature-still-same-kind",
        "different-signature-restarts",
        "different-kind-restarts",
        "same-signature-under-another-kind-escalates",
        "after-the-window-restarts",
        "workaround-allowed-command",
        "workaround-allowed-systemd",
        "never-on-kubernetes",
        "no-workaround-in-catalog",
    ],
)
def test_recurrence_verdict(cfg, history, kind, signature, now, method, has_wa, action):
    v = judge(
        cfg, history=history, kind=kind, signature=signature, now=now, restart_method=method, has_workaround=has_wa
    )
    assert v.action == action


def test_an_escalation_links_the_incident_it_repeats():
    v = judge(
        PLAIN,
        history=[BUSY],
        kind="busy_loop",
        signature=None,
        now=1100.0,
        restart_method="command",
        has_workaround=False,
    )
    assert v.previous == "inc-1" and "recurring busy_loop" in v.reason and "no second blind restart" in v.reason


def test_kubernetes_recurrence_says_a_patch_is_proposed_instead():
    v = judge(
        ALLOW,
        history=[BUSY],
        kind="busy_loop",
        signature=None,
        now=1100.0,
        restart_method="kubernetes",
        has_workaround=True,
    )
    assert "patch proposed" in v.reason
