"""accel_fault: a device is faulty — an Xid, an uncorrectable ECC error, a lost GPU, a failed
row remap, a throttled clock, an Ascend alarm.

Reads one device's ``DeviceFaultView`` (built by the fault ledger, ``state/device_faults.py``):
its current conditions and the events of the last ``window`` seconds, each with its catalog
entry. Decides: a finding while any of them is a warning or worse (info entries, such as a
power cap or a corrected ECC event, are shown in status but open nothing); its severity is the
worst one's (critical → CRITICAL); its summary names the worst first and says whether a
restart can help. None once the window holds nothing and no condition remains. The incident's
target is the device (``nvml:3``, ``npu:0.0``, ``pci:0000:3b:00`` for a kernel-log Xid no
backend maps), so one device has one incident whatever runs on it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors.device_catalog import FaultEntry
from vllm_guardian.model import Finding, Kind, Severity

KIND = Kind.ACCEL_FAULT


@dataclass(frozen=True)
class FaultStatus:
    """One fault in the status's ``device_faults`` section (the catalog entry's words beside it)."""

    device: str
    code: str
    title: str
    severity: str
    restart_can_help: bool
    blocks_restart: bool
    action: str
    what_to_do: str
    meaning: str
    source: str  # where the catalog entry comes from
    detail: str
    seen_by: str  # nvml | kmsg | npu_smi
    condition: bool
    at_wall: float
    pid: int | None = None
    rule: str = ""  # the configured rule's action ("none": not counted yet); "" for the catalog's


@dataclass(frozen=True)
class FaultRecord:
    """One fault of one device: an event (``at`` when seen) or a condition (``at`` first seen)."""

    device: str
    code: str
    entry: FaultEntry
    detail: str
    source: str  # nvml | kmsg | npu_smi
    at: float  # monotonic
    wall: float
    condition: bool = False
    pid: int | None = None

    def label(self) -> str:
        code = f"Xid {self.code[4:]}" if self.code.startswith("xid:") else self.code
        return f"{code} ({self.entry.title})"

    def status(self) -> FaultStatus:
        """As status shows it (``to_dict``'s keys; ``pid`` None when no process was named)."""
        e = self.entry
        return FaultStatus(
            self.device,
            self.code,
            e.title,
            e.severity,
            e.restart_can_help,
            e.blocks_restart,
            e.action,
            e.what_to_do,
            e.meaning,
            e.source,
            self.detail,
            self.source,
            self.condition,
            self.wall,
            self.pid,
            e.rule,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "code": self.code,
            "title": self.entry.title,
            "severity": self.entry.severity,
            "restart_can_help": self.entry.restart_can_help,
            "blocks_restart": self.entry.blocks_restart,
            "action": self.entry.action,
            "what_to_do": self.entry.what_to_do,
            "meaning": self.entry.meaning,
            "source": self.entry.source,
            "detail": self.detail,
            "seen_by": self.source,
            "condition": self.condition,
            "at_wall": self.wall,
            "rule": self.entry.rule,
            **({"pid": self.pid} if self.pid is not None else {}),
        }


@dataclass(frozen=True)
class DeviceFaultView:
    device: str
    name: str  # "NVIDIA H200", "" when no backend named it
    faults: tuple[FaultRecord, ...]  # current conditions + events in the window, oldest first
    now: float


def precedence(f: FaultRecord) -> tuple[int, bool, bool, float]:
    """Most severe first; of equals, one a restart cannot help, then an Xid (it names the cause: a
    lost GPU is what an Xid 79 leaves behind), then the latest."""
    return (f.entry.rank, f.entry.blocks_restart, f.code.startswith("xid:"), f.at)


def worst(faults: tuple[FaultRecord, ...] | list[FaultRecord]) -> FaultRecord | None:
    return max(faults, key=precedence) if faults else None


def evaluate(view: DeviceFaultView, cfg: DetectorsConfig) -> Finding | None:
    relevant = [f for f in view.faults if f.entry.rank >= 1]
    top = worst(relevant)
    if top is None:
        return None
    e = top.entry
    when = time.strftime("%H:%M:%S", time.gmtime(top.wall))
    what = "a restart will not help" if not e.restart_can_help else "a restart of the server on it may help"
    name = f" ({view.name})" if view.name else ""
    others = sorted({f.code for f in relevant if f.code != top.code})
    summary = f"device {view.device}{name}: {top.label()} at {when} UTC; {what}: {e.what_to_do}"
    return Finding(
        kind=KIND,
        target=view.device,
        severity=Severity.CRITICAL if e.severity == "critical" else Severity.WARNING,
        summary=summary,
        signals={
            "device": view.device,
            "device_name": view.name,
            **top.to_dict(),
            "other_codes": others,
            "window_s": cfg.accel_fault.window,
            "alert_only": True,
        },
    )
