"""What the restart sequence asks of the accelerator readings (docs/policy.md): the device kind a
target's profile matches on, and the pre-restart device check of its devices (``policy.device_check``:
one health read through this node's backends, then the operator's command). Reads the latest
accelerator reading (which devices the target holds memory on) and, when the check runs, the
backends and the command runner."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from vllm_guardian.config.schema_policy import DeviceCheckConfig
from vllm_guardian.detectors.device_catalog import DeviceCatalog
from vllm_guardian.host.accel import AccelBackend
from vllm_guardian.host.runner import CommandRunner
from vllm_guardian.policy.device_check import DeviceCheck, check_devices
from vllm_guardian.probes.base import Readings
from vllm_guardian.remediation.target_policy import device_kind
from vllm_guardian.state.device_faults import Judge


class TargetDevices:
    """The devices a target holds memory on, as the last accelerator reading saw them."""

    def __init__(self, readings: Readings) -> None:
        self.readings = readings

    def rows(self, target: str) -> list[tuple[str, str]]:
        accel = self.readings.accel
        return [] if accel is None else [(d.device, d.backend) for d in accel.target_section(target)]

    def kind(self, target: str) -> str:
        return device_kind([backend for _, backend in self.rows(target)])


class PreRestartCheck:
    """``policy.device_check`` for one target: its devices' health through the backends that read
    them (none held: no read) and the operator's command (always, when set)."""

    def __init__(
        self,
        cfg: DeviceCheckConfig,
        devices: TargetDevices,
        backends: Sequence[AccelBackend],
        catalog: Callable[[], DeviceCatalog],
        runner: CommandRunner,
        monotonic: Callable[[], float],
        judge: Callable[[], Judge | None] = lambda: None,
    ) -> None:
        self.cfg, self.devices, self.backends = cfg, devices, backends
        self.catalog, self.runner, self.monotonic = catalog, runner, monotonic
        self.judge = judge  # the device-fault rules of the config now in force (they follow a reload)

    def __call__(self, target: str) -> DeviceCheck:
        rows = self.devices.rows(target)
        held = {b for _, b in rows}
        return check_devices(
            self.cfg,
            backends=[b for b in self.backends if b.name in held],
            devices={d for d, _ in rows},
            catalog=self.catalog(),
            runner=self.runner,
            now=self.monotonic(),
            judge=self.judge(),
        )

    @classmethod
    def configured(
        cls,
        cfg: DeviceCheckConfig,
        devices: TargetDevices,
        backends: Sequence[AccelBackend],
        catalog: Callable[[], DeviceCatalog],
        runner: CommandRunner,
        monotonic: Callable[[], float],
        judge: Callable[[], Judge | None] = lambda: None,
    ) -> PreRestartCheck | None:
        """None when there is nothing to check: the check off, or no backend and no command."""
        if not cfg.enabled or not (backends or cfg.command):
            return None
        return cls(cfg, devices, backends, catalog, runner, monotonic, judge)
