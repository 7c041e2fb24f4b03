"""NVML health reads of one GPU: ECC counters, retired pages, remapped rows, clock-event
(throttle) reasons, NVLink error counters, the PCIe replay counter.

Reads, per device and per call (pynvml, the module handed in): ``nvmlDeviceGetTotalEccErrors``
(uncorrected / corrected, volatile / aggregate), ``nvmlDeviceGetRetiredPages`` (both causes) +
``nvmlDeviceGetRetiredPagesPendingStatus``, ``nvmlDeviceGetRemappedRows`` (corrected,
uncorrected, pending, failure), ``nvmlDeviceGetCurrentClocksEventReasons`` (older bindings:
``...ClocksThrottleReasons``), ``nvmlDeviceGetNvLinkState`` + ``nvmlDeviceGetNvLinkErrorCounter``
per active link, ``nvmlDeviceGetPcieReplayCounter``.

Decides which ``DeviceCondition``s the numbers mean (catalog keys): uncorrected volatile ECC
errors since the driver loaded, a pending or failed row remap, retired pages pending, each
throttle reason that is on, NVLink recovery / CRC counters that grew since the last read, PCIe
replays that grew. A call the device or driver does not support (``NotSupported``,
``NoPermission``, ``FunctionNotFound``, an ``InvalidArgument`` for a missing link) is recorded
once in ``notes`` and never made again for that device: no error storm. ``GpuIsLost`` and
``ResetRequired`` are not caught here: the backend turns them into the device's condition.
Any other NVML error leaves that number out of this read, noted once per call and error kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from vllm_guardian.host.accel import DeviceCondition

# clock-event reason bits (pynvml nvmlClocksEventReason*) -> condition code suffix
THROTTLE_BITS: tuple[tuple[str, str], ...] = (
    ("nvmlClocksEventReasonHwSlowdown", "hw_slowdown"),
    ("nvmlClocksEventReasonHwThermalSlowdown", "hw_thermal"),
    ("nvmlClocksEventReasonHwPowerBrakeSlowdown", "hw_power_brake"),
    ("nvmlClocksEventReasonSwThermalSlowdown", "sw_thermal"),
    ("nvmlClocksEventReasonSwPowerCap", "sw_power_cap"),
)
NVLINK_COUNTERS: tuple[tuple[str, str], ...] = (
    ("NVML_NVLINK_ERROR_DL_REPLAY", "replay"),
    ("NVML_NVLINK_ERROR_DL_RECOVERY", "recovery"),
    ("NVML_NVLINK_ERROR_DL_CRC_FLIT", "crc_flit"),
    ("NVML_NVLINK_ERROR_DL_CRC_DATA", "crc_data"),
)
MAX_LINKS_FALLBACK = 18


@dataclass
class HealthReading:
    conditions: list[DeviceCondition] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)


class NvmlHealth:
    """Health reads of the devices of one NVML backend; remembers what each device cannot do."""

    def __init__(self, nv: Any) -> None:
        self.nv = nv
        self.unsupported: set[tuple[int, str]] = set()  # (device index, call)
        self.notes: list[str] = []
        self._last: dict[tuple[int, str], int] = {}  # cumulative counters of the previous read
        self._failed: set[tuple[int, str]] = set()  # (device, "call: error") already noted

    def _unsupported_errors(self) -> tuple[type[BaseException], ...]:
        nv = self.nv
        names = ("NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound")
        return tuple(getattr(nv, n) for n in names if hasattr(nv, n))

    def call(self, index: int, name: str, *args: Any, what: str | None = None) -> Any:
        """``nv.<name>(*args)``, or None when this device cannot do it (recorded once)."""
        key = (index, what or name)
        if key in self.unsupported:
            return None
        fn: Callable[..., Any] | None = getattr(self.nv, name, None)
        if fn is None:
            return self._mark(key, f"{name} not in this pynvml")
        try:
            return fn(*args)
        except self._unsupported_errors() as e:
            return self._mark(key, f"{type(e).__name__}")
        except self.nv.NVMLError_InvalidArgument as e:
            return self._mark(key, f"{type(e).__name__}")
        except self._fatal_errors():
            raise  # the device (lost, needs a reset) or the library: the backend decides
        except self.nv.NVMLError as e:  # anything else: this read goes without it, noted once per kind
            once = (key[0], f"{key[1]}: {type(e).__name__}")
            if once not in self._failed:
                self._failed.add(once)
                self.notes.append(f"nvml:{key[0]}: {key[1]} failed ({type(e).__name__}); left out of this read")
            return None

    def _fatal_errors(self) -> tuple[type[BaseException], ...]:
        names = (
            "NVMLError_GpuIsLost",
            "NVMLError_ResetRequired",
            "NVMLError_Uninitialized",
            "NVMLError_LibRmVersionMismatch",
        )
        return tuple(getattr(self.nv, n) for n in names if hasattr(self.nv, n))

    def _mark(self, key: tuple[int, str], why: str) -> None:
        self.unsupported.add(key)
        self.notes.append(f"nvml:{key[0]}: {key[1]} unsupported ({why}); not asked again")
        return None

    # ------------------------------------------------------------------ the reads
    def read(self, index: int, h: Any) -> HealthReading:
        out = HealthReading()
        self._ecc(index, h, out)
        self._retired(index, h, out)
        self._remapped(index, h, out)
        self._throttle(index, h, out)
        self._nvlink(index, h, out)
        self._pcie(index, h, out)
        return out

    def _ecc(self, i: int, h: Any, out: HealthReading) -> None:
        nv = self.nv
        for err, err_name in (
            (nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, "uncorrected"),
            (nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, "corrected"),
        ):
            for counter, counter_name in ((nv.NVML_VOLATILE_ECC, "volatile"), (nv.NVML_AGGREGATE_ECC, "aggregate")):
                v = self.call(i, "nvmlDeviceGetTotalEccErrors", h, err, counter, what="nvmlDeviceGetTotalEccErrors")
                if v is None:
                    return  # no ECC on this device (one note, then never asked again)
                out.counters[f"ecc_{err_name}_{counter_name}"] = int(v)
        unc = out.counters.get("ecc_uncorrected_volatile", 0)
        if unc > 0:
            out.conditions.append(
                DeviceCondition("ecc_uncorrectable", f"{unc} uncorrected ECC errors since the driver loaded")
            )

    def _retired(self, i: int, h: Any, out: HealthReading) -> None:
        nv = self.nv
        for cause, name in (
            (nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, "dbe"),
            (nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, "sbe"),
        ):
            pages = self.call(i, "nvmlDeviceGetRetiredPages", h, cause, what="nvmlDeviceGetRetiredPages")
            if pages is None:
                break
            out.counters[f"retired_pages_{name}"] = len(pages)
        pending = self.call(i, "nvmlDeviceGetRetiredPagesPendingStatus", h)
        if pending:
            out.counters["retired_pages_pending"] = 1
            out.conditions.append(
                DeviceCondition("retired_pages_pending", "retired pages pending: reset the GPU to retire them")
            )

    def _remapped(self, i: int, h: Any, out: HealthReading) -> None:
        rows = self.call(i, "nvmlDeviceGetRemappedRows", h)
        if rows is None:
            return
        corr, unc, pending, failure = (int(x) for x in rows)
        out.counters.update(
            remapped_rows_correctable=corr,
            remapped_rows_uncorrectable=unc,
            remap_pending=pending,
            remap_failure=failure,
        )
        if failure:
            out.conditions.append(
                DeviceCondition("remap_failure", f"row remapping failed ({unc} uncorrectable rows remapped)")
            )
        if pending:
            out.conditions.append(DeviceCondition("remap_pending", "a row remap is pending: a GPU reset activates it"))

    def _throttle(self, i: int, h: Any, out: HealthReading) -> None:
        nv = self.nv
        if (i, "clock_reasons") in self.unsupported:
            return
        reasons = self.call(i, "nvmlDeviceGetCurrentClocksEventReasons", h, what="clock_reasons_events")
        if reasons is None and (i, "clock_reasons_events") in self.unsupported:
            reasons = self.call(i, "nvmlDeviceGetCurrentClocksThrottleReasons", h, what="clock_reasons")
        if reasons is None:
            return
        out.counters["clock_event_reasons"] = int(reasons)
        for attr, code in THROTTLE_BITS:
            bit = getattr(nv, attr, None)
            if bit is not None and int(reasons) & int(bit):
                out.conditions.append(DeviceCondition(f"throttle:{code}", f"clock-event reason {code} is on"))

    def _grew(self, i: int, name: str, value: int) -> int:
        before = self._last.get((i, name))
        self._last[(i, name)] = value
        return 0 if before is None or value < before else value - before

    def _nvlink(self, i: int, h: Any, out: HealthReading) -> None:
        nv = self.nv
        if (i, "nvmlDeviceGetNvLinkState") in self.unsupported:
            return
        totals = dict.fromkeys((n for _, n in NVLINK_COUNTERS), 0)
        links = 0
        for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", MAX_LINKS_FALLBACK))):
            state = self._link_state(i, h, link)
            if state is None:
                break  # past the last link (or no NVLink at all: noted once)
            if not state:
                continue
            links += 1
            for attr, name in NVLINK_COUNTERS:
                v = self.call(i, "nvmlDeviceGetNvLinkErrorCounter", h, link, getattr(nv, attr), what=f"nvlink_{name}")
                if v is not None:
                    totals[name] += int(v)
        if not links:
            return
        out.counters["nvlink_active_links"] = links
        grown = {}
        for name, v in totals.items():
            out.counters[f"nvlink_{name}"] = v
            d = self._grew(i, f"nvlink_{name}", v)
            if d and name != "replay":  # replays are retried transfers; recovery / CRC are link faults
                grown[name] = d
        if grown:
            what = ", ".join(f"{k} +{v}" for k, v in sorted(grown.items()))
            out.conditions.append(DeviceCondition("nvlink_errors", f"NVLink error counters grew: {what}"))

    def _link_state(self, i: int, h: Any, link: int) -> bool | None:
        """True active, False inactive, None: no such link (or no NVLink)."""
        if link == 0:
            v = self.call(i, "nvmlDeviceGetNvLinkState", h, link)
            return None if v is None else bool(v)
        try:
            return bool(self.nv.nvmlDeviceGetNvLinkState(h, link))
        except (self.nv.NVMLError_InvalidArgument, *self._unsupported_errors()):
            return None  # the first link past the device's last one: not an unsupported call

    def _pcie(self, i: int, h: Any, out: HealthReading) -> None:
        v = self.call(i, "nvmlDeviceGetPcieReplayCounter", h)
        if v is None:
            return
        out.counters["pcie_replay"] = int(v)
        d = self._grew(i, "pcie_replay", int(v))
        if d:
            out.conditions.append(DeviceCondition("pcie_replays", f"PCIe replay counter +{d} since the last read"))
