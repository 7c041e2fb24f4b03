"""The ``detectors:`` section of the configuration: one frozen dataclass per detector, with its
``mode`` (observe, alert, remediate), its thresholds and how many evaluations open and resolve an
incident. Shape and defaults only: the loader (``config/loader.py``) validates each field by its
``check`` rule; the detectors (``vllm_guardian/detectors/``) read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_guardian.config.schema_fields import SECONDS, Mode, setting


@dataclass(frozen=True)
class BusyLoopConfig:
    mode: Mode = setting(Mode.REMEDIATE, "mode")
    window: float = setting(10.0, "positive", "seconds of thread samples looked at", bound=SECONDS)
    cpu_ratio: float = setting(0.9, "ratio", "a thread at or above this share of a core is hot")
    max_voluntary_per_cpu_second: float = setting(
        100.0, "nonneg", "a spinning thread blocks (almost) never: voluntary switches per CPU-second"
    )
    running_fraction: float = setting(0.8, "ratio", "share of samples with syscall=running (when readable)")
    min_coverage: float = setting(0.5, "ratio", "share of the window that must hold samples")
    open_after: int = setting(1, "positive", "consecutive confirmed evaluations to open")
    resolve_after: int = setting(3, "positive", "consecutive negative evaluations to resolve")


@dataclass(frozen=True)
class EngineStallConfig:
    mode: Mode = setting(Mode.REMEDIATE, "mode")
    window: float = setting(20.0, "positive", "seconds without progress while work is pending", bound=SECONDS)
    open_after: int = setting(1, "positive")
    resolve_after: int = setting(3, "positive")


@dataclass(frozen=True)
class EngineDeadConfig:
    mode: Mode = setting(Mode.REMEDIATE, "mode")
    open_after: int = setting(2, "positive")
    resolve_after: int = setting(1, "positive")


@dataclass(frozen=True)
class KvCacheLeakConfig:
    mode: Mode = setting(Mode.ALERT, "mode")
    window: float = setting(60.0, "positive", bound=SECONDS)
    margin: float = setting(0.1, "ratio", "usage above the idle baseline that counts as leaked")
    open_after: int = setting(1, "positive")
    resolve_after: int = setting(3, "positive")


@dataclass(frozen=True)
class MemoryLeakConfig:
    mode: Mode = setting(Mode.ALERT, "mode")
    window: float = setting(90.0, "positive", "seconds of samples the slope is fitted over", bound=SECONDS)
    slope_bytes_per_s: float = setting(5_000_000.0, "positive", "robust slope that counts as a leak")
    warmup: float = setting(
        300.0,
        "nonneg",
        "longest warm-up: growth that has not levelled off since ready is judged only after this many seconds",
        bound=SECONDS,
    )
    open_after: int = setting(1, "positive")
    resolve_after: int = setting(3, "positive")


@dataclass(frozen=True)
class OutputCorruptionConfig:
    """Conditions A-D over the gates' results (rounds: see ``gates``)."""

    mode: Mode = setting(Mode.ALERT, "mode")
    l1_l2_failures: int = setting(5, "positive", "A: this many L1/L2 failures on one target ...")
    l1_l2_window: float = setting(60.0, "positive", "A: ... within this many seconds")
    l4_rounds: int = setting(3, "positive", "C: L4 failed this many rounds in a row")
    l5_rounds: int = setting(3, "positive", "D: L5 failed this many rounds in a row")
    open_after: int = setting(1, "positive")
    resolve_after: int = setting(3, "positive", "ticks without a condition (and a clean latest round)")


@dataclass(frozen=True)
class ProbeFailureConfig:
    mode: Mode = setting(Mode.ALERT, "mode")
    after: int = setting(30, "positive", "consecutive failures of one probe before alerting")


@dataclass(frozen=True)
class StartupTimeoutConfig:
    """A server that never becomes ready within ``lifecycle.startup_limit``."""

    mode: Mode = setting(Mode.ALERT, "mode")
    open_after: int = setting(1, "positive")
    resolve_after: int = setting(1, "positive")


@dataclass(frozen=True)
class PauseTooLongConfig:
    """A server paused or asleep on purpose for longer than ``lifecycle.max_pause``: never a restart."""

    mode: Mode = setting(Mode.ALERT, "mode")
    open_after: int = setting(1, "positive")
    resolve_after: int = setting(1, "positive")


@dataclass(frozen=True)
class AccelFaultConfig:
    """``accel_fault``: one incident per device, from the device-fault telemetry (NVML, kernel log,
    npu-smi) and the device-fault catalog. Alert only: the guardian cannot mend a device; what it
    does is refuse to restart a server onto one (``remediation``) and say so."""

    mode: Mode = setting(Mode.ALERT, "mode")
    window: float = setting(
        900.0,
        "positive",
        "seconds an event (an Xid) counts after it was seen; conditions count while present",
        bound=SECONDS,
    )
    open_after: int = setting(1, "positive")
    resolve_after: int = setting(3, "positive", "consecutive evaluations without a fault in the window")


@dataclass(frozen=True)
class DetectorsConfig:
    busy_loop: BusyLoopConfig = field(default_factory=BusyLoopConfig)
    engine_stall: EngineStallConfig = field(default_factory=EngineStallConfig)
    engine_dead: EngineDeadConfig = field(default_factory=EngineDeadConfig)
    kv_cache_leak: KvCacheLeakConfig = field(default_factory=KvCacheLeakConfig)
    accel_memory_leak: MemoryLeakConfig = field(default_factory=MemoryLeakConfig)
    host_memory_leak: MemoryLeakConfig = field(default_factory=MemoryLeakConfig)
    output_corruption: OutputCorruptionConfig = field(default_factory=OutputCorruptionConfig)
    probe_failure: ProbeFailureConfig = field(default_factory=ProbeFailureConfig)
    startup_timeout: StartupTimeoutConfig = field(default_factory=StartupTimeoutConfig)
    pause_too_long: PauseTooLongConfig = field(default_factory=PauseTooLongConfig)
    accel_fault: AccelFaultConfig = field(default_factory=AccelFaultConfig)
