"""NVML backend (package ``nvidia-ml-py``, module ``pynvml``): GPU memory, utilisation,
per-process memory, device events and device health.

``pynvml`` is imported and initialised in the constructor, never at module import
(the ``library`` argument is the seam: a fake module in tests). No NVIDIA driver
(``LibraryNotFound`` / ``DriverNotLoaded``) is ``BackendUnavailable`` with one
clear line. Per read: memory (``_v2`` when the driver has it, else v1), utilisation,
compute + graphics processes (host PIDs; ``usedGpuMemory`` may be None), and the
events queued since the last read: one event set, each device registered for the
critical-Xid, double-bit ECC, single-bit ECC and clock event types it supports
(``nvmlDeviceGetSupportedEventTypes``), drained with a short first wait (this runs off
the loop thread) and then timeout 0. Registration refused (``NotSupported`` /
``NoPermission``) disables events on that device with one note. Every
``health_interval`` seconds each device's health counters are read
(``nvml_health.py``: ECC, retired pages, remapped rows, throttle reasons, NVLink, PCIe)
and turned into ``DeviceCondition``s, kept until the next health read. A device that
fell off the bus (``GpuIsLost`` on any call) is health ``lost`` with the condition
``gpu_lost``; ``ResetRequired`` is health ``reset_required``: neither is a failed read.
Each device's PCI bus id is read once (the kernel log names devices by it).
"""

from __future__ import annotations

import importlib
from typing import Any

from vllm_guardian.errors import BackendUnavailable, ProbeFailed
from vllm_guardian.host.accel import AccelEvent, AccelSnapshot, DeviceCondition, DeviceReading, ProcessUsage
from vllm_guardian.host.accel.kmsg_parse import pci_key
from vllm_guardian.host.accel.nvml_health import HealthReading, NvmlHealth

