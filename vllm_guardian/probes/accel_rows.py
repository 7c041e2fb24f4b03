"""The node's accelerators as the probe read them, one row per device, owners named (pure).

Input: the accelerator snapshots the probe read (every device NVML or npu-smi reported, whether
or not a target uses it) and the targets' snapshotted trees. Output: the rows of the status
document's top-level ``accelerators`` list (their shape: ``diagnosis/node_view.py``, which adds
the fault ledger's columns and renders them).
"""

from __future__ import annotations

from typing import Any, Iterable

from vllm_guardian.host.accel import AccelSnapshot
from vllm_guardian.model import Target


def _owners(targets: Iterable[Target]) -> dict[int, tuple[str, str]]:
    out: dict[int, tuple[str, str]] = {}
    for t in targets:
        for p in t.processes:
            out[p.pid] = (t.name, p.role.value)
    return out


def accelerator_rows(
    snapshots: Iterable[tuple[float, AccelSnapshot]], targets: Iterable[Target], now: float
) -> list[dict[str, Any]]:
    """Every device of every snapshot, with its processes and their owning targets; sorted by device id."""
    owners = _owners(targets)
    rows: list[dict[str, Any]] = []
    for read_at, snap in snapshots:
        procs: dict[str, list[dict[str, Any]]] = {}
        for p in snap.processes:
            owner = owners.get(p.pid)
            procs.setdefault(p.device, []).append(
                {
                    "pid": p.pid,
                    "name": p.name,
                    "memory_bytes": p.memory_bytes,
                    "target": owner[0] if owner else None,
                    "role": owner[1] if owner else None,
                }
            )
        for d in snap.devices:
            extra = dict(d.extra)
            npu = d.backend == "npu_smi"
            label = "AICore" if npu else "GPU"
            if npu and "usages" in extra and "NPU Utilization(%)" in (extra.get("usages") or {}):
                label = "NPU"
            rows.append(
                {
                    "device": d.id,
                    "backend": d.backend,
                    "name": d.name,
                    "health": d.health,
                    "utilization_pct": None if d.utilization is None else round(d.utilization * 100, 1),
                    "utilization_label": label,
                    "memory_kind": extra.get("memory_kind", "vram" if not npu else "hbm"),
                    "memory_used_bytes": d.memory_used_bytes,
                    "memory_total_bytes": d.memory_total_bytes,
                    "power_w": d.power_w,
                    "temperature_c": d.temperature_c,
                    "processes": sorted(procs.get(d.id, []), key=lambda r: r["pid"]),
                    "read_age_s": round(max(0.0, now - read_at), 3),
                }
            )
    return sorted(rows, key=lambda r: device_sort_key(r["device"]))


def device_sort_key(dev: str) -> tuple:
    """``npu:0.10`` after ``npu:0.2``: the kind, then each number as a number."""
    kind, _, rest = dev.partition(":")
    nums = []
    for part in rest.split("."):
        nums.append(int(part) if part.isdigit() else 0)
    return (kind, tuple(nums))
