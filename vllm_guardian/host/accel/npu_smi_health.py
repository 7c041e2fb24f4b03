"""Parser of ``npu-smi info -t health -i <id>`` (pure): health status and error codes per chip.

Formats seen (fixtures: tests/fixtures/npu_smi/health_*.txt), indented ``Key : value`` lines:

- device level (npu-smi reference, ``info -t health``): ``NPU ID : 0``, ``Health : OK``,
  ``Error Code : NA``, ``Error Information : NA``;
- chip level (``-c 0``, Ascend mind-cluster fault-diagnosis guide): ``Health Status : OK``, ...;
- an alarm: ``Health Status : Warning``, ``Error Code : 80E01801``, ``Error Information : node
  type=SOC, sensor type=Temperature``; several codes are separated by commas or spaces.

A ``Chip ID`` line starts a new chip section (multi-chip cards). ``NA`` / empty means none. The
status is one of OK, Warning, Alarm, Critical, UNKNOWN (normalised to that spelling; anything
else is kept as printed). Text with no health line is ``ValueError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STATUSES = {"ok": "OK", "warning": "Warning", "alarm": "Alarm", "critical": "Critical", "unknown": "UNKNOWN"}
_CODE = re.compile(r"[0-9A-Fa-fx]+")


@dataclass(frozen=True)
class NpuHealth:
    npu: int | None
    chip: int | None
    status: str
    codes: tuple[str, ...] = ()
    information: str = ""


def _none(v: str) -> str:
    return "" if v.strip().upper() in ("", "NA", "N/A", "-") else v.strip()


def parse_health(text: str) -> list[NpuHealth]:
    out: list[NpuHealth] = []
    npu: int | None = None
    cur: dict[str, str] = {}

    def flush() -> None:
        if "status" in cur:
            codes = tuple(c.upper() for c in _CODE.findall(_none(cur.get("code", ""))))
            status = STATUSES.get(cur["status"].lower(), cur["status"])
            chip = int(cur["chip"]) if cur.get("chip", "").isdigit() else None
            out.append(NpuHealth(npu, chip, status, codes, _none(cur.get("info", ""))))

    for line in text.splitlines():
        key, sep, val = line.partition(":")
        if not sep:
            continue
        k, v = key.strip().lower(), val.strip()
        if k == "npu id":
            npu = int(v) if v.isdigit() else None
        elif k == "chip id":
            if "status" in cur:
                flush()
                cur = {}
            cur["chip"] = v
        elif k in ("health", "health status"):
            if "status" in cur:
                flush()
                cur = {}
            cur["status"] = v
        elif k == "error code":
            cur["code"] = v
        elif k == "error information":
            cur["info"] = v
    flush()
    if not out:
        raise ValueError("no Health line in npu-smi health output")
    return out
