"""The pre-restart device check (docs/policy.md, Device check): before a restart onto accelerators, one
read of their health through the backends that exist (NVML, npu-smi) and, when configured, an
operator command (``policy.device_check.command``, e.g. ``dcgmi diag -r 1``) through the command
runner with a timeout. A device the target used showing a fault that blocks restarts (the device
catalog's rule, or the configured ``policy.device_fault_rules``), a backend that cannot be read, or
a command that fails or runs past its timeout refuses the restart: the caller escalates. The
command's output is untrusted: only its last ``TAIL`` printable characters go on the incident."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from vllm_guardian.config.schema_policy import DeviceCheckConfig
from vllm_guardian.detectors.device_catalog import DeviceCatalog, FaultEntry
from vllm_guardian.host.accel import AccelBackend
from vllm_guardian.host.runner import CommandRunner

TAIL = 400
MAX_OUTPUT = 64 * 1024


@dataclass(frozen=True)
class DeviceCheck:
    ok: bool
    reasons: tuple[str, ...]  # why the restart is refused; empty when ok
    checked: tuple[str, ...]  # device ids read


def _printable_tail(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace")
    clean = "".join(c if c.isprintable() or c == "\n" else "?" for c in text).strip()
    return clean[-TAIL:]


def check_devices(
    cfg: DeviceCheckConfig,
    *,
    backends: Sequence[AccelBackend],
    devices: Collection[str],
    catalog: DeviceCatalog,
    runner: CommandRunner,
    now: float,
    judge: Callable[[str, FaultEntry, list[float], float], FaultEntry] | None = None,
) -> DeviceCheck:
    """The devices ``devices`` (ids; empty = every device read) checked before a restart; ``judge``:
    ``policy.device_fault_rules`` (``fault_rules.judge``), a condition read now counting once."""
    if not cfg.enabled:
        return DeviceCheck(True, (), ())
    reasons: list[str] = []
    checked: list[str] = []
    for backend in backends:
        try:
            snap = backend.read(now)
        except Exception as e:  # noqa: BLE001 - ProbeFailed, a driver error: cannot vouch for the device
            reasons.append(f"{backend.name}: the devices could not be read ({type(e).__name__}: {e})"[:300])
            continue
        for dev in snap.devices:
            if devices and dev.id not in devices:
                continue
            checked.append(dev.id)
            for cond in dev.conditions:
                entry = catalog.lookup(cond.code)
                if judge is not None:
                    entry = judge(cond.code, entry, [now], now)
                if entry.blocks_restart:
                    reasons.append(f"{dev.id}: {cond.code} ({entry.title}): {entry.what_to_do}")
    if cfg.command:
        try:
            res = runner.run(cfg.command, cfg.timeout, max_output=MAX_OUTPUT)
        except Exception as e:  # noqa: BLE001 - BackendUnavailable (no such program), OSError
            reasons.append(f"device check command {cfg.command[0]} could not run ({type(e).__name__}: {e})")
        else:
            if res.timed_out:
                reasons.append(f"device check command {cfg.command[0]} ran past {cfg.timeout:g}s")
            elif not res.ok:
                tail = _printable_tail(res.stdout + b"\n" + res.stderr)
                reasons.append(f"device check command {cfg.command[0]} exited {res.returncode}: {tail}")
    return DeviceCheck(not reasons, tuple(reasons), tuple(checked))
