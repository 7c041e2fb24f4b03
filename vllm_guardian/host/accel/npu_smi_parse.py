"""Pure parsers for Huawei Ascend ``npu-smi`` output (the layouts: ``tests/fixtures/npu_smi/README.md``).

``parse_info(text)`` reads the ``npu-smi info`` table: a two-row block per chip
(``NPU Name | Health | Power Temp Hugepages`` over ``Chip | Bus-Id | AICore Memory HBM``)
and the process table (``NPU Chip | Process id | Process name | Process memory(MB)``).
The metric columns are read by their header names, so every known layout parses
to the same shape: A2/910B, A3 (two chips per NPU, ``Chip Phy-ID``), 310/310P
(``Chip Device``, no HBM column), 21.x drivers without the Hugepages column,
Ascend 950 (``NPU ID | Name`` cells, ``NPU Util(%)``, ``NPU ID`` process header),
``Warning``/``Alarm`` health, ``NA``/``-`` values, ``20701/ 65536`` (lost space),
trailing spaces, names cut to 15 characters or empty.

``parse_usages(text)`` reads ``npu-smi info -t usages -i <id>`` (``Key : value`` lines).

Anything else raises ``ProbeFailed("unrecognised npu-smi output: ...")``, a number that is
not finite included.

The process name is the one cell another user writes (``comm``: any 15 bytes, ``|`` and line
breaks too). npu-smi pads every line of its process table to the header's length, so a line of
that table with other cells than the header's (a ``|`` in a name) or another length (a line
break in a name cuts its row in two shorter lines, the second of which may read like a row of
another process) is no process: it is left out and counted in ``refused_rows`` (the first
``KEEP_REFUSED`` kept as printed), so one user's process name can neither fail the whole read
nor forge a row for another process.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from vllm_guardian.errors import ProbeFailed

_HEADER_NAME = re.compile(r"(?:[A-Za-z][\w-]* )?[A-Za-z][\w-]*\([^)]*\)")
_PAIR = re.compile(r"(\S+)\s*/\s*(\S+)")
_IDLE = re.compile(r"^No running processes found in NPU\s+(\d+)$", re.IGNORECASE)
_VERSION = re.compile(r"Version:\s*(\S+)")
_MISSING = {"", "NA", "N/A", "-", "--"}
KEEP_REFUSED = 8

# metric column header -> field name (unknown headers land in NpuChip.extra)
_COLUMNS = {
    "Power(W)": "power_w",
    "Temp(C)": "temp_c",
    "Hugepages-Usage(page)": "hugepages",
    "AICore(%)": "aicore_pct",
    "NPU Util(%)": "aicore_pct",
    "Memory-Usage(MB)": "memory",
    "HBM-Usage(MB)": "hbm",
}


def unrecognised(why: str) -> ProbeFailed:
    return ProbeFailed(f"unrecognised npu-smi output: {why}")


@dataclass(frozen=True)
class NpuChip:
    """One chip of one NPU card, as the ``info`` table shows it."""

    npu: int
    chip: int  # chip index on the card (0 when the layout has no chip column)
    name: str
    health: str
    bus_id: str | None
    phy_id: int | None = None  # A3 "Phy-ID" / 310 "Device" column
    power_w: float | None = None
    temp_c: float | None = None
    aicore_pct: float | None = None  # AICore(%), or NPU Util(%) on Ascend 950
    memory_used_mb: int | None = None  # DDR ("Memory-Usage")
    memory_total_mb: int | None = None
    hbm_used_mb: int | None = None  # None when the layout has no HBM column
    hbm_total_mb: int | None = None
    hugepages_used: int | None = None
    hugepages_total: int | None = None
    extra: Mapping[str, str] = field(default_factory=dict)  # columns of unknown meaning, as printed


@dataclass(frozen=True)
class NpuProcess:
    npu: int
    chip: int | None  # None with the ``NPU ID`` process header (one chip per NPU)
    pid: int
    name: str  # cut to 15 characters by npu-smi; may be empty
    memory_mb: int | None


@dataclass(frozen=True)
class NpuSmiInfo:
    version: str | None
    chips: tuple[NpuChip, ...]
    processes: tuple[NpuProcess, ...]
    idle_npus: tuple[int, ...] = ()  # "No running processes found in NPU <n>"
    refused_rows: int = 0  # process rows a process name broke (left out)
    refused_examples: tuple[str, ...] = ()  # the first KEEP_REFUSED of them, as printed


# ------------------------------------------------------------------ value helpers
def _num(tok: str) -> float | None:
    if tok.strip() in _MISSING:
        return None
    try:
        v = float(tok)
    except ValueError:
        raise unrecognised(f"not a number: {tok!r}") from None
    if not math.isfinite(v):
        raise unrecognised(f"not a finite number: {tok!r}")
    return v


def _int(tok: str) -> int | None:
    v = _num(tok)
    return None if v is None else int(v)


def _pair(tok: str) -> tuple[int | None, int | None]:
    used, sep, total = tok.partition("/")
    if not sep:
        if tok.strip() in _MISSING:
            return None, None
        raise unrecognised(f"expected used/total, got {tok!r}")
    return _int(used), _int(total)


def _tokens(values: str) -> list[str]:
    """Split a metric cell into values, ``a / b`` and ``a/ b`` kept as one ``a/b`` token."""
    return _PAIR.sub(r"\1/\2", values).split()


def _cells(line: str) -> list[str]:
    body = line.strip()
    return [c.strip() for c in body[1:-1].split("|")]


def _is_row(line: str) -> bool:
    s = line.strip()
    return len(s) >= 2 and s.startswith("|") and s.endswith("|")


def _is_broken(line: str) -> bool:
    """A table line a line break cut (in a process name): it starts with ``|``, does not end with one."""
    s = line.strip()
    return s.startswith("|") and not s.endswith("|")


# ------------------------------------------------------------------ npu-smi info
@dataclass
class _Layout:
    split: bool  # Ascend 950: "NPU ID | Name | Health | ..." (name in its own cell)
    row1: list[str]  # metric headers of the first row (Power, Temp, Hugepages)
    row2: list[str]  # metric headers of the second row (AICore, Memory, HBM)
    chip_cols: list[str]  # columns after "Chip" in the second row header ("Phy-ID", "Device")


def _header_names(cell: str) -> list[str]:
    names = _HEADER_NAME.findall(cell)
    if not names:
        raise unrecognised(f"no column names in header {cell!r}")
    return names


def _device_header(c1: list[str], c2: list[str]) -> _Layout:
    if len(c1) == 4 and c1[0].upper() == "NPU ID" and c1[1] == "Name":  # Ascend 950
        if len(c2) != 4:
            raise unrecognised("second header row does not match the first")
        return _Layout(True, _header_names(c1[3]), _header_names(c2[3]), [])
    if len(c1) != 3 or len(c2) != 3 or not c2[0].startswith("Chip"):
        raise unrecognised(f"device header {c1!r} / {c2!r}")
    return _Layout(False, _header_names(c1[2]), _header_names(c2[2]), c2[0].split()[1:])


def _metrics(names: list[str], cell: str, where: str) -> dict[str, str]:
    toks = _tokens(cell)
    if len(toks) != len(names):
        raise unrecognised(f"{where}: {len(toks)} values for columns {names}")
    return dict(zip(names, toks, strict=True))


def _chip(layout: _Layout, r1: list[str], r2: list[str]) -> NpuChip:
    if layout.split:
        if len(r1) != 4 or len(r2) != 4:
            raise unrecognised(f"device row {r1!r}")
        npu, name, health, m1 = _int(r1[0]), r1[1], r1[2], r1[3]
        chip, phy, bus, m2 = (_int(r2[0]) if r2[0] else 0), None, r2[2], r2[3]
    else:
        if len(r1) != 3 or len(r2) != 3:
            raise unrecognised(f"device row {r1!r}")
        first = r1[0].split(None, 1)
        npu, name, health, m1 = _int(first[0]) if first else None, (first[1] if len(first) > 1 else ""), r1[1], r1[2]
        ids = r2[0].split()
        if len(ids) != 1 + len(layout.chip_cols):
            raise unrecognised(f"chip cell {r2[0]!r} for columns Chip {layout.chip_cols}")
        chip = _int(ids[0])
        phy = _int(ids[1]) if len(ids) > 1 else None
        bus, m2 = r2[1], r2[2]
    if npu is None or chip is None or not health:
        raise unrecognised(f"device row {r1!r} / {r2!r}")
    values = {**_metrics(layout.row1, m1, f"NPU {npu}"), **_metrics(layout.row2, m2, f"NPU {npu} chip {chip}")}
    known: dict[str, Any] = {}  # NpuChip's numeric fields by name
    extra: dict[str, str] = {}
    for col, tok in values.items():
        key = _COLUMNS.get(col)
        if key is None:
            extra[col] = tok
        elif key in ("memory", "hbm", "hugepages"):
            used, total = _pair(tok)
            known[f"{key}_used" if key == "hugepages" else f"{key}_used_mb"] = used
            known[f"{key}_total" if key == "hugepages" else f"{key}_total_mb"] = total
        elif key == "aicore_pct" and known.get("aicore_pct") is not None:
            extra[col] = tok  # both AICore and NPU Util: keep the first, record the other
        else:
            known[key] = _num(tok)
    return NpuChip(
        npu=npu,
        chip=chip,
        name=name,
        health=health,
        bus_id=None if bus in _MISSING else bus,
        phy_id=phy,
        extra=extra,
        **known,
    )


@dataclass
class _ProcColumns:
    has_chip: bool
    pid: int
    name: int
    memory: int
    width: int  # cells of the header; a row with another count has a "|" in its name
    line_len: int  # the header line's length: npu-smi pads every row to it; a line break cuts one short


def _process_header(cells: list[str], line_len: int) -> _ProcColumns:
    low = [c.lower() for c in cells]
    try:
        pid, name = low.index("process id"), low.index("process name")
    except ValueError:
        raise unrecognised(f"process header {cells!r}") from None
    memory = next((i for i, c in enumerate(low) if c.startswith("process memory")), -1)
    if memory < 0 or pid == 0:
        raise unrecognised(f"process header {cells!r}")
    first = cells[0].split()
    has_chip = len(first) > 1 and first[1] == "Chip"
    return _ProcColumns(has_chip=has_chip, pid=pid, name=name, memory=memory, width=len(cells), line_len=line_len)


def _process(cols: _ProcColumns, cells: list[str]) -> NpuProcess:
    ids = cells[0].split()
    if len(ids) != (2 if cols.has_chip else 1):
        raise unrecognised(f"process row {cells!r}")
    npu, pid = _int(ids[0]), _int(cells[cols.pid])
    if npu is None or pid is None:
        raise unrecognised(f"process row {cells!r}")
    chip = _int(ids[1]) if cols.has_chip else None
    return NpuProcess(npu, chip, pid, cells[cols.name], _int(cells[cols.memory]))


def _is_device_header(cells: list[str]) -> bool:
    return bool(cells) and cells[0].startswith("NPU") and "Health" in cells


def _is_process_header(cells: list[str]) -> bool:
    return bool(cells) and cells[0].startswith("NPU") and any(c.lower() == "process id" for c in cells)


def parse_info(text: str) -> NpuSmiInfo:
    """Parse ``npu-smi info``. Raises ``ProbeFailed`` on anything it does not recognise."""
    lines = [line.rstrip() for line in text.splitlines() if _is_row(line) or _is_broken(line)]
    rows: list[list[str] | None] = [_cells(line) if _is_row(line) else None for line in lines]
    version: str | None = None
    layout: _Layout | None = None
    pcols: _ProcColumns | None = None
    pending: list[list[str]] = []
    chips: list[NpuChip] = []
    procs: list[NpuProcess] = []
    idle: list[int] = []
    refused: list[str] = []
    i = 0
    while i < len(rows):
        row = rows[i]
        i += 1
        if row is None:  # a line break cut this line: above the process table no user writes, ignore it
            if pcols is not None:
                refused.append(lines[i - 1])
            continue
        cells = row
        if len(cells) == 1 and cells[0].startswith("npu-smi"):
            m = _VERSION.search(cells[0])
            version = m.group(1) if m else cells[0].split()[1] if len(cells[0].split()) > 1 else None
            continue
        idle_match = _IDLE.match(cells[0]) if len(cells) == 1 else None
        if idle_match:
            idle.append(int(idle_match.group(1)))
            continue
        if _is_process_header(cells):
            pcols = _process_header(cells, len(lines[i - 1]))
            continue
        if _is_device_header(cells):
            second = rows[i] if i < len(rows) else None
            if second is None:
                raise unrecognised("device header without its second row")
            layout = _device_header(cells, second)
            i += 1
            continue
        if pcols is not None:
            if len(cells) != pcols.width or len(lines[i - 1]) != pcols.line_len:
                refused.append(lines[i - 1])  # a "|" or a line break in a process name: no row to trust
                continue
            procs.append(_process(pcols, cells))
        elif layout is not None:
            pending.append(cells)
            if len(pending) == 2:
                chips.append(_chip(layout, *pending))
                pending = []
        else:
            raise unrecognised(f"row before any header: {'|'.join(cells)!r}")
    if layout is None:
        raise unrecognised("no device table" if text.strip() else "empty output")
    if pending:
        raise unrecognised(f"device block with one row: {pending[0]!r}")
    if not chips:
        raise unrecognised("device table without devices")
    return NpuSmiInfo(version, tuple(chips), tuple(procs), tuple(idle), len(refused), tuple(refused[:KEEP_REFUSED]))


# ------------------------------------------------------------------ npu-smi info -t usages
@dataclass(frozen=True)
class NpuUsage:
    """One chip's section of ``npu-smi info -t usages -i <npu>``; values keyed as printed."""

    npu: int
    chip: int | None
    values: Mapping[str, float | None]

    def get(self, key: str) -> float | None:
        return self.values.get(key)

    @property
    def hbm_capacity_mb(self) -> float | None:
        return self.get("HBM Capacity(MB)")

    @property
    def hbm_usage_pct(self) -> float | None:
        return self.get("HBM Usage Rate(%)")

    @property
    def aicore_pct(self) -> float | None:
        v = self.get("Aicore Usage Rate(%)")
        return v if v is not None else self.get("NPU Utilization(%)")


