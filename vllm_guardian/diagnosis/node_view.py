"""The node's accelerators, as ``npu-smi info`` / ``nvtop`` show them, in one list (pure).

Input: the rows the accelerator probe made (``probes/accel_rows.py``: every device NVML or
npu-smi reported, whether or not a target uses it, its processes' owners named), one per device::

    {"device": "npu:0.0", "backend": "npu_smi", "name": "310P3", "health": "OK",
     "utilization_pct": 0.0, "utilization_label": "AICore",
     "memory_kind": "ddr" | "hbm" | "vram", "memory_used_bytes": …, "memory_total_bytes": …,
     "processes": [{"pid": 123, "name": "VLLMEngineCor", "memory_bytes": …,
                    "target": "vllm-8000" | null, "role": "engine_core" | null}], "read_age_s": 0.4}

``with_faults`` adds what the fault ledger holds (``fault_health`` 0 ok / 1 warning / 2 critical,
``fault``: the worst fault in words, ``fault_codes``) and a row for a device only the kernel log
named; ``render_table`` writes the same rows as text for ``guardian status`` /
``guardian probe --once``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence


GIB = 1024**3


@dataclass(frozen=True)
class DeviceProcess:
    pid: int
    name: str | None
    memory_bytes: float | None
    target: str | None  # the target the process belongs to; None: no target
    role: str | None


@dataclass(frozen=True)
class DeviceRow:
    """One device of the status's node ``accelerators`` table (a row only the fault ledger knows
    has its fault columns and ``None`` for what no backend read)."""

    device: str
    backend: str
    name: str | None = None
    health: str | None = None
    utilization_pct: float | None = None
    utilization_label: str | None = None
    memory_kind: str | None = None  # ddr | hbm | vram
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    processes: tuple[DeviceProcess, ...] = ()
    read_age_s: float | None = None
    fault_health: int = 0  # 0 ok, 1 warning, 2 critical
    fault: str | None = None  # the worst fault in words
    fault_codes: tuple[str, ...] = ()


def _num(v: Any) -> float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def device_rows(rows: Sequence[Mapping[str, Any]]) -> tuple[DeviceRow, ...]:
    """The rows of ``with_faults`` as typed status rows."""
    return tuple(
        DeviceRow(
            str(r["device"]),
            str(r.get("backend") or ""),
            _str(r.get("name")),
            _str(r.get("health")),
            _num(r.get("utilization_pct")),
            _str(r.get("utilization_label")),
            _str(r.get("memory_kind")),
            _num(r.get("memory_used_bytes")),
            _num(r.get("memory_total_bytes")),
            _num(r.get("power_w")),
            _num(r.get("temperature_c")),
            tuple(
                DeviceProcess(
                    int(p["pid"]), _str(p.get("name")), _num(p.get("memory_bytes")), p.get("target"), p.get("role")
                )
                for p in r.get("processes") or ()
            ),
            _num(r.get("read_age_s")),
            int(r.get("fault_health") or 0),
            _str(r.get("fault")),
            tuple(str(c) for c in r.get("fault_codes") or ()),
        )
        for r in rows
    )


def with_faults(rows: Sequence[Mapping[str, Any]], faults: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The node rows with each device's fault columns; devices known only from their faults appended."""
    out: list[dict[str, Any]] = []
    for r in rows:
        st = faults.get(r["device"])
        out.append({**r, **_fault_cols(st)} if st else {**r, "fault_health": 0})
    known = {r["device"] for r in rows}
    for dev, st in faults.items():
        if dev not in known:
            out.append(
                {"device": dev, "backend": dev.split(":", 1)[0], "name": st.get("name") or "", **_fault_cols(st)}
            )
    return out


def _fault_cols(st: Mapping[str, Any] | None) -> dict[str, Any]:
    if not st:
        return {"fault_health": 0}
    worst = st.get("worst") or {}
    code = str(worst.get("code", ""))
    label = f"Xid {code[4:]}" if code.startswith("xid:") else code
    words = (
        f"{label} ({worst.get('title')}); {'a restart will not help' if worst.get('blocks_restart') else 'annotates'}"
    )
    return {
        "fault_health": st.get("health", 0),
        "fault": words if worst else None,
        "fault_codes": sorted({f.get("code") for f in st.get("faults") or ()}),
    }


def _gib(v: Any) -> str:
    return "?" if v is None else f"{v / GIB:.1f}"


def render_table(rows: Sequence[DeviceRow]) -> str:
    """The rows as an aligned text table (empty list → one line saying so)."""
    if not rows:
        return "accelerators: none reported (no NVML device, no npu-smi)\n"
    out = ["accelerators:"]
    for r in rows:
        util = "?" if r.utilization_pct is None else f"{r.utilization_pct:g} %"
        mem = f"{(r.memory_kind or '').upper() or 'mem'} {_gib(r.memory_used_bytes)}/{_gib(r.memory_total_bytes)} GiB"
        out.append(
            f"  {r.device:<10} {r.name or '?':<14} health {r.health or '?':<8} "
            f"{r.utilization_label or 'util'} {util:<7} {mem}"
        )
        if r.fault:
            level = {2: "FAULT", 1: "warning"}.get(r.fault_health, "info")
            out.append(f"      {level}: {r.fault}")
        for p in r.processes:
            owner = f"target {p.target} ({p.role})" if p.target else "no target"
            out.append(f"      pid {p.pid:<8} {p.name or '':<16} {_gib(p.memory_bytes)} GiB  {owner}")
    return "\n".join(out) + "\n"


def target_utilization(rows: Sequence[Mapping[str, Any]], target: str) -> float | None:
    """0..1: the busiest device one of the target's processes sits on (None when it has none or no number)."""
    vals = [
        r["utilization_pct"]
        for r in rows
        if r.get("utilization_pct") is not None and any(p.get("target") == target for p in r.get("processes") or ())
    ]
    return max(vals) / 100.0 if vals else None
