"""probe_failure: a probe failing `after` times in a row is a finding; fewer, or a recovery, is not."""

from dataclasses import replace

import pytest

from vllm_guardian.config.schema_detectors import DetectorsConfig, ProbeFailureConfig
from vllm_guardian.detectors.probe_failure import evaluate_episodes
from vllm_guardian.model import Kind, Severity

CFG = replace(DetectorsConfig(), probe_failure=ProbeFailureConfig(after=5))


@pytest.mark.parametrize(
    "episodes, fires",
    [
        ({}, False),
        ({"llm:metrics": (4, "HTML page", 90.0)}, False),
        ({"llm:metrics": (5, "HTML page", 90.0)}, True),
        ({"llm:health": (2, "timeout", 99.0), "llm:canary": (9, "HTTP 500", 80.0)}, True),
    ],
)
def test_only_a_run_of_failures_at_the_threshold_fires(episodes, fires):
    f = evaluate_episodes("llm", episodes, CFG, now=100.0)
    assert (f is not None) == fires


def test_the_finding_names_the_worst_probe_and_is_a_warning():
    f = evaluate_episodes(
        "llm", {"llm:health": (6, "timeout", 95.0), "llm:canary": (9, "HTTP 500", 80.0)}, CFG, now=100.0
    )
    assert f is not None
    assert f.kind is Kind.PROBE_FAILURE and f.severity is Severity.WARNING
    assert f.signals["probe"] == "canary" and f.signals["consecutive_failures"] == 9
    assert f.signals["failing_probes"] == ["canary", "health"] and f.signals["failing_for_s"] == 20.0


def test_an_auth_episode_fires_from_its_first_failure():
    """A refused API key never heals by itself and blinds every hang confirmation."""
    f = evaluate_episodes("llm", {"llm:auth": (1, "HTTP 401 on /v1/completions: ...", 99.0)}, CFG, now=100.0)
    assert f is not None and f.signals["probe"] == "auth"
