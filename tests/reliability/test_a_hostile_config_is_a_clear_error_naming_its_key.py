"""Fault 17: hostile numbers, an empty state_dir, deep nesting and alias bombs in the config are
clear errors naming the key path (or the line), never an overflow, a spin, a RecursionError or
a minute of CPU."""

from __future__ import annotations

import pytest

from vllm_guardian.config.loader import load_yaml, parse_config
from vllm_guardian.errors import ConfigError


def problems(data) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return str(info.value)


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"interval": 1e300}, "interval: "),
        ({"interval": 1e-9}, "interval: "),
        ({"alerts": {"stream_maxlen": 10**30}}, "alerts.stream_maxlen: "),
        ({"policy": {"fleet": {"lease_ttl": 1e30}}}, "policy.fleet.lease_ttl: "),
        ({"alerts": {"renotify_interval": 1e200}}, "alerts.renotify_interval: "),
        ({"probes": {"vllm_http": {"timeout": 1e20}}}, "probes.vllm_http.timeout: "),
        ({"alerts": {"spool": {"max_bytes": 10**40}}}, "alerts.spool.max_bytes: "),
        ({"state_dir": ""}, "state_dir: "),
        ({"state_dir": "   "}, "state_dir: "),
    ],
)
def test_out_of_range_values_name_their_key(data, expected):
    assert expected in problems(data)


def test_defaults_stay_valid():
    parse_config({})


def test_deeply_nested_yaml_is_refused_with_the_line():
    text = "a: " + "[" * 5000 + "]" * 5000 + "\n"
    with pytest.raises(ConfigError, match="nested deeper than"):
        load_yaml(text, "g.yaml")


def test_deeply_nested_block_yaml_is_refused():
    text = "".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v: 1\n"
    with pytest.raises(ConfigError, match="nested deeper than"):
        load_yaml(text, "g.yaml")


def test_an_alias_bomb_is_refused_quickly():
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    for i, name in enumerate("bcdefghij"):
        prev = "abcdefghij"[i]
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]")
    lines.append("targets: *j")
    with pytest.raises(ConfigError, match="aliases expand"):
        load_yaml("\n".join(lines) + "\n", "g.yaml")


def test_a_recursive_alias_is_refused():
    with pytest.raises(ConfigError, match="refers to itself"):
        load_yaml("a: &a [*a]\n", "g.yaml")


def test_a_merge_key_of_a_shared_block_still_works():
    data = load_yaml("base: &b {x: 1}\nt: {<<: *b, y: 2}\n", "g.yaml")
    assert data["t"] == {"x": 1, "y": 2}


def test_a_control_character_is_a_config_error_not_a_reader_traceback():  # found by the fuzzer
    with pytest.raises(ConfigError, match="g.yaml"):
        load_yaml("\x08", "g.yaml")
