"""The node's accelerator table: every device every npu-smi variant and NVML report, with owners."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_guardian.diagnosis.node_view import device_rows, render_table, target_utilization
from vllm_guardian.probes.accel_rows import accelerator_rows
from vllm_guardian.host.accel import MIB, AccelSnapshot, DeviceReading, ProcessUsage
from vllm_guardian.host.accel.npu_smi import snapshot_of
from vllm_guardian.host.accel.npu_smi_parse import parse_info
from vllm_guardian.model import ProcessInfo, ProcKey, Role, Target

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "npu_smi"
INFO_FIXTURES = sorted(p.name for p in FIXTURES.glob("*.txt") if not p.name.startswith(("usages", "common", "health")))


def snap(name: str) -> AccelSnapshot:
    return snapshot_of(parse_info((FIXTURES / name).read_text()))


@pytest.mark.parametrize("name", INFO_FIXTURES)
def test_every_npu_smi_variant_lists_every_chip_with_health_util_and_memory(name):
    s = snap(name)
    rows = accelerator_rows([(10.0, s)], [], now=10.5)
    assert [r["device"] for r in rows] == sorted(
        (d.id for d in s.devices), key=lambda i: tuple(int(x) for x in i[4:].split("."))
    )
    for r in rows:
        assert r["backend"] == "npu_smi" and r["memory_kind"] in ("hbm", "ddr") and r["read_age_s"] == 0.5
        assert set(r) >= {"health", "utilization_pct", "memory_used_bytes", "memory_total_bytes", "processes"}
    assert sum(len(r["processes"]) for r in rows) == len(s.processes)


def test_a_310p_without_hbm_shows_its_ddr_memory_and_the_processes_on_it():
    rows = accelerator_rows([(0.0, snap("310p3-na-power-lost-space.txt"))], [], now=0.0)
    assert {r["memory_kind"] for r in rows} == {"ddr"}
    assert all(r["memory_total_bytes"] for r in rows)
    assert any(r["processes"] for r in rows)
    assert "DDR" in render_table(device_rows(rows)) and "no target" in render_table(device_rows(rows))


def _target(name, pids):
    procs = tuple(ProcessInfo(ProcKey(p, 1), 1, role, ("VLLM::EngineCore",)) for p, role in pids)
    return Target(name, procs[0].key, procs)


def test_processes_name_their_owning_target_and_role():
    s = AccelSnapshot(
        "nvml",
        (
            DeviceReading("nvml:0", "nvml", "H200", 10 * MIB, 100 * MIB, 0.0, "OK"),
            DeviceReading("nvml:1", "nvml", "H200", 0, 100 * MIB, 0.5, "OK"),
        ),
        (ProcessUsage(200, "nvml:0", 8 * MIB, "VLLM::EngineCor"), ProcessUsage(300, "nvml:0", 2 * MIB)),
    )
    rows = accelerator_rows([(1.0, s)], [_target("vllm-8000", [(100, Role.API_SERVER), (200, Role.ENGINE_CORE)])], 1.0)
    procs = rows[0]["processes"]
    assert procs[0] == {
        "pid": 200,
        "name": "VLLM::EngineCor",
        "memory_bytes": 8 * MIB,
        "target": "vllm-8000",
        "role": "engine_core",
    }
    assert procs[1]["target"] is None
    assert rows[1]["processes"] == [] and rows[1]["utilization_pct"] == 50.0
    assert target_utilization(rows, "vllm-8000") == 0.0  # the engine's device sits idle
    assert target_utilization(rows, "other") is None


def test_no_device_says_so():
    assert "none reported" in render_table([])
