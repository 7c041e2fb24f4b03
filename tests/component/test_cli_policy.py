"""The policy on the command line (docs/policy.md): check-config names each target's profile and the
device-fault rules; `guardian workaround list|clear` reads and drops the workaround record."""

from __future__ import annotations

import json

import yaml

from vllm_guardian.cli.main import main
from vllm_guardian.diagnosis.workaround import Workaround
from vllm_guardian.policy.workaround import Applied, WorkaroundState


def write_config(tmp_path, **extra):
    cfg = {"state_dir": str(tmp_path / "state"), "api": {"http": None}, "autodiscover": False, **extra}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_check_config_names_the_profile_each_target_gets(tmp_path, capsys):
    path = write_config(
        tmp_path,
        node="gpu-proven-3",
        targets=[
            {"name": "llm", "model": "llama-70b", "match": {"port": 8000}},
            {"name": "emb", "model": "bge", "match": {"port": 8001}},
        ],
        policy={
            "profiles": [
                {
                    "name": "llama-proven",
                    "match": {"node": "gpu-proven-.*", "model": "llama.*"},
                    "modes": {"busy_loop": "remediate"},
                }
            ],
            "device_fault_rules": [{"code": "xid:13", "count": 3, "window": 60, "action": "alert"}],
        },
    )
    assert main(["check-config", "-c", path]) == 0
    out = capsys.readouterr().out
    assert "# profile llm: profile llama-proven (busy_loop=remediate;" in out
    assert "# profile emb: profile default (detector modes;" in out
    assert "# device fault rule xid:13: severity catalog, 3 within 60s, action alert" in out


def test_workaround_clear_returns_a_target_to_its_configured_command(tmp_path, capsys):
    path = write_config(tmp_path)
    state = WorkaroundState(str(tmp_path / "state"))
    state.record(
        Applied("llm", "vllm-mm-cache-lru-busy-loop", Workaround(("--mm-processor-cache-gb", "0")), "i-2", 5.0)
    )
    assert main(["workaround", "list", "-c", path]) == 0
    assert json.loads(capsys.readouterr().out)["llm"]["args"] == ["--mm-processor-cache-gb", "0"]
    assert main(["workaround", "clear", "llm", "-c", path]) == 0
    assert state.command_for("llm", ("vllm", "serve")) == ("vllm", "serve")
    assert main(["workaround", "clear", "llm", "-c", path]) == 1
    assert main(["workaround", "clear", "-c", path]) == 2
