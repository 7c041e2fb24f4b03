"""The gates' cost at a config, from a measured round time."""

from __future__ import annotations

import pytest

from vllm_guardian.config.schema import DiagnosticPromptConfig, GatesConfig
from vllm_guardian.config.schema_detectors import OutputCorruptionConfig
from vllm_guardian.gates.cost import confirmations, cost, requests_per_round
from vllm_guardian.gates.known_answers import BUILTIN_CHECKS


def test_the_defaults_cost_480_requests_an_hour():
    c = cost(GatesConfig(), round_server_seconds=0.5)
    builtin_tokens = sum(d.max_tokens for d in BUILTIN_CHECKS)
    assert requests_per_round(GatesConfig()) == 1 + len(BUILTIN_CHECKS) + 3 + 1 == 8
    assert (c.rounds_per_hour, c.requests_per_hour, c.generated_tokens_per_hour) == (
        60,
        480,
        60 * (4 + builtin_tokens + 3 * 8 + 1),
    )
    assert c.server_seconds_per_hour == pytest.approx(30.0) and c.share_of_capacity == pytest.approx(30 / 3600)


@pytest.mark.parametrize(
    "gates, per_round",
    [
        (GatesConfig(shadow=False), 5),
        (GatesConfig(shadow=False, builtin_checks=False), 2),
        (GatesConfig(diagnostics=()), 7),
        (GatesConfig(diagnostics=(DiagnosticPromptConfig("a"), DiagnosticPromptConfig("b"))), 9),
        (GatesConfig(diagnostics=(BUILTIN_CHECKS[0],)), 7),  # a built-in check configured is asked once
    ],
)
def test_requests_per_round_follow_the_config(gates, per_round):
    assert requests_per_round(gates) == per_round


def test_a_shorter_interval_costs_proportionally_more():
    ten_times = 10 * cost(GatesConfig(), 0.5).share_of_capacity
    assert cost(GatesConfig(interval=6.0), 0.5).share_of_capacity == pytest.approx(ten_times)


@pytest.mark.parametrize(
    "gates, oc, n",
    [
        (GatesConfig(), OutputCorruptionConfig(), 4),  # A needs 5 failures: the first round + 4
        (GatesConfig(), OutputCorruptionConfig(l1_l2_failures=2, l4_rounds=6), 5),
        (GatesConfig(confirm_rounds=0), OutputCorruptionConfig(), 0),
        (GatesConfig(confirm_rounds=2), OutputCorruptionConfig(), 2),
    ],
)
def test_confirmation_rounds_are_enough_for_the_conditions_unless_configured(gates, oc, n):
    assert confirmations(gates, oc) == n


def test_confirmations_cost_only_a_failing_episode_and_are_reported_beside_the_hourly_figure():
    c = cost(GatesConfig(), 0.5)
    assert (c.confirmations_per_episode, c.confirmation_server_seconds) == (4, pytest.approx(2.0))
    assert c.server_seconds_per_hour == pytest.approx(30.0)  # a healthy server never pays them