MAX_EVENTS_PER_READ = 64
FIRST_WAIT_MS = 20  # the read runs off the loop thread: a short wait lets an event in flight arrive
# (pynvml attribute, AccelEvent kind), in the order an event's type is matched
EVENT_TYPES = (
    ("nvmlEventTypeXidCriticalError", "xid"),
    ("nvmlEventTypeDoubleBitEccError", "ecc_dbe"),
    ("nvmlEventTypeSingleBitEccError", "ecc_sbe"),
    ("nvmlEventTypeClock", "clock"),
)
_NO_DRIVER = ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvmlBackend:
    name = "nvml"

    def __init__(
        self, *, library: Any = None, xid: bool = True, interval: float = 1.0, health_interval: float | None = 5.0
    ) -> None:
        if library is None:
            try:
                library = importlib.import_module("pynvml")
            except ImportError:
                raise BackendUnavailable("NVML: module pynvml not installed (pip install nvidia-ml-py)") from None
        self.nv = nv = library
        self.interval = interval
        self._closed = False
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            if type(e).__name__ in _NO_DRIVER:
                raise BackendUnavailable(f"NVML: no NVIDIA driver on this host ({e})") from None
            raise BackendUnavailable(f"NVML: initialisation failed ({type(e).__name__}: {e})") from None
        try:
            self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
            self._names = [_text(nv.nvmlDeviceGetName(h)) for h in self._handles]
        except nv.NVMLError as e:
            self._shutdown()
            raise BackendUnavailable(f"NVML: cannot enumerate devices ({type(e).__name__}: {e})") from None
        self._use_v2 = hasattr(nv, "nvmlMemory_v2")
        self.notes: list[str] = []
        self.pci_bus_ids = [self._bus_id(h) for h in self._handles]
        self.health = NvmlHealth(nv)
        self.health_interval = health_interval
        self._health: dict[int, HealthReading] = {}
        self._health_at: float | None = None
        self._events = self._register_xid() if xid else None

    # ------------------------------------------------------------------ setup / teardown
    def _bus_id(self, h: Any) -> str | None:
        try:
            return pci_key(_text(self.nv.nvmlDeviceGetPciInfo(h).busId))
        except (self.nv.NVMLError, AttributeError):
            return None

    def _event_mask(self, h: Any) -> int:
        """The event types this device supports, of those the guardian wants."""
        nv = self.nv
        wanted = 0
        for attr, _ in EVENT_TYPES:
            wanted |= int(getattr(nv, attr, 0))
        try:
            return wanted & int(nv.nvmlDeviceGetSupportedEventTypes(h))
        except nv.NVMLError:
            return int(nv.nvmlEventTypeXidCriticalError)  # cannot ask: register the critical Xids only

    def _register_xid(self) -> Any:
        nv = self.nv
        try:
            es = nv.nvmlEventSetCreate()
        except nv.NVMLError as e:
            self.notes.append(f"XID events disabled: {e}")
            return None
        registered = 0
        for i, h in enumerate(self._handles):
            try:
                mask = self._event_mask(h)
                if not mask:
                    self.notes.append(f"XID events disabled on nvml:{i}: no supported event type")
                    continue
                nv.nvmlDeviceRegisterEvents(h, mask, es)
                registered += 1
            except (nv.NVMLError_NotSupported, nv.NVMLError_NoPermission) as e:
                self.notes.append(f"XID events disabled on nvml:{i}: {e}")
            except nv.NVMLError as e:
                self.notes.append(f"XID events disabled on nvml:{i}: {type(e).__name__}: {e}")
        if not registered:
            self._free(es)
            return None
        return es

    def _free(self, es: Any) -> None:
        try:
            self.nv.nvmlEventSetFree(es)
        except self.nv.NVMLError:
            pass

    def _shutdown(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except self.nv.NVMLError:
            pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._events is not None:
            self._free(self._events)
            self._events = None
        self._shutdown()

    # ------------------------------------------------------------------ reading
    def read(self, now: float) -> AccelSnapshot:
        if self._closed:
            raise ProbeFailed("NVML: backend closed")
        nv = self.nv
        devices: list[DeviceReading] = []
        procs: list[ProcessUsage] = []
        for i, h in enumerate(self._handles):
            dev_id = f"nvml:{i}"
            try:
                dev = self._device(i, h, now)
                dev_procs = self._processes(dev_id, h)
            except nv.NVMLError_GpuIsLost as e:
                devices.append(self._broken(i, "lost", DeviceCondition("gpu_lost", f"NVML: {e}")))
                continue
            except nv.NVMLError_ResetRequired as e:
                devices.append(self._broken(i, "reset_required", DeviceCondition("reset_required", f"NVML: {e}")))
                continue
            except (nv.NVMLError_Uninitialized, nv.NVMLError_LibRmVersionMismatch) as e:
                raise ProbeFailed(f"NVML: {type(e).__name__}: {e}") from None
            except nv.NVMLError as e:
                devices.append(
                    DeviceReading(
                        dev_id,
                        self.name,
                        self._names[i],
                        None,
                        None,
                        None,
                        health="error",
                        extra={"error": f"{type(e).__name__}: {e}"},
                    )
                )
                continue
            devices.append(dev)
            procs.extend(dev_procs)
        if self._health_due(now):
            self._health_at = now
        events = self._poll_events()
        return AccelSnapshot(self.name, tuple(devices), tuple(procs), events, tuple(self.notes + self.health.notes))

    def _broken(self, i: int, health: str, cond: DeviceCondition) -> DeviceReading:
        self._health.pop(i, None)  # what it said before no longer describes the device
        return DeviceReading(
            f"nvml:{i}",
            self.name,
            self._names[i],
            None,
            None,
            None,
            health=health,
            extra={"error": cond.detail},
            conditions=(cond,),
            pci_bus_id=self.pci_bus_ids[i],
        )

    def _health_due(self, now: float) -> bool:
        if self.health_interval is None:
            return False
        return self._health_at is None or now - self._health_at >= self.health_interval - 1e-6

    def _device(self, i: int, h: Any, now: float) -> DeviceReading:
        nv = self.nv
        extra: dict[str, Any] = {}
        mem = None
        if self._use_v2:
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
                extra["memory_reserved_bytes"] = int(mem.reserved)
            except (nv.NVMLError_FunctionNotFound, nv.NVMLError_NotSupported):
                self._use_v2 = False  # old driver: v1 from now on
        if mem is None:
            mem = nv.nvmlDeviceGetMemoryInfo(h)
        util = None
        try:
            util = nv.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
        except (nv.NVMLError_NotSupported, nv.NVMLError_NoPermission):
            pass
        if self._health_due(now):
            self._health[i] = self.health.read(i, h)  # GpuIsLost / ResetRequired go up to read()
        hr = self._health.get(i)
        if hr is not None and hr.counters:
            extra["health_counters"] = dict(hr.counters)
        return DeviceReading(
            f"nvml:{i}",
            self.name,
            self._names[i],
            int(mem.used),
            int(mem.total),
            util,
            health="OK",
            extra=extra,
            conditions=tuple(hr.conditions) if hr is not None else (),
            pci_bus_id=self.pci_bus_ids[i],
        )

    def _processes(self, dev_id: str, h: Any) -> list[ProcessUsage]:
        """Compute and graphics processes; a pid in both lists counts once (its largest figure)."""
        nv = self.nv
        seen: dict[int, int | None] = {}
        for getter in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
            try:
                rows = getter(h)
            except (nv.NVMLError_NotSupported, nv.NVMLError_NoPermission):
                continue
            for p in rows:
                used = p.usedGpuMemory if p.usedGpuMemory is None else int(p.usedGpuMemory)
                old = seen.get(int(p.pid))
                seen[int(p.pid)] = used if old is None else max(old, used if used is not None else old)
        return [ProcessUsage(pid, dev_id, mem) for pid, mem in sorted(seen.items())]

    def _poll_events(self) -> tuple[AccelEvent, ...]:
        nv = self.nv
        if self._events is None:
            return ()
        out: list[AccelEvent] = []
        for n in range(MAX_EVENTS_PER_READ):
            try:
                data = nv.nvmlEventSetWait(self._events, FIRST_WAIT_MS if n == 0 else 0)
            except nv.NVMLError_Timeout:
                break
            except nv.NVMLError as e:
                self.notes.append(f"XID events disabled: {type(e).__name__}: {e}")
                self._free(self._events)
                self._events = None
                break
            out.append(self._event(data))
        return tuple(out)

    def _event(self, data: Any) -> AccelEvent:
        kind = "event"
        for attr, name in EVENT_TYPES:
            if int(data.eventType) & int(getattr(self.nv, attr, 0)):
                kind = name
                break
        code = int(data.eventData)
        detail = f"XID {code}" if kind == "xid" else f"NVML {kind} event"
        return AccelEvent(self._device_of(data.device), kind, code, detail)

    def _device_of(self, handle: Any) -> str:
        for i, h in enumerate(self._handles):
            if h == handle:
                return f"nvml:{i}"
        try:
            return f"nvml:{int(self.nv.nvmlDeviceGetIndex(handle))}"
        except self.nv.NVMLError:
            return "nvml:?"
