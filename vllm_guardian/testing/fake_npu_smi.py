"""A fake ``npu-smi`` executable that replays scripted curves, for fast tiers and demos.

Run as ``python -m vllm_guardian.testing.fake_npu_smi --scenario FILE [--state FILE] info
[-t usages -i N]``; ``write_fake_npu_smi(dir, scenario)`` writes a tiny wrapper script
named ``npu-smi`` that can be used as ``accelerators.npu_smi_path``.

Time (seconds since the scenario started) comes from the state file
(``{"t": seconds}``, written by ``FakeNpuSmi.set_time``) when one is given, else
from the wall clock minus the scenario's ``epoch``. A scenario (JSON or YAML)::

    layout: a2                     # a2 | a3 | 310p | 950 (the layouts of tests/fixtures/npu_smi/)
    devices:
      - {npu: 0, chip: 0, name: 910B3, health: OK, power: 90.5, temp: 40,
         aicore: <curve %>, hbm_total_mb: 65536, base_mb: 3000}   # hbm_used_mb: <curve> overrides
      - {npu: 1, chip: 0, alarm: {at: 30, health: Alarm, codes: [80E01801], info: "sensor type=Temperature"}}
    processes:
      - {npu: 0, chip: 0, pid: 4242, name: python, memory_mb: <curve>}
    fail: {mode: garbage | exit | hang, from: 0, until: null, hang_s: 3600}

Device memory used defaults to ``base_mb`` plus its processes' memory; 310p
layouts report it in the DDR column (``memory_total_mb``), others in HBM. A device's ``alarm``
turns its health (table and ``info -t health -i <npu>``) from ``at`` seconds on; the health
output is the device-level form of the npu-smi reference (``NPU ID``, ``Health``, ``Error Code``,
``Error Information``), the worst chip's status and every chip's codes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from vllm_guardian.fsutil import atomic_write
from vllm_guardian.testing.curves import curve

LAYOUTS = ("a2", "a3", "310p", "950")
_PKG_ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ scenario values
def load(path: str | Path) -> dict[str, Any]:
    text = Path(path).read_text(encoding="utf-8")
    if str(path).endswith((".yaml", ".yml")):
        import yaml

        return dict(yaml.safe_load(text) or {})
    return dict(json.loads(text))


def _val(spec: Any, t: float, default: float = 0.0) -> float:
    return default if spec is None else curve(spec).value(t)


def _proc_mb(p: Mapping[str, Any], t: float) -> int:
    return max(0, int(round(_val(p.get("memory_mb"), t))))


def _chip_key(x: Mapping[str, Any]) -> tuple[int, int]:
    return int(x.get("npu", 0)), int(x.get("chip", 0))


def _fmt(v: float | None) -> str:
    if v is None:
        return "NA"
    return f"{v:.1f}" if v != int(v) else f"{int(v)}"


def _health(d: Mapping[str, Any], t: float) -> tuple[str, list[str], str]:
    alarm = d.get("alarm")
    if alarm and t >= float(alarm.get("at", 0)):
        return str(alarm.get("health", "Alarm")), [str(c) for c in alarm.get("codes", [])], str(alarm.get("info", ""))
    return str(d.get("health", "OK")), [], ""


RANK = {"OK": 0, "Warning": 1, "Alarm": 2, "Critical": 3, "UNKNOWN": 4}


def render_health(sc: Mapping[str, Any], npu: int, t: float) -> str:
    """``npu-smi info -t health -i <npu>``."""
    chips = [d for d in sc.get("devices", []) if _chip_key(d)[0] == npu]
    if not chips:
        raise KeyError(npu)
    healths = [_health(d, t) for d in chips]
    status = max((h[0] for h in healths), key=lambda h: RANK.get(h, 0))
    codes = [c for h in healths for c in h[1]]
    info = "; ".join(h[2] for h in healths if h[2])
    lines = [
        ("NPU ID", str(npu)),
        ("Health", status),
        ("Error Code", ",".join(codes) or "NA"),
        ("Error Information", info or "NA"),
    ]
    return "\n".join(f"        {k:<31}: {v}" for k, v in lines) + "\n"


def _device_numbers(sc: Mapping[str, Any], d: Mapping[str, Any], t: float) -> dict[str, Any]:
    procs = [p for p in sc.get("processes", []) if _chip_key(p) == _chip_key(d)]
    used = d.get("hbm_used_mb") if sc.get("layout", "a2") != "310p" else d.get("memory_used_mb")
    mem = (
        int(round(_val(used, t)))
        if used is not None
        else int(round(float(d.get("base_mb", 0)))) + sum(_proc_mb(p, t) for p in procs)
    )
    return {
        "power": None if d.get("power", 90.0) is None else _val(d.get("power", 90.0), t),
        "temp": int(round(_val(d.get("temp", 40), t))),
        "aicore": max(0, min(100, int(round(_val(d.get("aicore", 0), t))))),
        "mem": mem,
        "hbm_total": int(d.get("hbm_total_mb", 65536)),
        "ddr_total": int(d.get("memory_total_mb", 0 if sc.get("layout", "a2") != "310p" else 44280)),
    }


# ------------------------------------------------------------------ rendering
def _row(*cells: str, widths: Sequence[int]) -> str:
    return "| " + " | ".join(f"{c:<{w}}" for c, w in zip(cells, widths, strict=True)) + " |"


def render_info(sc: Mapping[str, Any], t: float) -> str:
    """The ``npu-smi info`` table of the scenario at time ``t``."""
    layout = sc.get("layout", "a2")
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} not one of {LAYOUTS}")
    devices = sorted(sc.get("devices", []), key=_chip_key)
    split = layout == "950"
    w = (6, 16, 13, 51) if split else (25, 13, 51)
    bar = "+" + "+".join("-" * (x + 2) for x in w) + "+"
    dbl = bar.replace("-", "=")
    out = [bar, "| " + "npu-smi 25.2.0                   Version: 25.2.0".ljust(len(bar) - 4) + " |", bar]
    if split:
        out += [
            _row("NPU ID", "Name", "Health", "Power(W)    Temp(C)           Hugepages-Usage(page)", widths=w),
            _row("", "", "Bus-Id", "NPU Util(%) Memory-Usage(MB)  HBM-Usage(MB)", widths=w),
        ]
    else:
        chip_head = {"a2": "Chip", "a3": "Chip  Phy-ID", "310p": "Chip    Device"}[layout]
        metrics2 = "AICore(%)   Memory-Usage(MB)" + ("" if layout == "310p" else "  HBM-Usage(MB)")
        out += [
            _row("NPU   Name", "Health", "Power(W)    Temp(C)           Hugepages-Usage(page)", widths=w),
            _row(chip_head, "Bus-Id", metrics2, widths=w),
        ]
    out.append(dbl)
    for i, d in enumerate(devices):
        n = _device_numbers(sc, d, t)
        npu, chip = _chip_key(d)
        m1 = f"{_fmt(n['power']):<12}{n['temp']:<18}{'0':<5}/ {'0':<13}"
        bus = d.get("bus_id", f"0000:{(npu * 2 + chip) % 256:02X}:00.0")
        if layout == "310p":
            m2 = f"{n['aicore']:<12}{n['mem']:<5}/ {n['ddr_total']:<13}"
        else:
            m2 = f"{n['aicore']:<12}{'0':<5}/ {'0':<11}{n['mem']:<5}/ {n['hbm_total']:<13}"
        if split:
            out += [
                _row(str(npu), d.get("name", "Ascend950PR"), _health(d, t)[0], m1, widths=w),
                _row("", "", bus, m2, widths=w),
            ]
        else:
            ids = f"{chip}" if layout == "a2" else f"{chip:<6}{i}" if layout == "a3" else f"{chip:<8}{i}"
            out += [
                _row(f"{npu:<6}{d.get('name', '910B3')}", _health(d, t)[0], m1, widths=w),
                _row(ids, bus, m2, widths=w),
            ]
        out.append(dbl)
    first = w[0] + 3 + w[1] if split else w[0]
    out += _render_processes(sc, devices, bar, dbl, split, t, first)
    return "\n".join(out) + "\n"


def _render_processes(
    sc: Mapping[str, Any], devices: list, bar: str, dbl: str, split: bool, t: float, first: int
) -> list[str]:
    inner = len(bar) - 4
    rest = inner - first - 3 - 13 - 3 - 24 - 3
    head = ("NPU ID" if split else "NPU     Chip").ljust(first)
    out = [bar, f"| {head} | {'Process id':<13} | {'Process name':<24} | {'Process memory(MB)':<{rest}} |", dbl]
    for npu in sorted({_chip_key(d)[0] for d in devices}):
        rows = [p for p in sc.get("processes", []) if int(p.get("npu", 0)) == npu]
        if not rows:
            out.append("| " + f"No running processes found in NPU {npu}".ljust(inner) + " |")
        for p in rows:
            ids = f"{npu}" if split else f"{npu:<8}{int(p.get('chip', 0))}"
            name = str(p.get("name", "python"))[:15]
            mem = _proc_mb(p, t)
            out.append(f"| {ids:<{first}} | {int(p['pid']):<13} | {name:<24} | {mem:<{rest}} |")
        out.append(dbl)
    return out


def render_usages(sc: Mapping[str, Any], npu: int, t: float) -> str:
    """``npu-smi info -t usages -i <npu>`` (Chip ID printed after each chip's values)."""
    chips = sorted((d for d in sc.get("devices", []) if _chip_key(d)[0] == npu), key=_chip_key)
    if not chips:
        raise KeyError(npu)
    lines = [f"        {'NPU ID':<31}: {npu}", f"        {'Chip Count':<31}: {len(chips)}", "        "]
    for d in chips:
        n = _device_numbers(sc, d, t)
        cap = n["hbm_total"] if sc.get("layout", "a2") != "310p" else 0
        rate = int(round(100 * n["mem"] / cap)) if cap else 0
        for key, v in (
            ("HBM Capacity(MB)", cap),
            ("HBM Usage Rate(%)", rate),
            ("Aicore Usage Rate(%)", n["aicore"]),
            ("Chip ID", _chip_key(d)[1]),
        ):
            lines.append(f"        {key:<31}: {v}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the executable
def scenario_time(sc: Mapping[str, Any], state: str | None) -> float:
    if state and os.path.exists(state):
        with open(state, encoding="utf-8") as f:
            return float(json.load(f).get("t", 0.0))
    return time.time() - float(sc.get("epoch", time.time()))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="npu-smi", add_help=False)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--state")
    ap.add_argument("command", nargs="?")
    ap.add_argument("-t", dest="type")
    ap.add_argument("-i", dest="npu", type=int)
    args = ap.parse_args(argv)
    sc = load(args.scenario)
    t = scenario_time(sc, args.state)
    fail = sc.get("fail") or {}
    if fail and t >= float(fail.get("from", 0)) and (fail.get("until") is None or t < float(fail["until"])):
        mode = fail.get("mode")
        if mode == "hang":
            time.sleep(float(fail.get("hang_s", 3600)))
        elif mode == "garbage":
            sys.stdout.write("dcmi module initialize failed. ret is -8005\n")
            return 0
        elif mode == "exit":
            sys.stderr.write("Error: device not found\n")
            return 2
    if args.command != "info":
        sys.stderr.write("Error parameter of command\n")
        return 1
    if args.type is None:
        sys.stdout.write(render_info(sc, t))
        return 0
    if args.type not in ("usages", "health") or args.npu is None:
        sys.stderr.write(f"Error parameter of -t {args.type}\n")
        return 1
    try:
        sys.stdout.write((render_usages if args.type == "usages" else render_health)(sc, args.npu, t))
    except KeyError:
        sys.stderr.write(f"Error: the card {args.npu} does not exist\n")
        return 1
    return 0


# ------------------------------------------------------------------ helpers for tests and demos
@dataclass(frozen=True)
class FakeNpuSmi:
    path: Path  # the wrapper script: use as accelerators.npu_smi_path
    scenario: Path
    state: Path

    def set_time(self, t: float) -> None:
        """Move the fake's clock to ``t`` seconds since the scenario started (atomic write)."""
        atomic_write(self.state, json.dumps({"t": t}), fsync=False)


def write_fake_npu_smi(
    directory: str | Path, scenario: Mapping[str, Any] | str | Path, *, python: str = sys.executable, t: float = 0.0
) -> FakeNpuSmi:
    """Write ``<directory>/npu-smi`` (an executable wrapper), the scenario and a state file at ``t``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(scenario, Mapping):
        sc_path = d / "npu_smi_scenario.json"
        sc_path.write_text(json.dumps(dict(scenario)), encoding="utf-8")
    else:
        sc_path = Path(scenario).resolve()
    fake = FakeNpuSmi(d / "npu-smi", sc_path, d / "npu_smi_state.json")
    fake.set_time(t)
    fake.path.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="{_PKG_ROOT}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{python}" -m vllm_guardian.testing.fake_npu_smi '
        f'--scenario "{sc_path}" --state "{fake.state}" "$@"\n',
        encoding="utf-8",
    )
    fake.path.chmod(0o755)
    return fake


if __name__ == "__main__":
    sys.exit(main())
