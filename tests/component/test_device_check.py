"""The pre-restart device check (docs/policy.md, Device check): the real NVML and npu-smi backends over
their fakes, and the operator command through the command runner; any failure refuses the restart."""

from __future__ import annotations

import pytest

from vllm_guardian.config.schema_policy import DeviceCheckConfig
from vllm_guardian.detectors.device_catalog import shipped
from vllm_guardian.host.accel.npu_smi import NpuSmiBackend
from vllm_guardian.host.runner import SubprocessRunner
from vllm_guardian.policy.device_check import TAIL, check_devices
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_npu_smi import write_fake_npu_smi
from vllm_guardian.testing.fake_nvml import FakeNvmlBackend
from vllm_guardian.testing.fake_runner import FakeRunner, result

NVML = {"devices": [{"memory_total": 80e9, "utilization": 0}, {"memory_total": 80e9, "utilization": 0}]}
CATALOG = shipped()
ON = DeviceCheckConfig()


def nvml(clock):
    return FakeNvmlBackend(NVML, clock=clock, health_interval=None)


def test_healthy_gpus_let_the_restart_go():
    clock = FakeClock()
    check = check_devices(ON, backends=[nvml(clock)], devices=(), catalog=CATALOG, runner=FakeRunner(), now=0.0)
    assert check.ok and check.checked == ("nvml:0", "nvml:1")


def test_a_gpu_off_the_bus_refuses_the_restart_onto_it():
    clock = FakeClock()
    backend = nvml(clock)
    backend.library.lose(1)
    check = check_devices(ON, backends=[backend], devices={"nvml:1"}, catalog=CATALOG, runner=FakeRunner(), now=0.0)
    assert not check.ok and "nvml:1: gpu_lost" in check.reasons[0]


def test_a_lost_gpu_the_target_does_not_use_does_not_refuse():
    clock = FakeClock()
    backend = nvml(clock)
    backend.library.lose(1)
    check = check_devices(ON, backends=[backend], devices={"nvml:0"}, catalog=CATALOG, runner=FakeRunner(), now=0.0)
    assert check.ok and check.checked == ("nvml:0",)


@pytest.mark.parametrize(("health", "ok"), [("OK", True), ("Alarm", False)], ids=["ok", "alarm"])
def test_an_npu_in_alarm_refuses_the_restart(tmp_path, health, ok):
    fake = write_fake_npu_smi(tmp_path, {"devices": [{"npu": 0, "chip": 0, "health": health}]})
    backend = NpuSmiBackend(SubprocessRunner(), str(fake.path), timeout=30.0, usages_interval=None)
    check = check_devices(ON, backends=[backend], devices=(), catalog=CATALOG, runner=FakeRunner(), now=0.0)
    assert check.ok is ok


CMD = DeviceCheckConfig(command=("dcgmi", "diag", "-r", "1"), timeout=5.0)


@pytest.mark.parametrize(
    ("answer", "missing", "ok", "reason"),
    [
        (result("Pass"), (), True, ""),
        (result("Fail: PCIe", returncode=226), (), False, "exited 226: Fail: PCIe"),
        (result(timed_out=True), (), False, "ran past 5s"),
        (None, ("dcgmi",), False, "could not run"),
    ],
    ids=["passes", "fails", "times-out", "not-installed"],
)
def test_the_operator_command_decides(answer, missing, ok, reason):
    runner = FakeRunner({("dcgmi",): answer} if answer else {}, missing=missing)
    check = check_devices(CMD, backends=[], devices=(), catalog=CATALOG, runner=runner, now=0.0)
    assert check.ok is ok and (not reason or reason in check.reasons[0])
    assert not answer or runner.calls[0]["timeout"] == 5.0


def test_a_hostile_command_output_is_cut_and_made_printable():
    out = b"\x1b[2J\x1b]0;owned\x07" + b"A" * 100_000
    runner = FakeRunner({("dcgmi",): result(out, returncode=1)})
    check = check_devices(CMD, backends=[], devices=(), catalog=CATALOG, runner=runner, now=0.0)
    assert "\x1b" not in check.reasons[0] and len(check.reasons[0]) < TAIL + 100


def test_a_real_failing_command_refuses_and_a_real_slow_one_is_killed_at_its_timeout():
    runner = SubprocessRunner()
    failing = DeviceCheckConfig(command=("sh", "-c", "echo broken >&2; exit 3"), timeout=10.0)
    slow = DeviceCheckConfig(command=("sleep", "30"), timeout=0.5)
    first = check_devices(failing, backends=[], devices=(), catalog=CATALOG, runner=runner, now=0.0)
    second = check_devices(slow, backends=[], devices=(), catalog=CATALOG, runner=runner, now=0.0)
    assert "exited 3: broken" in first.reasons[0]
    assert "ran past 0.5s" in second.reasons[0]


def test_a_disabled_check_reads_nothing():
    runner = FakeRunner()
    check = check_devices(
        DeviceCheckConfig(enabled=False, command=("dcgmi",)),
        backends=[],
        devices=(),
        catalog=CATALOG,
        runner=runner,
        now=0.0,
    )
    assert check.ok and runner.calls == []


@pytest.mark.parametrize(
    ("rule", "ok"),
    [
        (None, False),  # the catalog: a lost GPU refuses
        ({"code": "gpu_lost", "action": "alert"}, True),  # the operator says: alert, restart anyway
        ({"code": "gpu_lost", "count": 2, "window": 60}, True),  # one read is one occurrence: not counted yet
        ({"code": "gpu_lost", "action": "refuse_restart"}, False),
    ],
    ids=["catalog", "alert-rule", "count-not-reached", "refuse-rule"],
)
def test_the_configured_device_fault_rules_decide_what_refuses(rule, ok):
    from vllm_guardian.config.schema_policy import DeviceFaultRule
    from vllm_guardian.policy.fault_rules import judge

    backend = nvml(FakeClock())
    backend.library.lose(1)
    rules = (DeviceFaultRule(**rule),) if rule else ()
    check = check_devices(
        ON,
        backends=[backend],
        devices={"nvml:1"},
        catalog=CATALOG,
        runner=FakeRunner(),
        now=0.0,
        judge=judge(rules, False),
    )
    assert check.ok is ok
