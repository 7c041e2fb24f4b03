"""npu-smi backend: runs ``npu-smi info`` (and ``info -t usages -i <id>``) through the
command runner with a timeout, and turns the parsed tables into an ``AccelSnapshot``.

The binary is looked up at construction (absent: ``BackendUnavailable``, one
line). A read runs ``npu-smi info`` once; at most one ``-t usages`` call per
read (round robin over the cards, each card at most every ``usages_interval``
seconds) adds HBM capacity / usage rate and the DDR figures to the device's
``extra`` numbers. A timeout, a non-zero exit or an unrecognised table is
``ProbeFailed`` (the daemon logs it once per episode); a failed usages call only
leaves a note. Device memory is the HBM column when the layout has one (A2, A3,
950), else the DDR ``Memory-Usage`` column (310/310P); values are MiB.

Device health: a chip whose table health is not OK gets the condition
``npu_health:<status>``; for its card ``npu-smi info -t health -i <id>`` is run (at most
``MAX_HEALTH_CALLS`` cards a read) and each error code it prints becomes ``npu_error:<code>``
on the card's unhealthy chips, the error information in the detail. A failed health call
leaves a note; the table's status still stands.

Output past ``MAX_OUTPUT`` is ``ProbeFailed`` (a cut table is not read). Process rows a process
name broke (a ``|`` or a line break in it, ``npu_smi_parse``) are left out and refused as
``broken_row``: counted, never a process.
"""

from __future__ import annotations

import shutil
from typing import Callable

from vllm_guardian.errors import BackendUnavailable, ProbeFailed
from vllm_guardian.host.runner import CommandResult, CommandRunner
from vllm_guardian.host.accel import (
    EXAMPLE_CHARS,
    MIB,
    AccelSnapshot,
    DeviceCondition,
    DeviceReading,
    ProcessUsage,
    Refused,
)
from vllm_guardian.host.accel.npu_smi_health import NpuHealth, parse_health
from vllm_guardian.host.accel.npu_smi_parse import NpuChip, NpuSmiInfo, NpuUsage, parse_info, parse_usages

MAX_OUTPUT = 1024 * 1024
MAX_HEALTH_CALLS = 2
HEALTHY = ("OK", "", None)
BROKEN_ROW = "broken_row"  # a process row a process name broke (a "|" or a line break in it)


def device_id(npu: int, chip: int | None) -> str:
    return f"npu:{npu}.{chip or 0}"


def _mib(v: float | None) -> int | None:
    return None if v is None else int(v * MIB)


def chip_conditions(c: NpuChip, health: NpuHealth | None) -> tuple[DeviceCondition, ...]:
    """An unhealthy chip's conditions: its status, and the codes of its card's health call."""
    if c.health in HEALTHY:
        return ()
    info = health.information if health is not None else ""
    out = [DeviceCondition(f"npu_health:{c.health}", info or f"npu-smi health {c.health}")]
    if health is not None:
        out += [DeviceCondition(f"npu_error:{code}", info) for code in health.codes]
    return tuple(out)


def chip_reading(
    c: NpuChip, usage: NpuUsage | None = None, conditions: tuple[DeviceCondition, ...] = ()
) -> DeviceReading:
    """One chip as a device: HBM when the layout has it, else the DDR memory column."""
    has_hbm = c.hbm_total_mb is not None and c.hbm_total_mb > 0
    used: float | None = c.hbm_used_mb if has_hbm else c.memory_used_mb
    total: float | None = c.hbm_total_mb if has_hbm else c.memory_total_mb
    extra: dict[str, object] = {"npu": c.npu, "chip": c.chip, "memory_kind": "hbm" if has_hbm else "ddr"}
    for key in (
        "bus_id",
        "phy_id",
        "memory_used_mb",
        "memory_total_mb",
        "hbm_used_mb",
        "hbm_total_mb",
        "hugepages_used",
        "hugepages_total",
    ):
        if getattr(c, key) is not None:
            extra[key] = getattr(c, key)
    extra.update(c.extra)
    util = c.aicore_pct
    if usage is not None:
        extra["usages"] = dict(usage.values)
        if util is None:
            util = usage.aicore_pct
        if used is None and usage.hbm_capacity_mb and usage.hbm_usage_pct is not None:
            total = usage.hbm_capacity_mb
            used = usage.hbm_capacity_mb * usage.hbm_usage_pct / 100.0
    return DeviceReading(
        id=device_id(c.npu, c.chip),
        backend="npu_smi",
        name=c.name,
        memory_used_bytes=_mib(used),
        memory_total_bytes=_mib(total),
        utilization=None if util is None else util / 100.0,
        health=c.health,
        power_w=c.power_w,
        temperature_c=c.temp_c,
        extra=extra,
        conditions=conditions,
    )