def parse_usages(text: str) -> tuple[NpuUsage, ...]:
    """Parse ``npu-smi info -t usages -i <id>`` (also ``-t common``).

    A ``Chip ID`` line labels the values before it when they have no chip yet
    (the usages layout prints it last), else starts a new section (the common
    layout prints it first). A ``Chip Name : mcu`` section (management chip) is
    dropped. Raises ``ProbeFailed`` when there is no ``NPU ID``.
    """
    npu: int | None = None
    sections: list[dict[str, Any]] = []
    cur: dict[str, Any] = {"chip": None, "values": {}, "mcu": False}
    for line in text.splitlines():
        key, sep, val = line.partition(":")
        key, val = key.strip(), val.strip()
        if not sep or not key:
            continue
        if key == "NPU ID":
            npu = _int(val)
        elif key == "Chip Count":
            continue
        elif key == "Chip ID":
            chip = _int(val)
            if cur["values"] and cur["chip"] is None:
                cur["chip"] = chip
                sections.append(cur)
                cur = {"chip": None, "values": {}, "mcu": False}
            else:
                if cur["values"] or cur["chip"] is not None:
                    sections.append(cur)
                cur = {"chip": chip, "values": {}, "mcu": False}
        elif key == "Chip Name":
            if cur["values"] or cur["chip"] is not None:
                sections.append(cur)
            cur = {"chip": None, "values": {}, "mcu": val.lower() == "mcu"}
        else:
            try:
                cur["values"][key] = _num(val)
            except ProbeFailed:
                cur["values"][key] = None
    if cur["values"] or cur["chip"] is not None:
        sections.append(cur)
    if npu is None:
        raise unrecognised("usages without an NPU ID")
    out = tuple(NpuUsage(npu, s["chip"], dict(s["values"])) for s in sections if not s["mcu"] and s["values"])
    if not out:
        raise unrecognised("usages without values")
    return out
