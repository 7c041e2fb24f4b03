"""An engine incident on a faulty device: the device fault, named first (pure).

Reads the faults the fault ledger holds for a server's devices (``FaultRecord``s: events of
the window and current conditions) when a ``busy_loop``, ``engine_stall`` or ``engine_dead`` of
that server opens. Decides what the diagnosis says:

- a fault a restart cannot help (critical, ``blocks_restart``) becomes the first diagnosis
  entry (id ``device-fault:<code>``, confidence 0.95) and a note that joins the summary
  ("GPU nvml:3 reported Xid 79 (GPU has fallen off the bus) at 02:41:07 UTC; a restart will
  not help") — a CUDA synchronise spinning on a dead GPU looks like a busy loop from /proc,
  so the device is the better explanation;
- any other warning (a thermal slowdown, a pending remap, a critical fault a restart may
  help) is a note only: it annotates, it does not claim to be the cause.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from vllm_guardian.detectors.accel_fault import FaultRecord, precedence

ENGINE_KINDS = ("busy_loop", "engine_stall", "engine_dead")
CONFIDENCE = 0.95


def _when(wall: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(wall)) + " UTC"


def _what(f: FaultRecord) -> str:
    verb = "reports" if f.condition else "reported"
    return f"{f.device} {verb} {f.label()} {'since' if f.condition else 'at'} {_when(f.wall)}"


def device_story(kind: str, faults: Sequence[FaultRecord]) -> tuple[list[dict[str, Any]], list[str]]:
    """``(diagnosis entries to put first, notes)`` for an engine incident of ``kind``."""
    if kind not in ENGINE_KINDS or not faults:
        return [], []
    blocking = [f for f in faults if f.entry.blocks_restart]
    entries: list[dict[str, Any]] = []
    notes: list[str] = []
    seen: set[tuple[str, str]] = set()
    blocking.sort(key=precedence, reverse=True)  # the one that names the cause first
    for f in blocking:
        if (f.device, f.code) in seen:
            continue
        seen.add((f.device, f.code))
        entries.append(
            {
                "id": f"device-fault:{f.code}",
                "title": f"device fault: {_what(f)}; a restart will not help",
                "confidence": CONFIDENCE,
                "matched": [
                    f"{f.device}: {f.label()} seen by {f.source}" + (f": {f.detail}" if f.detail else ""),
                    f"meaning: {f.entry.meaning}",
                ],
                "advice": f"{f.entry.action.replace('_', ' ')}: {f.entry.what_to_do}",
                "references": [f.entry.source],
                "device_fault": f.to_dict(),
            }
        )
    if entries:
        notes.append(f"{_what(blocking[0])}; a restart will not help")
    for f in faults:
        if f.entry.blocks_restart or (f.device, f.code) in seen:
            continue
        seen.add((f.device, f.code))
        notes.append(f"{_what(f)} ({f.entry.what_to_do})")
    return entries, notes
