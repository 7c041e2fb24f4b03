"""One readiness verdict for GET /targets/<name>/ready and the Kubernetes readiness gate: what
takes a target out of rotation, and the reason it gives, in the order they win."""

from __future__ import annotations

from typing import Any

import pytest

from vllm_guardian.surface.readiness import readiness

UP: dict[str, Any] = {"phase": "serving", "remediator_serving": True, "api_alive": True, "ready": True}


@pytest.mark.parametrize(
    "change, serving, reason",
    [
        ({}, True, "Serving"),
        ({"ready": False}, False, "Warming"),
        ({"api_alive": False}, False, "NotServing"),
        ({"takes_out": ("busy_loop", "01ABC")}, False, "IncidentOpen"),
        ({"hold": "paused"}, False, "Paused"),
        ({"hold": "sleeping"}, False, "Sleeping"),
        ({"phase": "draining", "remediator_serving": False}, False, "Draining"),
        ({"phase": "stopping", "remediator_serving": False, "api_alive": False}, False, "Stopping"),
        ({"phase": "starting", "remediator_serving": False, "api_alive": False}, False, "Starting"),
        ({"phase": "verifying", "remediator_serving": False, "ready": False}, False, "Verifying"),
        ({"phase": "failed", "remediator_serving": False}, False, "RestartFailed"),
        ({"phase": "serving", "remediator_serving": False}, False, "Drained"),
        # a restart in progress says so even while the incident that caused it is still open
        ({"phase": "draining", "remediator_serving": False, "takes_out": ("busy_loop", "1")}, False, "Draining"),
        # warming wins over an incident: the message says what to wait for first
        ({"ready": False, "takes_out": ("busy_loop", "1")}, False, "Warming"),
    ],
)
def test_the_verdict_and_its_reason(change, serving, reason):
    verdict = readiness("llama", **{**UP, **change})
    assert (verdict.serving, verdict.reason) == (serving, reason)
    assert verdict.message.startswith("llama: ")


def test_the_incident_is_named_in_the_message():
    verdict = readiness("llama", **UP, takes_out=("busy_loop", "01ABC"))
    assert "busy_loop incident 01ABC" in verdict.message
