"""Accelerator backends (NVML, npu-smi): what one read of the devices returns.

Each backend is constructed once (it raises ``BackendUnavailable`` when its
driver or binary is absent) and then ``read(now)`` returns an ``AccelSnapshot``
or raises ``ProbeFailed``. The snapshot speaks one vocabulary for every vendor:
devices with memory used/total and utilisation, processes (host PIDs) with the
accelerator memory they hold, device events (NVML XID / ECC / clock events,
kernel-log ``NVRM: Xid`` lines) and device conditions (what is wrong with a
device now: lost, uncorrectable ECC, a failed row remap, a throttle reason, an
Ascend alarm). Nothing here touches the machine; ``nvml.py``, ``kmsg.py`` and
``npu_smi.py`` do. Codes name entries of the device-fault catalog
(``vllm_guardian.detectors.device_catalog``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

MIB = 1024 * 1024


@dataclass(frozen=True)
class DeviceCondition:
    """Something wrong with a device as of this read (it lasts while the read shows it).

    ``code`` is a catalog key: ``gpu_lost``, ``ecc_uncorrectable``, ``remap_failure``,
    ``remap_pending``, ``retired_pages_pending``, ``throttle:<reason>``, ``nvlink_errors``,
    ``pcie_replays``, ``npu_health:<status>``, ``npu_error:<code>``."""

    code: str
    detail: str = ""


@dataclass(frozen=True)
class DeviceReading:
    """One device (an NVIDIA GPU, or one chip of an Ascend NPU card) at one read."""

    id: str  # "nvml:<index>" / "npu:<npu>.<chip>": unique on the node, stable across reads
    backend: str  # "nvml" | "npu_smi"
    name: str
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    utilization: float | None  # 0..1 (NVML gpu %, npu-smi AICore % / NPU Util %)
    health: str | None = None  # "OK", "Warning", "Alarm", "lost", ...; None when not reported
    power_w: float | None = None
    temperature_c: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # vendor-specific numbers, for status
    conditions: tuple[DeviceCondition, ...] = ()
    pci_bus_id: str | None = None  # "0000:3b:00" (domain:bus:device), how the kernel log names it


@dataclass(frozen=True)
class ProcessUsage:
    """Accelerator memory held by one host process on one device."""

    pid: int  # host PID (NVML and npu-smi report host PIDs)
    device: str  # DeviceReading.id
    memory_bytes: int | None  # None when the driver does not report it
    name: str = ""


@dataclass(frozen=True)
class AccelEvent:
    """A device event seen during a read: an NVML event or a kernel-log Xid line.

    ``device`` is a ``DeviceReading.id`` or, from the kernel log, ``pci:<domain:bus:device>``
    (mapped onto a device by its ``pci_bus_id``). ``kind``: ``xid`` (``code`` = the Xid),
    ``ecc_dbe`` / ``ecc_sbe`` (NVML ECC events), ``clock`` (a clock-event change)."""

    device: str
    kind: str
    code: int
    detail: str = ""
    source: str = "nvml"  # "nvml" | "kmsg"
    pid: int | None = None  # the process the kernel named, when it did

    @property
    def catalog_code(self) -> str:
        return f"xid:{self.code}" if self.kind == "xid" else self.kind


@dataclass(frozen=True)
class Refused:
    """Input a read met and would not believe: counted and logged, never acted on. ``reason`` is a
    short label (``not_kernel``, ``not_driver_line``, ``unknown_device``: the kernel log's)."""

    reason: str
    count: int
    example: str  # the first such input of this read, cut to ``EXAMPLE_CHARS``


EXAMPLE_CHARS = 200


@dataclass(frozen=True)
class AccelSnapshot:
    backend: str
    devices: tuple[DeviceReading, ...]
    processes: tuple[ProcessUsage, ...]
    events: tuple[AccelEvent, ...] = ()
    notes: tuple[str, ...] = ()  # what this backend cannot see (e.g. "XID events disabled: ...")
    refused: tuple[Refused, ...] = ()  # input of this read not believed, one entry per reason


class AccelBackend(Protocol):
    """What the accelerator probe needs from a backend. A backend that refuses input may name its
    reasons in a ``refusal_reasons`` tuple: their counters then start at 0."""

    name: str
    interval: float  # read at most once per this many seconds

    def read(self, now: float) -> AccelSnapshot: ...

    def close(self) -> None: ...


__all__ = [
    "MIB",
    "AccelBackend",
    "AccelEvent",
    "AccelSnapshot",
    "DeviceCondition",
    "DeviceReading",
    "EXAMPLE_CHARS",
    "ProcessUsage",
    "Refused",
]
