"""A fake NVML: a stand-in for the ``pynvml`` module that replays scripted curves, and
``FakeNvmlBackend``, the real ``NvmlBackend`` running on it (same interface).

Time is the injected clock's monotonic time minus the time the fake was made
(or the scenario's ``t0``). The error classes and constants are pynvml's own, so
the backend's ``except`` clauses are exercised for real. A scenario is a mapping,
or a JSON/YAML file holding one::

    devices:                       # one entry per GPU
      - name: NVIDIA H100          # optional
        memory_total: 80e9         # bytes
        memory_used: <curve>       # default: memory_base + the processes' memory
        memory_base: 5e8
        utilization: <curve>       # percent 0..100 (default 0); null = NotSupported
        lost_at: 120               # seconds: GpuIsLost from then on, on every call (optional)
        reset_required_at: 300     # seconds: ResetRequired from then on (optional)
        pci_bus_id: 00000000:3B:00.0   # default 00000000:<0x10+index>:00.0
        ecc: {uncorrected_volatile: <curve>, uncorrected_aggregate: <curve>,
              corrected_volatile: <curve>, corrected_aggregate: <curve>}   # null: no ECC (NotSupported)
        retired_pages: {dbe: 0, sbe: 0, pending_at: 50}                  # null: NotSupported
        remapped_rows: {correctable: 0, uncorrectable: 1, pending_at: 40, failure_at: 60}   # null: NotSupported
        throttle: [{at: 10, reasons: [hw_thermal]}, {at: 40, reasons: []}]   # null: NotSupported
        nvlink: {links: 4, recovery: <curve>, crc_flit: <curve>, crc_data: <curve>, replay: <curve>}  # null: none
        pcie_replay: <curve>       # null: NotSupported
        events: [xid, ecc_dbe, ecc_sbe, clock]   # the event types the device supports (default: all)
        unsupported: [nvmlDeviceGetPcieReplayCounter]   # calls that raise NotSupported on this device
        processes:
          - {pid: 4242, memory: <curve>, type: compute}   # type: compute | graphics
          - {pid: 4243, memory: null}                     # usedGpuMemory None
    xid: [{at: 30, device: 0, code: 79}]
    events: [{at: 31, device: 0, type: ecc_dbe}]    # other NVML events (ecc_dbe, ecc_sbe, clock)
    xid_supported: true            # false: RegisterEvents raises NotSupported
    xid_permission: true           # false: RegisterEvents raises NoPermission
    memory_v2: true                # false: the v2 memory call raises FunctionNotFound
    driver: present                # absent (LibraryNotFound) | not_loaded (DriverNotLoaded)
    errors: {nvmlDeviceGetComputeRunningProcesses: InvalidArgument}   # call -> pynvml NVMLError_<name>

``<curve>`` is a number or a curve mapping (``vllm_guardian.testing.curves``). The health
calls answer as NVML does: a device without ECC, remapping, NVLink or a PCIe replay counter raises
``NotSupported`` for that call (every time), a lost device ``GpuIsLost`` on every call, NVLink
links past the last one ``InvalidArgument``; the event set delivers only the types a device
registered for, one event per wait, ``Timeout`` when none is due.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping

import pynvml

from vllm_guardian.host.accel.nvml import NvmlBackend
from vllm_guardian.testing.curves import Curve, curve


def load_scenario(source: Mapping[str, Any] | str | Path | None) -> dict[str, Any]:
    """A scenario from a mapping, or from a ``.json`` / ``.yaml`` / ``.yml`` file."""
    if source is None:
        return {}
    if isinstance(source, Mapping):
        return dict(source)
    text = Path(source).read_text(encoding="utf-8")
    if str(source).endswith((".yaml", ".yml")):
        import yaml

        return dict(yaml.safe_load(text) or {})
    return dict(json.loads(text))


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


class FakeNvml:
    """Module-like: the pynvml functions the backend calls, answering from the scenario."""

    # pynvml's own error classes and constants
    NVMLError = pynvml.NVMLError
    NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = pynvml.NVMLError_DriverNotLoaded
    NVMLError_Uninitialized = pynvml.NVMLError_Uninitialized
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_NoPermission = pynvml.NVMLError_NoPermission
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVMLError_GpuIsLost = pynvml.NVMLError_GpuIsLost
    NVMLError_LibRmVersionMismatch = pynvml.NVMLError_LibRmVersionMismatch
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    NVMLError_InvalidArgument = pynvml.NVMLError_InvalidArgument
    NVMLError_ResetRequired = pynvml.NVMLError_ResetRequired
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError
    nvmlEventTypeDoubleBitEccError = pynvml.nvmlEventTypeDoubleBitEccError
    nvmlEventTypeSingleBitEccError = pynvml.nvmlEventTypeSingleBitEccError
    nvmlEventTypeClock = pynvml.nvmlEventTypeClock
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_MEMORY_ERROR_TYPE_CORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    NVML_AGGREGATE_ECC = pynvml.NVML_AGGREGATE_ECC
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = (
        pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    )
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_NVLINK_ERROR_DL_REPLAY = pynvml.NVML_NVLINK_ERROR_DL_REPLAY
    NVML_NVLINK_ERROR_DL_RECOVERY = pynvml.NVML_NVLINK_ERROR_DL_RECOVERY
    NVML_NVLINK_ERROR_DL_CRC_FLIT = pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT
    NVML_NVLINK_ERROR_DL_CRC_DATA = pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA
    nvmlClocksEventReasonHwSlowdown = pynvml.nvmlClocksEventReasonHwSlowdown
    nvmlClocksEventReasonHwThermalSlowdown = pynvml.nvmlClocksEventReasonHwThermalSlowdown
    nvmlClocksEventReasonHwPowerBrakeSlowdown = pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
    nvmlClocksEventReasonSwThermalSlowdown = pynvml.nvmlClocksEventReasonSwThermalSlowdown
    nvmlClocksEventReasonSwPowerCap = pynvml.nvmlClocksEventReasonSwPowerCap

    def __init__(self, scenario: Mapping[str, Any] | str | Path | None = None, *, clock: Any) -> None:
        sc = load_scenario(scenario)
        self.clock = clock
        self.t0 = float(sc.get("t0", clock.monotonic()))
        self.driver = sc.get("driver", "present")
        self.memory_v2 = bool(sc.get("memory_v2", True))
        self.xid_supported = bool(sc.get("xid_supported", True))
        self.xid_permission = bool(sc.get("xid_permission", True))
        self.devices = [self._device(i, d) for i, d in enumerate(sc.get("devices", []))]
        self.xids: list[dict[str, Any]] = sorted(
            [
                {"at": float(x["at"]), "device": int(x.get("device", 0)), "code": int(x["code"]), "type": "xid"}
                for x in sc.get("xid", [])
            ]
            + [
                {"at": float(x["at"]), "device": int(x.get("device", 0)), "code": 0, "type": str(x["type"])}
                for x in sc.get("events", [])
            ],
            key=lambda x: float(x["at"]),
        )
        self.errors = {str(k): str(v) for k, v in (sc.get("errors") or {}).items()}
        self.initialised = 0
        self.calls: list[str] = []
        self._event_sets: dict[int, dict] = {}

    @staticmethod
    def _device(index: int, d: Mapping[str, Any]) -> dict[str, Any]:
        util = d.get("utilization", 0)

        def curves(spec: Any, keys: tuple[str, ...]) -> dict[str, Any] | None:
            return None if spec is None else {k: curve(spec.get(k, 0)) for k in keys}

        return {
            "pci": d.get("pci_bus_id", f"00000000:{0x10 + index:02X}:00.0"),
            "reset_required_at": None if d.get("reset_required_at") is None else float(d["reset_required_at"]),
            "ecc": curves(
                d.get("ecc", {}),
                ("uncorrected_volatile", "uncorrected_aggregate", "corrected_volatile", "corrected_aggregate"),
            ),
            "retired": None if d.get("retired_pages", {}) is None else dict(d.get("retired_pages", {})),
            "remap": None if d.get("remapped_rows", {}) is None else dict(d.get("remapped_rows", {})),
            "throttle": None
            if d.get("throttle", []) is None
            else sorted(d.get("throttle", []), key=lambda x: float(x["at"])),
            "nvlink": None
            if d.get("nvlink") is None
            else dict(
                curves(d["nvlink"], ("recovery", "crc_flit", "crc_data", "replay")) or {},
                links=int(d["nvlink"].get("links", 4)),
            ),
            "pcie": None if d.get("pcie_replay", 0) is None else curve(d.get("pcie_replay", 0)),
            "events": set(d.get("events", ["xid", "ecc_dbe", "ecc_sbe", "clock"])),
            "unsupported": set(d.get("unsupported", [])),
            "name": d.get("name", "NVIDIA Fake GPU"),
            "total": float(d.get("memory_total", 80e9)),
            "used": None if d.get("memory_used") is None else curve(d["memory_used"]),
            "base": float(d.get("memory_base", 0.0)),
            "util": None if util is None else curve(util),
            "lost_at": None if d.get("lost_at") is None else float(d["lost_at"]),
            "procs": [
                {
                    "pid": int(p["pid"]),
                    "type": p.get("type", "compute"),
                    "memory": None if p.get("memory") is None else curve(p["memory"]),
                }
                for p in d.get("processes", [])
            ],
        }

    # ------------------------------------------------------------------ injection (tests, demos)
    def inject_xid(self, device: int, code: int) -> None:
        """An Xid on ``device`` now: the next event-set wait delivers it (if registered)."""
        self.xids.append({"at": self.t(), "device": int(device), "code": int(code), "type": "xid"})
        self.xids.sort(key=lambda x: float(x["at"]))

    def lose(self, device: int) -> None:
        """``device`` falls off the bus now: every call on it raises GpuIsLost from then on."""
        self.devices[int(device)]["lost_at"] = self.t()

    # ------------------------------------------------------------------ helpers
    def t(self) -> float:
        return self.clock.monotonic() - self.t0

    def _fail(self, call: str) -> None:
        """Raise the scripted error for ``call``, if any."""
        name = self.errors.get(call)
        if name is not None:
            raise getattr(pynvml, f"NVMLError_{name}")()

    def _dev(self, handle: _Handle, call: str = "") -> dict[str, Any]:
        if not self.initialised:
            raise pynvml.NVMLError_Uninitialized()
        d = self.devices[handle.index]
        if d["lost_at"] is not None and self.t() >= d["lost_at"]:
            raise pynvml.NVMLError_GpuIsLost()
        if d["reset_required_at"] is not None and self.t() >= d["reset_required_at"]:
            raise pynvml.NVMLError_ResetRequired()
        if call in d["unsupported"]:
            raise pynvml.NVMLError_NotSupported()
        return d

    def _feature(self, handle: _Handle, call: str, key: str) -> Any:
        """The device's scripted feature, or NotSupported when the device has none."""
        self._fail(call)
        d = self._dev(handle, call)
        if d[key] is None:
            raise pynvml.NVMLError_NotSupported()
        return d[key]

    def _at(self, spec: Mapping[str, Any], key: str) -> bool:
        at = spec.get(key)
        return at is not None and self.t() >= float(at)

    def _proc_mem(self, p: dict[str, Any], t: float) -> int | None:
        c: Curve | None = p["memory"]
        return None if c is None else max(0, int(c.value(t)))

    # ------------------------------------------------------------------ pynvml surface
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.driver == "absent":
            raise pynvml.NVMLError_LibraryNotFound()
        if self.driver == "not_loaded":
            raise pynvml.NVMLError_DriverNotLoaded()
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")
        if not self.initialised:
            raise pynvml.NVMLError_Uninitialized()
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        if not self.initialised:
            raise pynvml.NVMLError_Uninitialized()
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> _Handle:
        if not 0 <= i < len(self.devices):
            raise pynvml.NVMLError_InvalidArgument()
        return _Handle(i)

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        return handle.index

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self.devices[handle.index]["name"]

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> SimpleNamespace:
        self._fail("nvmlDeviceGetMemoryInfo")
        d, t = self._dev(handle), self.t()
        if version and not self.memory_v2:
            raise pynvml.NVMLError_FunctionNotFound()
        if d["used"] is not None:
            used = int(d["used"].value(t))
        else:
            used = int(d["base"] + sum(self._proc_mem(p, t) or 0 for p in d["procs"]))
        used = max(0, min(used, int(d["total"])))
        mem = SimpleNamespace(total=int(d["total"]), used=used, free=int(d["total"]) - used)
        if version:
            mem.version, mem.reserved = version, 0
        return mem

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> SimpleNamespace:
        self._fail("nvmlDeviceGetUtilizationRates")
        d = self._dev(handle)
        if d["util"] is None:
            raise pynvml.NVMLError_NotSupported()
        gpu = max(0, min(100, int(round(d["util"].value(self.t())))))
        return SimpleNamespace(gpu=gpu, memory=0)

    def _processes(self, handle: _Handle, kind: str) -> list[SimpleNamespace]:
        d, t = self._dev(handle), self.t()
        return [
            SimpleNamespace(
                pid=p["pid"], usedGpuMemory=self._proc_mem(p, t), gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF
            )
            for p in d["procs"]
            if p["type"] == kind
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[SimpleNamespace]:
        self._fail("nvmlDeviceGetComputeRunningProcesses")
        return self._processes(handle, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: _Handle) -> list[SimpleNamespace]:
        self._fail("nvmlDeviceGetGraphicsRunningProcesses")
        return self._processes(handle, "graphics")

    EVENT_BITS = {
        "xid": pynvml.nvmlEventTypeXidCriticalError,
        "ecc_dbe": pynvml.nvmlEventTypeDoubleBitEccError,
        "ecc_sbe": pynvml.nvmlEventTypeSingleBitEccError,
        "clock": pynvml.nvmlEventTypeClock,
    }

    def nvmlEventSetCreate(self) -> int:
        key = len(self._event_sets) + 1
        self._event_sets[key] = {"devices": {}, "next": 0, "freed": False}
        return key

    def nvmlDeviceGetSupportedEventTypes(self, handle: _Handle) -> int:
        d = self._dev(handle, "nvmlDeviceGetSupportedEventTypes")
        mask = 0
        for name in d["events"]:
            mask |= self.EVENT_BITS[name]
        return mask

    def nvmlDeviceRegisterEvents(self, handle: _Handle, types: int, event_set: int) -> None:
        if not self.xid_supported:
            raise pynvml.NVMLError_NotSupported()
        if not self.xid_permission:
            raise pynvml.NVMLError_NoPermission()
        supported = self.nvmlDeviceGetSupportedEventTypes(handle)
        if types & ~supported:
            raise pynvml.NVMLError_NotSupported()  # NVML refuses a mask with a type the device lacks
        es = self._event_sets[event_set]
        es["devices"][handle.index] = es["devices"].get(handle.index, 0) | types

    def nvmlEventSetWait(self, event_set: int, timeout_ms: int) -> SimpleNamespace:
        es = self._event_sets[event_set]
        if es["freed"]:
            raise pynvml.NVMLError_InvalidArgument()
        now = self.t()
        while es["next"] < len(self.xids) and self.xids[es["next"]]["at"] <= now:
            x = self.xids[es["next"]]
            es["next"] += 1
            bit = self.EVENT_BITS[x["type"]]
            if es["devices"].get(x["device"], 0) & bit:
                return SimpleNamespace(
                    device=_Handle(x["device"]),
                    eventType=bit,
                    eventData=x["code"],
                    gpuInstanceId=0xFFFFFFFF,
                    computeInstanceId=0xFFFFFFFF,
                )
        raise pynvml.NVMLError_Timeout()

    nvmlEventSetWait_v2 = nvmlEventSetWait

    # ------------------------------------------------------------------ health
    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> SimpleNamespace:
        d = self.devices[handle.index]
        return SimpleNamespace(busId=d["pci"].encode(), busIdLegacy=d["pci"].encode())

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter_type: int) -> int:
        ecc = self._feature(handle, "nvmlDeviceGetTotalEccErrors", "ecc")
        err = "uncorrected" if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "corrected"
        cnt = "volatile" if counter_type == pynvml.NVML_VOLATILE_ECC else "aggregate"
        return max(0, int(ecc[f"{err}_{cnt}"].value(self.t())))

    def nvmlDeviceGetRetiredPages(self, handle: _Handle, cause: int) -> list[int]:
        r = self._feature(handle, "nvmlDeviceGetRetiredPages", "retired")
        n = int(r.get("dbe" if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR else "sbe", 0))
        return [0x1000 * (k + 1) for k in range(n)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: _Handle) -> int:
        r = self._feature(handle, "nvmlDeviceGetRetiredPagesPendingStatus", "retired")
        return int(self._at(r, "pending_at"))

    def nvmlDeviceGetRemappedRows(self, handle: _Handle) -> tuple[int, int, int, int]:
        r = self._feature(handle, "nvmlDeviceGetRemappedRows", "remap")
        return (
            int(r.get("correctable", 0)),
            int(r.get("uncorrectable", 0)),
            int(self._at(r, "pending_at")),
            int(self._at(r, "failure_at")),
        )

    _REASONS = {
        "hw_slowdown": pynvml.nvmlClocksEventReasonHwSlowdown,
        "hw_thermal": pynvml.nvmlClocksEventReasonHwThermalSlowdown,
        "hw_power_brake": pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
        "sw_thermal": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
        "sw_power_cap": pynvml.nvmlClocksEventReasonSwPowerCap,
        "idle": pynvml.nvmlClocksEventReasonGpuIdle,
    }

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        steps = self._feature(handle, "nvmlDeviceGetCurrentClocksEventReasons", "throttle")
        mask = 0
        for step in steps:
            if self.t() >= float(step["at"]):
                mask = 0
                for r in step.get("reasons", []):
                    mask |= self._REASONS[r]
        return mask

    def nvmlDeviceGetNvLinkState(self, handle: _Handle, link: int) -> int:
        nv = self._feature(handle, "nvmlDeviceGetNvLinkState", "nvlink")
        if not 0 <= link < nv["links"]:
            raise pynvml.NVMLError_InvalidArgument()
        return 1

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: _Handle, link: int, counter: int) -> int:
        nv = self._feature(handle, "nvmlDeviceGetNvLinkErrorCounter", "nvlink")
        if not 0 <= link < nv["links"]:
            raise pynvml.NVMLError_InvalidArgument()
        names = {
            pynvml.NVML_NVLINK_ERROR_DL_REPLAY: "replay",
            pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: "recovery",
            pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: "crc_flit",
            pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: "crc_data",
        }
        total = max(0, int(nv[names[counter]].value(self.t())))
        return total if link == 0 else 0  # the scripted counts all land on link 0

    def nvmlDeviceGetPcieReplayCounter(self, handle: _Handle) -> int:
        return max(0, int(self._feature(handle, "nvmlDeviceGetPcieReplayCounter", "pcie").value(self.t())))

    def nvmlEventSetFree(self, event_set: int) -> None:
        self._event_sets[event_set]["freed"] = True


class FakeNvmlBackend(NvmlBackend):
    """``NvmlBackend`` over a ``FakeNvml``: the real backend code, scripted devices."""

    def __init__(
        self,
        scenario: Mapping[str, Any] | str | Path | None = None,
        *,
        clock: Any,
        xid: bool = True,
        interval: float = 1.0,
        health_interval: float | None = 5.0,
    ) -> None:
        self.library = FakeNvml(scenario, clock=clock)
        super().__init__(library=self.library, xid=xid, interval=interval, health_interval=health_interval)
