"""The gates' config: strict, every problem named by its key path; the defaults are the contract's."""

from __future__ import annotations

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.errors import ConfigError


def problems(data) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse_config(data, hostname=lambda: "n")
    return e.value.problems


def test_the_defaults_are_the_fixed_names():
    g = parse_config({}, hostname=lambda: "n").gates
    assert (g.enabled, g.interval, g.shadow, g.reference_text) == (False, 60.0, True, None)
    assert (g.reports_channel, g.control_channel) == ("vllm_health_alert", "vllm_control")
    assert [(d.prompt, d.expect, d.max_tokens) for d in g.diagnostics] == [("1+1=", r"^\s*2", 4)]
    oc = parse_config({}, hostname=lambda: "n").detectors.output_corruption
    assert (oc.mode, oc.l1_l2_failures, oc.l1_l2_window, oc.l4_rounds, oc.l5_rounds) == (Mode.ALERT, 5, 60.0, 3, 3)


def test_expect_baseline_and_a_regex_are_both_accepted():
    g = parse_config(
        {
            "gates": {
                "diagnostics": [
                    {"prompt": "a", "expect": "baseline"},
                    {"prompt": "b", "expect": "^x+$", "max_tokens": 2},
                ]
            }
        },
        hostname=lambda: "n",
    ).gates
    assert [d.expect for d in g.diagnostics] == ["baseline", "^x+$"]


@pytest.mark.parametrize(
    "data, line",
    [
        ({"gates": {"interval": 0}}, "gates.interval: expected a number > 0, got 0"),
        (
            {"gates": {"diagnostics": [{"prompt": "a", "expect": "("}]}},
            'gates.diagnostics[0].expect: expected the word "baseline" or a valid regular expression, got "("',
        ),
        ({"gates": {"diagnostics": [{"expect": "x"}]}}, "gates.diagnostics[0].prompt: required"),
        ({"gates": {"enabled": "yes"}}, 'gates.enabled: expected true or false, got "yes"'),
        ({"gates": {"min_top1": 2}}, "gates.min_top1: expected a number between 0 and 1, got 2"),
        ({"gates": {"shadow_prompts": "x"}}, 'gates.shadow_prompts: expected a list of strings, got "x"'),
        (
            {"detectors": {"output_corruption": {"l4_rounds": 0}}},
            "detectors.output_corruption.l4_rounds: expected an integer > 0, got 0",
        ),
        ({"gates": {"intervall": 5}}, "gates.intervall: unknown key"),
    ],
)
def test_bad_gates_config_names_the_key_path(data, line):
    assert any(p.startswith(line) for p in problems(data)), problems(data)
