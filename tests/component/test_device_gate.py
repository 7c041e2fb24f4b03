"""What the restart sequence asks of the accelerator readings (docs/policy.md, The pre-restart device
check): the devices a target holds memory on, read through the backend that reads them (the real
NVML backend over its fake), the operator's command whenever it is set, and nothing to check at all
when there is neither a backend nor a command."""

from __future__ import annotations

from vllm_guardian.config.schema_policy import DeviceCheckConfig
from vllm_guardian.detectors.device_catalog import shipped
from vllm_guardian.loop.device_gate import PreRestartCheck, TargetDevices
from vllm_guardian.probes.accel import AccelResult
from vllm_guardian.probes.base import Readings
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_nvml import FakeNvmlBackend
from vllm_guardian.testing.fake_runner import FakeRunner, result

NVML = {"devices": [{"memory_total": 80e9, "utilization": 0}, {"memory_total": 80e9, "utilization": 0}]}


def row(device: str, backend: str = "nvml") -> dict:
    return {
        "device": device,
        "backend": backend,
        "memory_used_bytes": 1e9,
        "memory_total_bytes": 80e9,
        "utilization_ratio": 0.0,
        "health": "ok",
        "target_memory_bytes": 1e9,
    }


ON = DeviceCheckConfig()


def gate(per_target, cfg=ON, runner=None, backends=None):
    clock = FakeClock()
    backend = FakeNvmlBackend(NVML, clock=clock, health_interval=None)
    devices = TargetDevices(Readings(accel=AccelResult(per_target=per_target)))
    check = PreRestartCheck.configured(
        cfg, devices, [backend] if backends is None else backends, shipped, runner or FakeRunner(), clock.monotonic
    )
    return check, backend, devices


def test_only_the_devices_the_target_holds_are_read():
    check, backend, devices = gate({"llm": [row("nvml:0")], "emb": [row("nvml:1")]})
    backend.library.lose(1)
    assert check is not None
    assert check("llm").ok and check("llm").checked == ("nvml:0",)
    emb = check("emb")
    assert not emb.ok and "nvml:1: gpu_lost" in emb.reasons[0]
    assert (devices.kind("llm"), devices.kind("nobody")) == ("nvidia", "none")


def test_a_target_on_no_device_runs_only_the_operators_command():
    runner = FakeRunner({("dcgmi", "diag"): result("", returncode=1, stderr="diag failed")})
    check, backend, _ = gate({}, DeviceCheckConfig(command=("dcgmi", "diag", "-r", "1")), runner)
    backend.library.lose(0)
    assert check is not None
    found = check("cpu-only")
    assert not found.ok and found.checked == () and "dcgmi exited 1: diag failed" in found.reasons[0]


def test_nothing_to_check_asks_nothing():
    assert gate({}, backends=[])[0] is None  # no backend, no command
    assert gate({"llm": [row("nvml:0")]}, DeviceCheckConfig(enabled=False))[0] is None
