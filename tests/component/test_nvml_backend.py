"""NVML backend: against the fake NVML (scripted curves, pynvml's own error classes) and
against the real pynvml on this machine, which has no NVIDIA driver."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from vllm_guardian.errors import BackendUnavailable, ProbeFailed
from vllm_guardian.host.accel import AccelEvent, ProcessUsage
from vllm_guardian.host.accel.nvml import NvmlBackend
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_nvml import FakeNvml, FakeNvmlBackend

MB = 1e6
GPU0 = {
    "name": "NVIDIA H200",
    "memory_total": 140e9,
    "memory_base": 1e9,
    "utilization": 35,
    "processes": [
        {"pid": 4242, "memory": {"curve": "linear", "start": 60e9, "rate": 8 * MB}},
        {"pid": 4300, "memory": 2e9, "type": "graphics"},
    ],
}
GPU1 = {
    "name": "NVIDIA H200",
    "memory_total": 140e9,
    "memory_used": 5e9,
    "utilization": None,
    "processes": [{"pid": 4243, "memory": None}],
}


def backend(clock: FakeClock, **scenario) -> FakeNvmlBackend:
    return FakeNvmlBackend({"devices": [GPU0, GPU1], **scenario}, clock=clock)


def nvml_driver_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return False


# ------------------------------------------------------------------ the real library, no driver here
def test_real_pynvml_without_a_driver_is_unavailable_with_one_clear_line():
    if nvml_driver_present():  # a GPU machine: the same call must give a working backend
        b = NvmlBackend()
        snap = b.read(0.0)
        b.close()
        assert snap.devices and all(d.memory_total_bytes for d in snap.devices)
        return
    with pytest.raises(BackendUnavailable) as err:
        NvmlBackend()
    msg = str(err.value)
    assert msg == "NVML: no NVIDIA driver on this host (NVML Shared Library Not Found)"
    assert "\n" not in msg


def test_importing_the_backend_and_probe_does_not_import_pynvml():
    code = "import sys, vllm_guardian.host.accel.nvml, vllm_guardian.probes.accel; print('pynvml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "driver, why", [("absent", "NVML Shared Library Not Found"), ("not_loaded", "Driver Not Loaded")]
)
def test_no_driver_is_backend_unavailable(driver, why):
    with pytest.raises(BackendUnavailable, match=f"^NVML: no NVIDIA driver on this host \\({why}\\)$"):
        FakeNvmlBackend({"driver": driver}, clock=FakeClock())


# ------------------------------------------------------------------ reading
def test_reads_memory_utilisation_and_processes_per_device():
    clock = FakeClock()
    snap = backend(clock).read(clock.monotonic())
    g0, g1 = snap.devices
    assert (g0.id, g0.name, g0.memory_total_bytes, g0.memory_used_bytes, g0.utilization, g0.health) == (
        "nvml:0",
        "NVIDIA H200",
        140_000_000_000,
        63_000_000_000,
        0.35,
        "OK",
    )
    assert (g1.id, g1.memory_used_bytes, g1.utilization) == ("nvml:1", 5_000_000_000, None)
    assert snap.processes == (
        ProcessUsage(4242, "nvml:0", 60_000_000_000),
        ProcessUsage(4300, "nvml:0", 2_000_000_000),
        ProcessUsage(4243, "nvml:1", None),
    )
    assert g0.extra["memory_reserved_bytes"] == 0


def test_a_leaking_process_rises_with_the_injected_clock():
    clock = FakeClock()
    b = backend(clock)
    before = b.read(clock.monotonic()).processes[0].memory_bytes
    clock.advance(10)
    after = b.read(clock.monotonic()).processes[0].memory_bytes
    assert before is not None and after is not None
    assert after - before == 80_000_000


def test_a_pid_in_both_process_lists_counts_once():
    gpu = {"processes": [{"pid": 7, "memory": 3e9, "type": "compute"}, {"pid": 7, "memory": 1e9, "type": "graphics"}]}
    clock = FakeClock()
    snap = FakeNvmlBackend({"devices": [gpu]}, clock=clock).read(clock.monotonic())
    assert snap.processes == (ProcessUsage(7, "nvml:0", 3_000_000_000),)


def test_old_driver_without_memory_v2_falls_back_to_v1():
    clock = FakeClock()
    snap = backend(clock, memory_v2=False).read(clock.monotonic())
    assert snap.devices[0].memory_used_bytes == 63_000_000_000
    assert "memory_reserved_bytes" not in snap.devices[0].extra


def test_a_lost_gpu_is_reported_not_raised():
    clock = FakeClock()
    b = FakeNvmlBackend({"devices": [dict(GPU0, lost_at=5), GPU1]}, clock=clock)
    clock.advance(6)
    snap = b.read(clock.monotonic())
    assert (snap.devices[0].health, snap.devices[0].memory_used_bytes) == ("lost", None)
    assert [p.device for p in snap.processes] == ["nvml:1"]


def test_a_read_after_close_fails():
    clock = FakeClock()
    b = backend(clock)
    b.close()
    assert b.library.initialised == 0
    with pytest.raises(ProbeFailed):
        b.read(clock.monotonic())


# ------------------------------------------------------------------ XID events
def test_xid_events_are_polled_without_waiting_and_reported_once():
    clock = FakeClock()
    b = backend(clock, xid=[{"at": 3, "device": 1, "code": 79}, {"at": 4, "device": 0, "code": 48}])
    assert b.read(clock.monotonic()).events == ()
    clock.advance(5)
    assert b.read(clock.monotonic()).events == (
        AccelEvent("nvml:1", "xid", 79, "XID 79"),
        AccelEvent("nvml:0", "xid", 48, "XID 48"),
    )
    assert b.read(clock.monotonic()).events == ()


@pytest.mark.parametrize(
    "scenario, why",
    [({"xid_supported": False}, "Not Supported"), ({"xid_permission": False}, "Insufficient Permissions")],
)
def test_xid_refused_disables_events_with_a_note(scenario, why):
    clock = FakeClock()
    b = backend(clock, xid=[{"at": 0, "device": 0, "code": 79}], **scenario)
    snap = b.read(clock.monotonic())
    assert snap.events == ()
    xid_notes = tuple(n for n in snap.notes if n.startswith("XID"))
    assert xid_notes == (f"XID events disabled on nvml:0: {why}", f"XID events disabled on nvml:1: {why}")
    assert snap.devices[0].memory_used_bytes is not None  # the rest still works


def test_xid_can_be_turned_off():
    clock = FakeClock()
    b = FakeNvmlBackend({"devices": [GPU0], "xid": [{"at": 0, "code": 79}]}, clock=clock, xid=False)
    assert b.read(clock.monotonic()).events == ()


def test_the_fake_library_counts_init_and_shutdown():
    lib = FakeNvml({"devices": [GPU0]}, clock=FakeClock())
    b = NvmlBackend(library=lib)
    assert lib.initialised == 1
    b.close()
    b.close()
    assert (lib.initialised, lib.calls.count("nvmlShutdown")) == (0, 1)


def test_scenario_from_a_yaml_file(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text("devices:\n  - memory_total: 1000000000\n    processes: [{pid: 9, memory: 100000000}]\n")
    clock = FakeClock()
    snap = FakeNvmlBackend(path, clock=clock).read(clock.monotonic())
    assert snap.processes == (ProcessUsage(9, "nvml:0", 100_000_000),)


def test_an_nvml_error_in_the_process_list_marks_the_device_not_the_read():
    clock = FakeClock()
    b = backend(clock, errors={"nvmlDeviceGetComputeRunningProcesses": "InvalidArgument"})
    snap = b.read(clock.monotonic())
    assert [d.health for d in snap.devices] == ["error", "error"]
    assert snap.devices[0].extra["error"] == "NVMLError_InvalidArgument: Invalid Argument"


@pytest.mark.parametrize(
    "call, pids",
    [("nvmlDeviceGetComputeRunningProcesses", [4300]), ("nvmlDeviceGetGraphicsRunningProcesses", [4242, 4243])],
)
def test_a_process_list_not_supported_is_skipped(call, pids):
    clock = FakeClock()
    snap = backend(clock, errors={call: "NotSupported"}).read(clock.monotonic())
    assert [d.health for d in snap.devices] == ["OK", "OK"]
    assert [p.pid for p in snap.processes] == pids


def test_utilisation_not_permitted_is_absent():
    clock = FakeClock()
    snap = backend(clock, errors={"nvmlDeviceGetUtilizationRates": "NoPermission"}).read(clock.monotonic())
    assert [d.utilization for d in snap.devices] == [None, None]


def test_a_driver_upgrade_under_the_daemon_fails_the_read():
    clock = FakeClock()
    b = backend(clock, errors={"nvmlDeviceGetMemoryInfo": "LibRmVersionMismatch"})
    with pytest.raises(ProbeFailed, match="^NVML: NVMLError_LibRmVersionMismatch: "):
        b.read(clock.monotonic())
