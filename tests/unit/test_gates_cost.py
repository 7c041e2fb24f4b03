"""The gates' cost at a config, from a measured round time."""

from __future__ import annotations

import pytest

from vllm_guardian.config.schema import DiagnosticPromptConfig, GatesConfig
from vllm_guardian.gates.cost import cost, requests_per_round


def test_the_defaults_cost_300_requests_an_hour():
    c = cost(GatesConfig(), round_server_seconds=0.5)
    assert requests_per_round(GatesConfig()) == 5
    assert (c.rounds_per_hour, c.requests_per_hour, c.generated_tokens_per_hour) == (60, 300, 60 * (4 + 3 * 8 + 1))
    assert c.server_seconds_per_hour == pytest.approx(30.0) and c.share_of_capacity == pytest.approx(30 / 3600)


@pytest.mark.parametrize(
    "gates, per_round",
    [
        (GatesConfig(shadow=False), 2),
        (GatesConfig(diagnostics=()), 4),
        (GatesConfig(diagnostics=(DiagnosticPromptConfig("a"), DiagnosticPromptConfig("b"))), 6),
    ],
)
def test_requests_per_round_follow_the_config(gates, per_round):
    assert requests_per_round(gates) == per_round


def test_a_shorter_interval_costs_proportionally_more():
    ten_times = 10 * cost(GatesConfig(), 0.5).share_of_capacity
    assert cost(GatesConfig(interval=6.0), 0.5).share_of_capacity == pytest.approx(ten_times)
