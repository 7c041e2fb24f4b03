"""The fault ledger: what each accelerator device reported, and which servers run on it.

Fed on the loop thread by the accelerator probe's fold (``fold(result, now, wall)``): every
device's current conditions (kept with the time each was first seen, dropped when a read no
longer shows it), every event (NVML, kernel log: kept ``window`` seconds, at most ``KEEP`` a
device), the PCI bus ids (a kernel-log Xid names its device by bus id) and, per server, the
devices its processes hold memory on (remembered: a lost GPU lists no processes any more).
A kernel-log Xid naming a process of a server ties that device to the server too; such an event
only arrives for the driver's own line on a GPU of this node (``host/accel/kmsg.py`` refuses and
counts the rest), and one on a bus no other backend lists is its own device ``pci:<bus id>``.

Answers, for the detector (``view``), the remediation (``blocking``: the faults a restart
cannot help on a server's devices), the diagnosis (``for_target``), status and metrics
(``status``, ``health``: 0 ok, 1 warning, 2 critical). Each code is looked up in the
device-fault catalog once, when recorded; the configured ``policy.device_fault_rules`` are
applied each time the faults are asked for, through the ``judge`` the daemon hands it
(``policy/fault_rules.py``'s ``judge``: a code's occurrences on the device within the rule's window
decide whether it counts yet, the rule's severity and action replace the catalog's), so a reload's
new rules (``configure``) take effect on the next question.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
import dataclasses
from dataclasses import dataclass
from typing import Any

from vllm_guardian.config.schema_policy import KEPT_EVENTS
from vllm_guardian.detectors.accel_fault import DeviceFaultView, FaultRecord, FaultStatus, worst
from vllm_guardian.detectors.device_catalog import DeviceCatalog, FaultEntry, shipped

KEEP = KEPT_EVENTS

# (code, catalog entry, the times the device saw the code, now) -> the entry as the rules leave it
Judge = Callable[[str, FaultEntry, list[float], float], FaultEntry]


@dataclass(frozen=True)
class DeviceFaultStatus:
    """One device in the status's ``device_faults`` section."""

    device: str
    name: str
    health: int  # 0 ok, 1 warning, 2 critical
    worst: FaultStatus | None
    faults: tuple[FaultStatus, ...]  # the latest 10, oldest first
    targets: tuple[str, ...]  # servers on the device


