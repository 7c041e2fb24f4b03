"""`guardian probe --once` shows the node's accelerators even with no vLLM running (a 310P's npu-smi)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import yaml

from vllm_guardian.cli.main import main

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "npu_smi" / "310p3-na-power-lost-space.txt"


def config(tmp_path: Path) -> str:
    fake = tmp_path / "npu-smi"
    fake.write_text(f"#!/bin/sh\n[ \"$*\" = info ] && exec cat {FIXTURE}\necho 'not supported' >&2\nexit 2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    path = tmp_path / "g.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "state_dir": str(tmp_path / "state"),
                "api": {"http": None},
                "autodiscover": False,
                "interval": 0.2,
                "probes": {"procfs": {"interval": 0.2}},
                "accelerators": {"nvml": "off", "npu_smi_path": str(fake)},
            }
        )
    )
    return str(path)


def test_probe_once_lists_every_chip_without_any_target(tmp_path, capsys):
    cfg = config(tmp_path)
    assert main(["probe", "--once", "--json", "-c", cfg]) == 1  # no target: exit 1, as before
    doc = json.loads(capsys.readouterr().out)
    devs = doc["accelerators"]
    assert [d["device"] for d in devs] == ["npu:1.0", "npu:1.1", "npu:2.0", "npu:2.1"]
    assert {d["memory_kind"] for d in devs} == {"ddr"} and all(d["memory_total_bytes"] for d in devs)
    assert all(p["target"] is None for d in devs for p in d["processes"])
    assert sum(len(d["processes"]) for d in devs) == 4


def test_the_table_shows_the_devices_too(tmp_path, capsys):
    assert main(["probe", "--once", "-c", config(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "no vLLM targets found" in out and "accelerators:" in out and "npu:2.1" in out and "DDR" in out
