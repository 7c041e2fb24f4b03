"""npu-smi backend: the fake npu-smi executable through the real SubprocessRunner, recorded
fixture output through the FakeRunner, and every way a run can fail."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from vllm_guardian.errors import BackendUnavailable, ProbeFailed
from vllm_guardian.host.accel import MIB, ProcessUsage
from vllm_guardian.host.accel.npu_smi import NpuSmiBackend
from vllm_guardian.host.runner import SubprocessRunner
from vllm_guardian.host.accel.npu_smi_parse import parse_info
from vllm_guardian.testing.fake_npu_smi import render_info, write_fake_npu_smi
from vllm_guardian.testing.fake_runner import FakeRunner, result

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "npu_smi"
SCENARIO = {
    "layout": "a2",
    "devices": [
        {"npu": 0, "name": "910B3", "base_mb": 3000, "aicore": 42},
        {"npu": 1, "name": "910B3", "base_mb": 3000, "health": "Warning"},
    ],
    "processes": [
        {
            "npu": 0,
            "pid": 4242,
            "name": "VLLMWorker_TP0_rank0",
            "memory_mb": {"curve": "linear", "start": 20000, "rate": 8},
        }
    ],
}


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def recorded(info_text: str, usages_text: str | None = None, **kw) -> tuple[NpuSmiBackend, FakeRunner]:
    runner = FakeRunner({("/usr/bin/npu-smi", "info"): result(info_text)})
    if usages_text is not None:
        runner.answer(("/usr/bin/npu-smi", "info", "-t", "usages"), result(usages_text))
    return NpuSmiBackend(runner, "npu-smi", 5.0, which=lambda p: "/usr/bin/npu-smi", **kw), runner


# ------------------------------------------------------------------ the fake executable, for real
def test_fake_npu_smi_through_the_subprocess_runner(tmp_path):
    fake = write_fake_npu_smi(tmp_path, SCENARIO)
    b = NpuSmiBackend(SubprocessRunner(), str(fake.path), timeout=30.0)
    snap = b.read(0.0)
    assert [d.id for d in snap.devices] == ["npu:0.0", "npu:1.0"]
    d0, d1 = snap.devices
    assert (d0.memory_used_bytes, d0.memory_total_bytes, d0.utilization, d1.health) == (
        23000 * MIB,
        65536 * MIB,
        0.42,
        "Warning",
    )
    assert snap.processes == (ProcessUsage(4242, "npu:0.0", 20000 * MIB, "VLLMWorker_TP0_"),)
    assert d0.extra["usages"]["HBM Capacity(MB)"] == 65536.0  # the first read also asked -t usages


def test_fake_npu_smi_replays_a_leak_as_its_time_moves(tmp_path):
    fake = write_fake_npu_smi(tmp_path, SCENARIO)
    b = NpuSmiBackend(SubprocessRunner(), str(fake.path), timeout=30.0, usages_interval=None)
    before = b.read(0.0).processes[0].memory_bytes
    fake.set_time(100.0)
    after = b.read(100.0).processes[0].memory_bytes
    assert before is not None and after is not None
    assert after - before == 800 * MIB


@pytest.mark.parametrize("layout", ["a2", "a3", "310p", "950"])
def test_the_fake_renders_every_layout_the_parser_reads(layout):
    sc = {
        "layout": layout,
        "devices": [{"npu": 0, "base_mb": 1000}, {"npu": 1}],
        "processes": [{"npu": 0, "pid": 7, "name": "VLLMEngineCore_x", "memory_mb": 500}],
    }
    info = parse_info(render_info(sc, 0.0))
    assert [(c.npu, c.chip) for c in info.chips] == [(0, 0), (1, 0)]
    used = [c.memory_used_mb if layout == "310p" else c.hbm_used_mb for c in info.chips]
    assert used == [1500, 0]
    assert [(p.npu, p.pid, p.name, p.memory_mb) for p in info.processes] == [(0, 7, "VLLMEngineCore_", 500)]
    assert info.idle_npus == (1,)


def test_a_hung_npu_smi_is_killed_at_the_timeout(tmp_path):
    fake = write_fake_npu_smi(tmp_path, dict(SCENARIO, fail={"mode": "hang", "hang_s": 60}))
    b = NpuSmiBackend(SubprocessRunner(), str(fake.path), timeout=1.0)
    start = time.monotonic()
    with pytest.raises(ProbeFailed, match="^npu-smi info timed out after 1s$"):
        b.read(0.0)
    assert time.monotonic() - start < 30


@pytest.mark.parametrize(
    "mode, message",
    [
        ("garbage", "^unrecognised npu-smi output: "),
        ("exit", "^npu-smi info exited 2: Error: device not found$"),
    ],
)
def test_a_failing_fake_npu_smi_is_probe_failed(tmp_path, mode, message):
    fake = write_fake_npu_smi(tmp_path, dict(SCENARIO, fail={"mode": mode}))
    with pytest.raises(ProbeFailed, match=message):
        NpuSmiBackend(SubprocessRunner(), str(fake.path), timeout=30.0).read(0.0)


def test_a_missing_binary_is_backend_unavailable_in_one_line(tmp_path):
    pattern = r"^npu-smi: '.*/nope/npu-smi' not found \(accelerators.npu_smi_path\)$"
    with pytest.raises(BackendUnavailable, match=pattern):
        NpuSmiBackend(SubprocessRunner(), str(tmp_path / "nope" / "npu-smi"))


# ------------------------------------------------------------------ recorded outputs
@pytest.mark.parametrize(
    "name, device, used_mib, total_mib, kind",
    [
        ("a3-ascend910-two-chips.txt", "npu:1.1", 10568, 65536, "hbm"),
        ("a2-910b2c-trailing-spaces.txt", "npu:0.0", 20701, 65536, "hbm"),
        ("training-910a-24.1rc2-warning.txt", "npu:3.0", 0, 32768, "hbm"),
        ("310b4-no-hbm-alarm.txt", "npu:0.0", 3628, 15609, "ddr"),
        ("310p3-na-power-lost-space.txt", "npu:2.1", 35204, 43693, "ddr"),
        ("310-driver-21.0.3.1-no-hugepages.txt", "npu:3.2", 2621, 8192, "ddr"),
        ("910a-driver-21.0.3.2-no-hugepages.txt", "npu:4.0", 0, 32768, "hbm"),
        ("310-inference-3000-21.0.4-doc-trailer.txt", "npu:6.1", 2867, 8192, "ddr"),
        ("ascend950-npu-id.txt", "npu:1.0", 98304, 131072, "hbm"),
    ],
)
def test_device_memory_is_hbm_when_the_layout_has_it_else_ddr(name, device, used_mib, total_mib, kind):
    b, _ = recorded(fixture(name), usages_interval=None)
    d = {d.id: d for d in b.read(0.0).devices}[device]
    assert (d.memory_used_bytes, d.memory_total_bytes, d.extra["memory_kind"]) == (
        used_mib * MIB,
        total_mib * MIB,
        kind,
    )


def test_process_rows_map_to_devices_in_bytes():
    b, _ = recorded(fixture("ascend950-npu-id.txt"), usages_interval=None)
    assert b.read(0.0).processes == (
        ProcessUsage(2018733, "npu:1.0", 30212 * MIB, "VLLMWorker_TP"),
        ProcessUsage(2018801, "npu:1.0", 512 * MIB, ""),
    )


def test_utilisation_is_aicore_percent_as_a_ratio():
    b, _ = recorded(fixture("ascend950-npu-id.txt"), usages_interval=None)
    assert [d.utilization for d in b.read(0.0).devices] == [0.0, 0.37]


def test_usages_are_asked_for_one_card_per_read_at_most_once_per_interval():
    b, runner = recorded(
        fixture("a2-910b2c-trailing-spaces.txt"), fixture("usages-910-one-chip.txt"), usages_interval=60.0
    )
    for now in (0.0, 5.0, 10.0, 65.0):
        b.read(now)
    usages = [(c["argv"][-1]) for c in runner.calls if "usages" in c["argv"]]
    assert usages == ["0", "1", "0"]  # card 0 at 0 s, card 1 at 5 s, card 0 again at 65 s
    assert all(c["timeout"] == 5.0 for c in runner.calls)


def test_a_failed_usages_call_only_leaves_a_note():
    b, runner = recorded(fixture("a2-910b2c-trailing-spaces.txt"), "Error parameter of -t\n")
    snap = b.read(0.0)
    assert len(snap.devices) == 2
    assert snap.notes == ("usages of NPU 0: unrecognised npu-smi output: usages without an NPU ID",)


@pytest.mark.parametrize(
    "answer, message",
    [
        (result(timed_out=True), "^npu-smi info timed out after 5s$"),
        (
            result("", returncode=255, stderr="dcmi module initialize failed. ret is -8005\n"),
            "^npu-smi info exited 255: dcmi module initialize failed. ret is -8005$",
        ),
        (result("", returncode=1), "^npu-smi info exited 1: no output$"),
        (result("Command 'npu-smi' not found\n"), "^unrecognised npu-smi output: "),
    ],
    ids=["timeout", "exit code with stderr", "exit code without output", "unrecognised"],
)
def test_a_failed_info_run_is_probe_failed(answer, message):
    b, runner = recorded("")
    runner.answer(("/usr/bin/npu-smi", "info"), answer)
    with pytest.raises(ProbeFailed, match=message):
        b.read(0.0)


def test_a_binary_that_vanished_after_start_is_probe_failed():
    runner = FakeRunner(missing=["/usr/bin/npu-smi"])
    b = NpuSmiBackend(runner, "npu-smi", which=lambda p: "/usr/bin/npu-smi")
    with pytest.raises(ProbeFailed, match="not found"):
        b.read(0.0)


def test_an_alarm_raised_mid_run_becomes_the_chips_conditions_with_its_error_code(tmp_path):
    sc = {
        "layout": "a2",
        "devices": [
            {"npu": 0, "chip": 0},
            {"npu": 1, "chip": 0, "alarm": {"at": 30, "health": "Alarm", "codes": ["80E01801"], "info": "hot SoC"}},
        ],
    }
    fake = write_fake_npu_smi(tmp_path, sc)
    backend = NpuSmiBackend(SubprocessRunner(), str(fake.path), 10.0, usages_interval=None)
    before = backend.read(0.0)
    assert all(d.conditions == () for d in before.devices)
    fake.set_time(31)
    after = {d.id: d for d in backend.read(31.0).devices}
    assert after["npu:0.0"].conditions == ()
    assert [c.code for c in after["npu:1.0"].conditions] == ["npu_health:Alarm", "npu_error:80E01801"]
    assert after["npu:1.0"].conditions[0].detail == "hot SoC"


# ------------------------------------------------------------------ hostile output
def test_a_process_name_that_breaks_the_table_is_refused_and_the_read_goes_on(tmp_path):
    # anyone's process on the NPU may call itself so (prctl PR_SET_NAME); npu-smi prints it raw
    hostile = {"npu": 0, "pid": 9999, "name": "a|\n|0 0|4242|x", "memory_mb": 7000}
    fake = write_fake_npu_smi(tmp_path, dict(SCENARIO, processes=[*SCENARIO["processes"], hostile]))
    b = NpuSmiBackend(SubprocessRunner(), str(fake.path), timeout=30.0, usages_interval=None)
    snap = b.read(0.0)
    assert snap.processes == (ProcessUsage(4242, "npu:0.0", 20000 * MIB, "VLLMWorker_TP0_"),)
    ((reason, count),) = [(r.reason, r.count) for r in snap.refused]
    assert reason == "broken_row" and count >= 1


def test_output_past_the_bound_is_probe_failed_not_read(tmp_path):
    flood = tmp_path / "npu-smi"
    table = tmp_path / "table.txt"
    table.write_text(fixture("a2-910b2c-trailing-spaces.txt"))
    flood.write_text(f"#!/bin/sh\ncat '{table}'\nhead -c 3000000 /dev/zero | tr '\\0' 'x'\n")
    flood.chmod(0o755)
    b = NpuSmiBackend(SubprocessRunner(), str(flood), timeout=30.0, usages_interval=None)
    with pytest.raises(ProbeFailed, match=r"^npu-smi info printed more than 1048576 bytes: not read$"):
        b.read(0.0)