class DeviceFaults:
    def __init__(
        self,
        window: float = 900.0,
        catalog: DeviceCatalog | None = None,
        judge: Judge | None = None,
    ) -> None:
        self.window = window
        self.catalog = catalog or shipped()
        self.judge = judge
        self.events: dict[str, deque[FaultRecord]] = {}
        self.conditions: dict[str, dict[str, FaultRecord]] = {}
        self.names: dict[str, str] = {}
        self.by_pci: dict[str, str] = {}
        self.target_devices: dict[str, set[str]] = {}

    def configure(self, judge: Judge | None) -> None:
        """The rules of a (re)loaded config; what was recorded is kept and judged by them from now on."""
        self.judge = judge

    # ------------------------------------------------------------------ feeding
    def fold(self, res: Any, now: float, wall: float, pid_owner: Callable[[int], str | None] | None = None) -> None:
        """One ``AccelResult``: its devices (conditions, names, bus ids), events and per-target rows."""
        for dev_id, d in res.devices.items():
            self.names[dev_id] = str(d.get("name") or "")
            if d.get("pci_bus_id"):
                self.by_pci[str(d["pci_bus_id"])] = dev_id
            self._conditions(dev_id, d.get("conditions") or (), d.get("backend") or "", now, wall)
        for target, rows in res.per_target.items():
            devs = {r["device"] for r in rows if r.get("device")}
            if devs:
                self.target_devices[target] = devs
        for ev in res.events:
            self.record_event(ev, now, wall, pid_owner)

    def _conditions(self, dev: str, conds: Iterable[Any], source: str, now: float, wall: float) -> None:
        before = self.conditions.get(dev, {})
        now_conds: dict[str, FaultRecord] = {}
        for c in conds:
            code, detail = (c.code, c.detail) if hasattr(c, "code") else (c["code"], c.get("detail", ""))
            old = before.get(code)
            now_conds[code] = (
                old
                if old is not None
                else FaultRecord(dev, code, self.catalog.lookup(code), detail, source, now, wall, condition=True)
            )
        if now_conds:
            self.conditions[dev] = now_conds
        else:
            self.conditions.pop(dev, None)

    def record_event(
        self, ev: Any, now: float, wall: float, pid_owner: Callable[[int], str | None] | None = None
    ) -> FaultRecord:
        dev = ev.device
        if dev.startswith("pci:"):
            dev = self.by_pci.get(dev[4:], dev)
        rec = FaultRecord(
            dev, ev.catalog_code, self.catalog.lookup(ev.catalog_code), ev.detail, ev.source, now, wall, pid=ev.pid
        )
        self.events.setdefault(dev, deque(maxlen=KEEP)).append(rec)
        if ev.pid is not None and pid_owner is not None:
            owner = pid_owner(ev.pid)
            if owner is not None:
                self.target_devices.setdefault(owner, set()).add(dev)
        return rec

    # ------------------------------------------------------------------ questions
    def devices(self) -> list[str]:
        return sorted(set(self.events) | set(self.conditions))

    def faults(self, dev: str, now: float) -> tuple[FaultRecord, ...]:
        evs = [r for r in self.events.get(dev, ()) if now - r.at <= self.window]
        conds = list(self.conditions.get(dev, {}).values())
        return tuple(self._ruled(dev, sorted(conds + evs, key=lambda r: r.at), now))

    def _ruled(self, dev: str, records: list[FaultRecord], now: float) -> list[FaultRecord]:
        """Each record with its entry as the configured rules leave it (unchanged without rules)."""
        judge = self.judge
        if judge is None:
            return records
        seen: dict[str, list[float]] = {}
        for o in (*self.events.get(dev, ()), *self.conditions.get(dev, {}).values()):
            seen.setdefault(o.code, []).append(o.at)
        judged: dict[str, FaultEntry] = {}  # one decision per code (one catalog entry per code)
        for r in records:
            if r.code not in judged:
                judged[r.code] = judge(r.code, r.entry, seen[r.code], now)
        return [r if judged[r.code] is r.entry else dataclasses.replace(r, entry=judged[r.code]) for r in records]

    def view(self, dev: str, now: float) -> DeviceFaultView:
        return DeviceFaultView(dev, self.names.get(dev, ""), self.faults(dev, now), now)

    def for_target(self, target: str, now: float, *, min_rank: int = 1) -> list[FaultRecord]:
        """The faults (warning and worse by default) on the devices a server runs on."""
        out: list[FaultRecord] = []
        for dev in sorted(self.target_devices.get(target, ())):
            out.extend(f for f in self.faults(dev, now) if f.entry.rank >= min_rank)
        return out

    def blocking(self, target: str, now: float) -> list[FaultRecord]:
        """Faults on a server's devices that a restart cannot help (critical, restart_can_help false)."""
        return [f for f in self.for_target(target, now) if f.entry.blocks_restart]

    def health(self, dev: str, now: float) -> int:
        top = worst(self.faults(dev, now))
        return 0 if top is None else top.entry.rank

    def status(self, now: float) -> dict[str, dict[str, Any]]:
        """``status_section`` as plain data (evidence, the report, the node table's fault columns)."""
        return {dev: dataclasses.asdict(st) for dev, st in self.status_section(now).items()}

    def status_section(self, now: float) -> dict[str, DeviceFaultStatus]:
        """The status's ``device_faults`` section: per device with anything recorded, health and faults."""
        out: dict[str, DeviceFaultStatus] = {}
        for dev in self.devices():
            faults = self.faults(dev, now)
            top = worst(faults)
            out[dev] = DeviceFaultStatus(
                dev,
                self.names.get(dev, ""),
                0 if top is None else top.entry.rank,
                None if top is None else top.status(),
                tuple(f.status() for f in faults[-10:]),
                tuple(sorted(t for t, devs in self.target_devices.items() if dev in devs)),
            )
        return out
