"""The diagnosis reads the processes of a bundle from its manifest, leaving out what is malformed."""

from __future__ import annotations

import pytest

from vllm_guardian.diagnosis.service import CapturedProcesses

API = {"pid": 10, "role": "api_server", "cmdline": ["vllm", "serve", "m"]}
ENGINE = {"pid": 11, "role": "engine_core", "cmdline": ["VLLM::EngineCore"]}


@pytest.mark.parametrize(
    "doc, roles, cmdlines, hottest",
    [
        (
            {"processes": [API, ENGINE], "hottest_pid": 11},
            {10: "api_server", 11: "engine_core"},
            {10: "vllm serve m", 11: "VLLM::EngineCore"},
            11,
        ),
        ({"processes": [API, {"pid": "11", "role": "engine_core"}]}, {10: "api_server"}, {10: "vllm serve m"}, None),
        ({"processes": [API, "junk"], "hottest_pid": "11"}, {10: "api_server"}, {10: "vllm serve m"}, None),
        ({"processes": [{"pid": 12}]}, {12: "None"}, {12: ""}, None),  # as the bundle says: no role, no argv
        ({}, {}, {}, None),
        (None, {}, {}, None),  # no manifest (unreadable)
        (["not", "a", "manifest"], {}, {}, None),
    ],
)
def test_roles_command_lines_and_the_hottest_process_come_from_the_manifest(doc, roles, cmdlines, hottest):
    got = CapturedProcesses.from_manifest(doc)
    assert (dict(got.roles), dict(got.cmdlines), got.hottest_pid) == (roles, cmdlines, hottest)
