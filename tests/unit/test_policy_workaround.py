"""Known-bug workarounds (docs/policy.md, Workarounds): what a catalog may say (bounded: it can come from
an operator's file), how the restart argv carries it, the systemd drop-in, the proposed Kubernetes
patch, and the record that ``guardian workaround clear`` removes."""

from __future__ import annotations

import pytest

from vllm_guardian.diagnosis.catalog_load import load_catalogs
from vllm_guardian.diagnosis.workaround import Workaround, parse_workaround
from vllm_guardian.errors import CatalogError
from vllm_guardian.policy.workaround import Applied, WorkaroundState, kube_patch, systemd_dropin, with_args

MM = Workaround(args=("--mm-processor-cache-gb", "0"))


def test_the_shipped_lru_busy_loop_signature_carries_its_workaround_arguments():
    sigs = {s.id: s for c in load_catalogs(()) for s in c.signatures}
    assert sigs["vllm-mm-cache-lru-busy-loop"].workaround_apply == MM


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"args": ["--x", "$(reboot)"]}, "args[1]"),
        ({"args": ["rm", "-rf"]}, "args[0]"),
        ({"args": ["--a"] * 17}, "at most 16"),
        ({"env": {"LD_PRELOAD": "/tmp/x.so"}}, "env.LD_PRELOAD"),
        ({"env": {"PYTHONPATH": "/tmp"}}, "env.PYTHONPATH"),
        ({"env": {"LD_BIND_NOW": "1"}}, "env.LD_BIND_NOW"),
        ({"env": {"VLLM_X": "a\nb"}}, "env.VLLM_X"),
        ({"args": "--mm-processor-cache-gb 0"}, "args: must be a list"),
        ({"shell": "x"}, "shell: unknown key"),
        ({}, "needs args or env"),
        ("--flag", "must be a mapping"),
    ],
    ids=[
        "shell-substitution",
        "not-a-flag-first",
        "too-many",
        "ld-preload",
        "pythonpath",
        "any-ld-name",
        "newline-in-value",
        "args-as-one-string",
        "unknown-key",
        "empty",
        "not-a-mapping",
    ],
)
def test_a_hostile_workaround_is_refused_with_what_is_wrong(value, problem):
    found, problems = parse_workaround(value)
    assert found is None and any(problem in p for p in problems)


def test_a_catalog_file_with_a_hostile_workaround_is_refused_whole(tmp_path):
    (tmp_path / "x.yaml").write_text(
        "schema: 1\nname: x\nversion: '1'\nsignatures:\n"
        "  - id: bad\n    title: t\n    kinds: [busy_loop]\n    confidence: 0.5\n    source: s\n"
        "    cmdline: vllm\n    workaround_apply: {env: {LD_PRELOAD: /tmp/evil.so}}\n"
    )
    with pytest.raises(CatalogError) as err:
        load_catalogs((str(tmp_path),))
    assert "signatures[0].workaround_apply.env.LD_PRELOAD" in str(err.value)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (("vllm", "serve", "m"), ("vllm", "serve", "m", "--mm-processor-cache-gb", "0")),
        (
            ("vllm", "serve", "m", "--mm-processor-cache-gb", "4"),
            ("vllm", "serve", "m", "--mm-processor-cache-gb", "0"),
        ),
        (
            ("vllm", "serve", "m", "--mm-processor-cache-gb=4", "--port", "8000"),
            ("vllm", "serve", "m", "--port", "8000", "--mm-processor-cache-gb", "0"),
        ),
    ],
    ids=["added", "value-replaced", "equals-form-replaced"],
)
def test_the_restart_argv_carries_the_workaround_once(command, expected):
    assert with_args(command, MM) == expected


def test_the_systemd_dropin_sets_the_environment_and_the_extra_arguments():
    text = systemd_dropin(Workaround(args=("--mm-processor-cache-gb", "0"), env=(("VLLM_X", "1"),)))
    assert text.splitlines()[1:] == [
        "[Service]",
        'Environment="VLLM_X=1"',
        'Environment="VLLM_GUARDIAN_EXTRA_ARGS=--mm-processor-cache-gb 0"',
    ]


def test_kubernetes_gets_a_proposed_patch_naming_the_container():
    patch = kube_patch("vllm", MM)
    assert patch["spec"]["template"]["spec"]["containers"][0] == {
        "name": "vllm",
        "args": {"$append": ["--mm-processor-cache-gb", "0"]},
    }


def test_a_recorded_workaround_changes_the_next_command_until_cleared(tmp_path):
    state = WorkaroundState(str(tmp_path))
    cmd = ("vllm", "serve", "m")
    state.record(Applied("llm", "vllm-mm-cache-lru-busy-loop", MM, "inc-2", 1000.0))
    assert WorkaroundState(str(tmp_path)).command_for("llm", cmd)[-2:] == ("--mm-processor-cache-gb", "0")
    assert state.load()["llm"].incident == "inc-2"
    assert state.clear("llm")
    assert state.command_for("llm", cmd) == cmd
    assert not state.clear("llm")


@pytest.mark.parametrize(
    "content",
    ["{not json", '["a"]', '{"llm": {"args": ["--x", "$(id)"]}}', '{"llm": 3}'],
    ids=["not-json", "not-a-mapping", "hostile-args", "record-not-a-mapping"],
)
def test_a_damaged_state_file_applies_no_workaround(tmp_path, content):
    (tmp_path / "workarounds.json").write_text(content)
    assert WorkaroundState(str(tmp_path)).command_for("llm", ("vllm",)) == ("vllm",)