def snapshot_of(
    info: NpuSmiInfo,
    usages: dict[tuple[int, int], NpuUsage] | None = None,
    notes: tuple[str, ...] = (),
    health: dict[int, NpuHealth] | None = None,
) -> AccelSnapshot:
    usages, health = usages or {}, health or {}
    devices = tuple(
        chip_reading(c, usages.get((c.npu, c.chip)), chip_conditions(c, health.get(c.npu))) for c in info.chips
    )
    procs = tuple(ProcessUsage(p.pid, device_id(p.npu, p.chip), _mib(p.memory_mb), p.name) for p in info.processes)
    refused = (
        (Refused(BROKEN_ROW, info.refused_rows, info.refused_examples[0][:EXAMPLE_CHARS]),) if info.refused_rows else ()
    )
    return AccelSnapshot("npu_smi", devices, procs, (), notes, refused)


class NpuSmiBackend:
    name = "npu_smi"
    refusal_reasons = (BROKEN_ROW,)

    def __init__(
        self,
        runner: CommandRunner,
        path: str = "npu-smi",
        timeout: float = 5.0,
        *,
        interval: float = 5.0,
        usages_interval: float | None = 60.0,
        which: Callable[[str], str | None] = shutil.which,
    ) -> None:
        found = which(path)
        if found is None:
            raise BackendUnavailable(f"npu-smi: {path!r} not found (accelerators.npu_smi_path)")
        self.path = found
        self.runner = runner
        self.timeout = timeout
        self.interval = interval
        self.usages_interval = usages_interval
        self._usages: dict[tuple[int, int], NpuUsage] = {}
        self._usages_at: dict[int, float] = {}

    def _run(self, *args: str) -> str:
        argv = (self.path, *args)
        what = " ".join(("npu-smi",) + args)
        try:
            res: CommandResult = self.runner.run(argv, self.timeout, max_output=MAX_OUTPUT)
        except BackendUnavailable as e:
            raise ProbeFailed(str(e)) from None
        if res.timed_out:
            raise ProbeFailed(f"{what} timed out after {self.timeout:g}s")
        if res.returncode != 0:
            first = (res.error_text.strip() or res.text.strip()).splitlines()
            raise ProbeFailed(f"{what} exited {res.returncode}: {first[0][:EXAMPLE_CHARS] if first else 'no output'}")
        if res.truncated:
            raise ProbeFailed(f"{what} printed more than {MAX_OUTPUT} bytes: not read")
        return res.text

    def read(self, now: float) -> AccelSnapshot:
        info = parse_info(self._run("info"))
        notes: list[str] = []
        npu = self._due_usages(info, now)
        if npu is not None:
            self._usages_at[npu] = now
            try:
                for u in parse_usages(self._run("info", "-t", "usages", "-i", str(npu))):
                    self._usages[(u.npu, u.chip or 0)] = u
            except ProbeFailed as e:
                notes.append(f"usages of NPU {npu}: {e}")
        return snapshot_of(info, self._usages, tuple(notes), self._health_of(info, notes))

    def _health_of(self, info: NpuSmiInfo, notes: list[str]) -> dict[int, NpuHealth]:
        """``info -t health`` of the cards with an unhealthy chip (the worst block of each)."""
        out: dict[int, NpuHealth] = {}
        sick = sorted({c.npu for c in info.chips if c.health not in HEALTHY})
        for npu in sick[:MAX_HEALTH_CALLS]:
            try:
                blocks = parse_health(self._run("info", "-t", "health", "-i", str(npu)))
            except (ProbeFailed, ValueError) as e:
                notes.append(f"health of NPU {npu}: {e}")
                continue
            codes = tuple(dict.fromkeys(code for b in blocks for code in b.codes))
            text = "; ".join(b.information for b in blocks if b.information)
            out[npu] = NpuHealth(npu, None, blocks[0].status, codes, text)
        return out

    def _due_usages(self, info: NpuSmiInfo, now: float) -> int | None:
        """The card whose usages are most overdue, or None."""
        if self.usages_interval is None:
            return None
        npus = sorted({c.npu for c in info.chips})
        due = [n for n in npus if now - self._usages_at.get(n, float("-inf")) >= self.usages_interval]
        return min(due, key=lambda n: (self._usages_at.get(n, float("-inf")), n)) if due else None

    def close(self) -> None:
        return None
