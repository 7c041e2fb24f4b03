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
        lost_at: 120               # seconds: GpuIsLost from then on (optional)
        processes:
          - {pid: 4242, memory: <curve>, type: compute}   # type: compute | graphics
          - {pid: 4243, memory: null}                     # usedGpuMemory None
    xid: [{at: 30, device: 0, code: 79}]
    xid_supported: true            # false: RegisterEvents raises NotSupported
    xid_permission: true           # false: RegisterEvents raises NoPermission
    memory_v2: true                # false: the v2 memory call raises FunctionNotFound
    driver: present                # absent (LibraryNotFound) | not_loaded (DriverNotLoaded)
    errors: {nvmlDeviceGetComputeRunningProcesses: InvalidArgument}   # call -> pynvml NVMLError_<name>

``<curve>`` is a number or a curve mapping (``vllm_guardian.testing.curves``).
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
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def __init__(self, scenario: Mapping[str, Any] | str | Path | None = None, *, clock: Any) -> None:
        sc = load_scenario(scenario)
        self.clock = clock
        self.t0 = float(sc.get("t0", clock.monotonic()))
        self.driver = sc.get("driver", "present")
        self.memory_v2 = bool(sc.get("memory_v2", True))
        self.xid_supported = bool(sc.get("xid_supported", True))
        self.xid_permission = bool(sc.get("xid_permission", True))
        self.devices = [self._device(d) for d in sc.get("devices", [])]
        self.xids = sorted(
            (
                {"at": float(x["at"]), "device": int(x.get("device", 0)), "code": int(x["code"])}
                for x in sc.get("xid", [])
            ),
            key=lambda x: x["at"],
        )
        self.errors = {str(k): str(v) for k, v in (sc.get("errors") or {}).items()}
        self.initialised = 0
        self.calls: list[str] = []
        self._event_sets: dict[int, dict] = {}

    @staticmethod
    def _device(d: Mapping[str, Any]) -> dict[str, Any]:
        util = d.get("utilization", 0)
        return {
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

    # ------------------------------------------------------------------ helpers
    def t(self) -> float:
        return self.clock.monotonic() - self.t0

    def _fail(self, call: str) -> None:
        """Raise the scripted error for ``call``, if any."""
        name = self.errors.get(call)
        if name is not None:
            raise getattr(pynvml, f"NVMLError_{name}")()

    def _dev(self, handle: _Handle) -> dict[str, Any]:
        if not self.initialised:
            raise pynvml.NVMLError_Uninitialized()
        d = self.devices[handle.index]
        if d["lost_at"] is not None and self.t() >= d["lost_at"]:
            raise pynvml.NVMLError_GpuIsLost()
        return d

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

    def nvmlEventSetCreate(self) -> int:
        key = len(self._event_sets) + 1
        self._event_sets[key] = {"devices": set(), "next": 0, "freed": False}
        return key

    def nvmlDeviceRegisterEvents(self, handle: _Handle, types: int, event_set: int) -> None:
        if not self.xid_supported:
            raise pynvml.NVMLError_NotSupported()
        if not self.xid_permission:
            raise pynvml.NVMLError_NoPermission()
        self._event_sets[event_set]["devices"].add(handle.index)

    def nvmlEventSetWait(self, event_set: int, timeout_ms: int) -> SimpleNamespace:
        es = self._event_sets[event_set]
        now = self.t()
        while es["next"] < len(self.xids) and self.xids[es["next"]]["at"] <= now:
            x = self.xids[es["next"]]
            es["next"] += 1
            if x["device"] in es["devices"]:
                return SimpleNamespace(
                    device=_Handle(x["device"]),
                    eventType=self.nvmlEventTypeXidCriticalError,
                    eventData=x["code"],
                    gpuInstanceId=0xFFFFFFFF,
                    computeInstanceId=0xFFFFFFFF,
                )
        raise pynvml.NVMLError_Timeout()

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
    ) -> None:
        self.library = FakeNvml(scenario, clock=clock)
        super().__init__(library=self.library, xid=xid, interval=interval)
