"""The accelerator probe: device and per-process accelerator memory from NVML / npu-smi.

Reads each backend (``vllm_guardian.host.accel``) at most once per its own
``interval`` (NVML 1 s, npu-smi 5 s), so ``collect`` is safe to call every tick;
each backend call is bounded (npu-smi runs under the runner's timeout). Maps the
reported host PIDs onto the targets' processes and emits, per target, only for
backends actually read this call (a value not read is absent, never 0):

- ``accel.memory_bytes`` per process (subject ``p<pid>``, summed over its devices)
  and for the target (subject ``""``, summed over its processes);
- ``accel.utilization``: the busiest device the target uses, 0..1 (subject ``""``);
- ``accel.memory_total_bytes``: total memory of the devices it uses (subject ``""``).

A target with no process on any device gets no sample. ``AccelResult.devices`` is
the latest snapshot of every device (for status and evidence), ``per_target``
the device rows of each target in the status document's shape, ``errors`` one
message per failing backend (log once per episode, key ``accel:<backend>``).

``AccelProbe`` runs the reader off the loop thread (NVML / npu-smi may block, npu-smi up to its
timeout), one read at a time, and keeps the latest full reading in ``Readings.accel``.

``make_backends(cfg, runner, log)`` builds the backends ``accelerators:`` asks for:
``auto`` tries and, when absent, logs one line and skips; ``off`` skips. ``missing_backends``
says which of them the guardian lacks where an NVIDIA driver is loaded (its capabilities).

The fold also feeds the fault ledger (``Readings.device_faults``): device conditions,
events (NVML, kernel log) and which server runs on which device.

Input a backend refused (``AccelSnapshot.refused``: a forged kernel-log Xid, an Xid of a bus that
is no GPU of this node) is counted per backend and reason since start (``AccelResult.refused``,
the status's ``accelerators_refused``, ``guardian_accelerator_input_refused_total``; a backend's
``refusal_reasons`` start at 0) and logged once per backend and reason, with the first example.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from vllm_guardian.config.schema import AcceleratorsConfig
from vllm_guardian.probes.accel_rows import accelerator_rows
from vllm_guardian.errors import BackendUnavailable, GuardianError
from vllm_guardian.host.accel import AccelBackend, AccelSnapshot, DeviceReading
from vllm_guardian.host.accel.kmsg import KmsgBackend
from vllm_guardian.host.accel.npu_smi import MAX_HEALTH_CALLS, NpuSmiBackend
from vllm_guardian.host.accel.nvml import NvmlBackend
from vllm_guardian.host.capabilities import Capability, MissingCapability, missing
from vllm_guardian.host.runner import CommandRunner
from vllm_guardian.model import Sample, Target, Subject
from vllm_guardian.series import metrics as m
from vllm_guardian.state.readings import AccelResult
from vllm_guardian.probes.base import Folded, Job, ProbeParts, Readings, Seen


def device_dict(d: DeviceReading, read_at: float, pids: Sequence[int]) -> dict[str, Any]:
    return {
        "device": d.id,
        "backend": d.backend,
        "name": d.name,
        "health": d.health,
        "memory_used_bytes": d.memory_used_bytes,
        "memory_total_bytes": d.memory_total_bytes,
        "utilization_ratio": d.utilization,
        "power_w": d.power_w,
        "temperature_c": d.temperature_c,
        "pids": list(pids),
        "read_at": read_at,
        **({"extra": dict(d.extra)} if d.extra else {}),
        **({"pci_bus_id": d.pci_bus_id} if d.pci_bus_id else {}),
        **({"conditions": [{"code": c.code, "detail": c.detail} for c in d.conditions]} if d.conditions else {}),
    }


class AccelReader:
    """Reads the backends that are due and maps their processes onto the targets."""

    def __init__(self, backends: Iterable[AccelBackend]) -> None:
        self.backends = list(backends)
        self._last_read: dict[str, float] = {}
        self._snapshots: dict[str, tuple[float, AccelSnapshot]] = {}
        self.refused: dict[str, dict[str, int]] = {
            b.name: dict.fromkeys(getattr(b, "refusal_reasons", ()), 0) for b in self.backends
        }

    def due(self, backend: AccelBackend, now: float) -> bool:
        """Read at most once per ``backend.interval``; a tick a little early (up to 10% of the
        interval, at most 0.25 s) still counts, so 1 s ticks do not skip a 1 s backend."""
        last = self._last_read.get(backend.name)
        slack = min(0.1 * backend.interval, 0.25)
        return last is None or now - last >= backend.interval - slack

    def collect(self, targets: Iterable[Target], now: float) -> AccelResult:
        res = AccelResult()
        read: list[str] = []
        for b in self.backends:
            if not self.due(b, now):
                continue
            self._last_read[b.name] = now
            try:
                snap = b.read(now)
            except Exception as e:  # noqa: BLE001 - a backend must never break the tick
                self._snapshots.pop(b.name, None)  # stale numbers must not look current
                what = f"{type(e).__name__}: {e}"
                res.errors[b.name] = what if isinstance(e, GuardianError) else f"unexpected {what}"
                continue
            self._snapshots[b.name] = (now, snap)
            res.events.extend(snap.events)
            read.append(b.name)
            counts = self.refused.setdefault(b.name, {})
            for r in snap.refused:
                counts[r.reason] = counts.get(r.reason, 0) + r.count
                res.refused_now.append((b.name, r))
        res.read = tuple(read)
        res.refused = {name: dict(counts) for name, counts in self.refused.items() if counts}
        targets = list(targets)
        for name, (at, snap) in self._snapshots.items():
            if snap.notes:
                res.notes[name] = snap.notes
            pids_by_dev: dict[str, list[int]] = {}
            for p in snap.processes:
                pids_by_dev.setdefault(p.device, []).append(p.pid)
                if p.memory_bytes is not None:
                    res.process_memory[p.pid] = res.process_memory.get(p.pid, 0) + p.memory_bytes
            for d in snap.devices:
                res.devices[d.id] = device_dict(d, at, pids_by_dev.get(d.id, []))
            for t in targets:
                rows = self._target_rows(t, snap)
                if rows:
                    res.per_target.setdefault(t.name, []).extend(rows)
                if name in res.read:
                    res.samples.extend(self._target_samples(t, snap, now))
        res.node = accelerator_rows(self._snapshots.values(), targets, now)
        return res

    @staticmethod
    def _target_rows(t: Target, snap: AccelSnapshot) -> list[dict[str, Any]]:
        pids = {p.pid for p in t.processes}
        mine: dict[str, int | None] = {}
        for p in snap.processes:
            if p.pid in pids:
                old = mine.get(p.device)
                mine[p.device] = (old or 0) + p.memory_bytes if p.memory_bytes is not None else old
        rows = []
        for d in snap.devices:
            if d.id in mine:
                rows.append(
                    {
                        "device": d.id,
                        "backend": d.backend,
                        "memory_used_bytes": d.memory_used_bytes,
                        "memory_total_bytes": d.memory_total_bytes,
                        "utilization_ratio": d.utilization,
                        "health": d.health,
                        "target_memory_bytes": mine[d.id],
                    }
                )
        return rows

    @staticmethod
    def _target_samples(t: Target, snap: AccelSnapshot, now: float) -> list[Sample]:
        pids = {p.pid for p in t.processes}
        per_pid: dict[int, int] = {}
        devices: set[str] = set()
        for p in snap.processes:
            if p.pid not in pids:
                continue
            devices.add(p.device)
            if p.memory_bytes is not None:
                per_pid[p.pid] = per_pid.get(p.pid, 0) + p.memory_bytes
        if not devices:
            return []
        out = [Sample(t.name, Subject(pid).key, m.ACCEL_MEM, float(v), now) for pid, v in sorted(per_pid.items())]
        if per_pid:
            out.append(Sample(t.name, "", m.ACCEL_MEM, float(sum(per_pid.values())), now))
        used = [d for d in snap.devices if d.id in devices]
        utils = [d.utilization for d in used if d.utilization is not None]
        if utils:
            out.append(Sample(t.name, "", m.ACCEL_UTIL, max(utils), now))
        totals = [d.memory_total_bytes for d in used if d.memory_total_bytes is not None]
        if used and len(totals) == len(used):  # a partial total would understate the room left
            out.append(Sample(t.name, "", m.ACCEL_TOTAL, float(sum(totals)), now))
        return out

    def close(self) -> None:
        for b in self.backends:
            b.close()


class AccelProbe:
    name = "accel"
    inline = False

    def __init__(self, parts: ProbeParts) -> None:
        self.reader = AccelReader(parts.seams.accel_backends)
        self.tracker = parts.tracker
        self.clock = parts.seams.clock
        self.readings: Readings = parts.readings
        self.log = parts.log
        self._logged: set[tuple[str, str]] = set()  # (backend, reason) refusals already logged
        # npu-smi: info, one usages call and up to MAX_HEALTH_CALLS health calls a read, each bounded
        self.timeout = (2 + MAX_HEALTH_CALLS) * parts.cfg.accelerators.npu_smi_timeout + 2

    def jobs(self, now: float, seen: Seen) -> list[Job]:
        if not self.reader.backends:
            return []
        reader, targets = self.reader, self.tracker.live_targets()
        return [Job("", lambda: reader.collect(targets, self.clock.monotonic()), self.timeout)]

    def fold(self, res: AccelResult, now: float) -> Folded:
        for ev in res.events:
            self.log.warning("accelerator event: %s", ev)
        for backend, r in res.refused_now:
            if (backend, r.reason) not in self._logged:
                self._logged.add((backend, r.reason))
                self.log.warning(
                    "accelerators.%s: input refused (%s), not acted on; counted in "
                    "guardian_accelerator_input_refused_total, logged once: %r",
                    backend,
                    r.reason,
                    r.example,
                )
        if self.readings.accel is None or res.read:  # no backend due: keep the latest full reading
            self.readings.accel = res
        if self.readings.device_faults is not None and res.read:
            self.readings.device_faults.fold(res, self.clock.monotonic(), self.clock.wall(), self._owner)
        return Folded(
            res.samples,
            failed={f"accel:{name}": msg for name, msg in res.errors.items()},
            cleared=[f"accel:{name}" for name in res.read if name not in res.errors],
        )

    def _owner(self, pid: int) -> str | None:
        """The server a host pid belongs to (a kernel-log Xid names the process it hit)."""
        for t in self.tracker.live_targets():
            if any(p.pid == pid for p in t.processes):
                return t.name
        return None

    def close(self) -> None:
        self.reader.close()


def nvidia_driver_loaded(root: str) -> bool:
    base = Path(root)
    return (base / "proc" / "driver" / "nvidia").exists() or (base / "sys" / "module" / "nvidia").exists()


def make_backends(
    cfg: AcceleratorsConfig,
    runner: CommandRunner,
    log: logging.Logger,
    *,
    nvml_factory: Callable[[], AccelBackend] | None = None,
    npu_smi_factory: Callable[[], AccelBackend] | None = None,
    kmsg_factory: Callable[[], AccelBackend] | None = None,
) -> list[AccelBackend]:
    """The backends ``accelerators:`` asks for. ``auto``: try, and when absent log one line
    and skip; ``off``: skip. The kernel log is read only where an NVIDIA driver is loaded
    (``<kmsg_root>/proc/driver/nvidia`` or ``/sys/module/nvidia``): its lines are the driver's.
    The factories are seams for tests (default: the real backends)."""
    out: list[AccelBackend] = []

    def kmsg() -> AccelBackend:
        if not nvidia_driver_loaded(cfg.kmsg_root):
            raise BackendUnavailable(f"no NVIDIA driver loaded under {cfg.kmsg_root}: no Xid lines to read")
        return KmsgBackend(cfg.kmsg_root, backlog=cfg.kmsg_backlog)

    wanted = (
        ("nvml", cfg.nvml, nvml_factory or (lambda: NvmlBackend(health_interval=cfg.health_interval))),
        ("kmsg", cfg.kmsg, kmsg_factory or kmsg),
        (
            "npu_smi",
            cfg.npu_smi,
            npu_smi_factory or (lambda: NpuSmiBackend(runner, cfg.npu_smi_path, cfg.npu_smi_timeout)),
        ),
    )
    for key, mode, factory in wanted:
        if mode == "off":
            continue
        try:
            out.append(factory())
        except BackendUnavailable as e:
            log.info("accelerators.%s: %s; probe disabled", key, e)
    return out


def missing_backends(cfg: AcceleratorsConfig, backends: Iterable[AccelBackend]) -> list[MissingCapability]:
    """Where an NVIDIA driver is loaded: NVML or the kernel log asked for (not ``off``) that
    could not be opened (no libnvidia-ml, ``dmesg_restrict``): capabilities the guardian lacks."""
    if not nvidia_driver_loaded(cfg.kmsg_root):
        return []
    have = {b.name for b in backends}
    out = []
    for name, mode, cap in (("nvml", cfg.nvml, Capability.NVML), ("kmsg", cfg.kmsg, Capability.KMSG)):
        if mode != "off" and name not in have:
            out.append(missing(cap, f"accelerators.{name} is {mode} but its backend could not be opened"))
    return out
