"""Which restart modes exist is the methods table's to say: the config schema checks only that a
mode is a name, the table names the methods, and a config naming none of them is refused with its
key path when it is loaded (``guardian run``, ``guardian check``, a reload) and when assembled."""

from __future__ import annotations

import pytest

from vllm_guardian.cli.common import load_config
from vllm_guardian.config.loader import parse_config
from vllm_guardian.errors import ConfigError
from vllm_guardian.remediation.methods import METHODS, build_methods, method_names, restart_mode_problems

UNKNOWN = 'targets[1].restart.mode: expected one of systemd, command, kubernetes, signal, got "reboot"'


def config(*modes: str):
    return parse_config(
        {
            "node": "n1",
            "targets": [
                {"name": f"t{i}", "match": {"port": 8000 + i}, "restart": {"mode": m, "command": ["x"]}}
                for i, m in enumerate(modes)
            ],
        }
    )


def test_the_table_names_the_four_shipped_methods_and_builds_one_of_each():
    assert method_names() == ("systemd", "command", "kubernetes", "signal")
    assert {name: m.name for name, m in build_methods({}).items()} == {n: n for n in method_names()}


def test_the_schema_takes_any_name_and_the_table_says_which_are_unknown():
    cfg = config("signal", "reboot")
    assert restart_mode_problems(cfg) == [UNKNOWN]


def test_a_mode_named_by_a_row_added_to_the_table_is_known():
    cfg = config("signal", "reboot")
    assert restart_mode_problems(cfg, (*METHODS, ("reboot", lambda unit_for: build_methods({})["signal"]))) == []


def test_loading_a_config_file_with_an_unknown_mode_is_a_config_error_naming_its_key(tmp_path):
    path = tmp_path / "guardian.yaml"
    path.write_text(
        "node: n1\n"
        "targets:\n"
        "  - {name: a, match: {port: 8000}, restart: {mode: signal}}\n"
        "  - {name: b, match: {port: 8001}, restart: {mode: reboot}}\n"
    )
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert e.value.problems == [UNKNOWN]
