"""The configuration's shape: typed, frozen dataclasses with the defaults.

The YAML file maps 1:1 onto these classes (``vllm_guardian.config.loader`` loads and validates
it strictly: an unknown key or a wrong type is an error naming the key path).
Field metadata ``check`` names a validation rule (see ``vllm_guardian.config.rules``):
``positive`` (> 0), ``nonneg`` (>= 0), ``ratio`` (0..1), ``mode``, ``onoff``
(auto|off), ``restart_mode``, ``regex``, ``expect`` (regex or ``baseline``), ``port``,
``hostport``, ``log_format``, ``log_level``, ``taint_key``.
The top-level names are a contract: scripts and operators rely on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Mode(str, Enum):
    """What the guardian does with an incident of one kind: record it, alert, or also remediate."""

    OBSERVE = "observe"
    ALERT = "alert"
    REMEDIATE = "remediate"

    def __str__(self) -> str:
        return self.value


def _f(default, check: str | None = None, doc: str = ""):
    md = {"doc": doc}
    if check:
        md["check"] = check
    if isinstance(default, (list, dict, tuple)) or callable(default):
        factory = default if callable(default) else (lambda d=default: type(d)(d))
        return field(default_factory=factory, metadata=md)
    return field(default=default, metadata=md)


# ---------------------------------------------------------------- targets
@dataclass(frozen=True)
class KubernetesMatch:
    """A pod on this node: ``namespace`` + ``pod`` (name) or ``selector`` (labels), or ``pod_uid``."""

    pod_uid: str | None = None
    namespace: str | None = None
    pod: str | None = None
    selector: str | None = _f(None, doc="label selector, e.g. app=vllm,model=llama")
    container: str | None = _f(None, doc="the container running vLLM; default: the pod's only one")


@dataclass(frozen=True)
class MatchConfig:
    """Exactly one matcher must be set."""

    port: int | None = _f(None, "port", "the port the API server listens on")
    pid_file: str | None = _f(None, doc="a file holding the API server's pid")
    cmdline_regex: str | None = _f(None, "regex", "regex searched in the joined cmdline")
    systemd_unit: str | None = _f(None, doc="the systemd unit running the API server (its cgroup)")
    kubernetes: KubernetesMatch | None = None


@dataclass(frozen=True)
class RestartConfig:
    mode: str = _f("signal", "restart_mode", "systemd | command | kubernetes | signal")
    command: tuple[str, ...] = _f((), doc="argv for mode=command (no shell)")
    unit: str | None = None
    env: dict[str, str] = _f({}, doc="mode=command: the server's whole environment (plus PATH, LANG, HOME)")
    cwd: str | None = None
    log_file: str | None = None
    user: str | None = _f(None, doc="mode=command: run the server as this user (name or uid)")
    group: str | None = _f(None, doc="mode=command: and this group (default: the user's)")
    namespace: str | None = _f(
        None, doc="kubernetes: the pod's namespace; its pods are listed only there (RBAC is granted per namespace)"
    )
    stop_timeout: float = _f(30.0, "positive", "SIGTERM -> SIGKILL of the whole tree, seconds")
    hang_stop_grace: float = _f(
        1.0,
        "nonneg",
        "SIGTERM -> SIGKILL for a hung tree (busy loop, stall, "
        "engine death): a stuck engine does not shut down cleanly",
    )
    ready_timeout: float = _f(600.0, "positive", "start -> /health 200 and a canary answered")
    owner_grace: float = _f(
        10.0,
        "nonneg",
        "before starting anything, seconds to let the owner (a deploy, "
        "systemd, a controller) bring the target back first",
    )


@dataclass(frozen=True)
class DrainConfig:
    timeout: float = _f(120.0, "nonneg")
    hook: tuple[str, ...] = _f(())


@dataclass(frozen=True)
class TargetConfig:
    name: str
    match: MatchConfig
    api_url: str | None = _f(None, doc="default: http://127.0.0.1:<port>")
    model: str | None = _f(None, doc="served model name; default: first of /v1/models")
    api_key_env: str | None = _f(None, doc="variable of the guardian's environment holding the server's API key")
    api_key_file: str | None = _f(None, doc="file whose first line is the server's API key")
    restart: RestartConfig = field(default_factory=RestartConfig)
    drain: DrainConfig = field(default_factory=DrainConfig)
    log_path: str | None = _f(None, doc="the server's log file, read for crash forensics (engine_dead)")


# ---------------------------------------------------------------- detectors
@dataclass(frozen=True)
class BusyLoopConfig:
    mode: Mode = _f(Mode.REMEDIATE, "mode")
    window: float = _f(10.0, "positive", "seconds of thread samples looked at")
    cpu_ratio: float = _f(0.9, "ratio", "a thread at or above this share of a core is hot")
    max_voluntary_per_cpu_second: float = _f(
        100.0, "nonneg", "a spinning thread blocks (almost) never: voluntary switches per CPU-second"
    )
    running_fraction: float = _f(0.8, "ratio", "share of samples with syscall=running (when readable)")
    min_coverage: float = _f(0.5, "ratio", "share of the window that must hold samples")
    open_after: int = _f(1, "positive", "consecutive confirmed evaluations to open")
    resolve_after: int = _f(3, "positive", "consecutive negative evaluations to resolve")


@dataclass(frozen=True)
class EngineStallConfig:
    mode: Mode = _f(Mode.REMEDIATE, "mode")
    window: float = _f(20.0, "positive", "seconds without progress while work is pending")
    open_after: int = _f(1, "positive")
    resolve_after: int = _f(3, "positive")


@dataclass(frozen=True)
class EngineDeadConfig:
    mode: Mode = _f(Mode.REMEDIATE, "mode")
    open_after: int = _f(2, "positive")
    resolve_after: int = _f(1, "positive")


@dataclass(frozen=True)
class KvCacheLeakConfig:
    mode: Mode = _f(Mode.ALERT, "mode")
    window: float = _f(60.0, "positive")
    margin: float = _f(0.1, "ratio", "usage above the idle baseline that counts as leaked")
    open_after: int = _f(1, "positive")
    resolve_after: int = _f(3, "positive")


@dataclass(frozen=True)
class MemoryLeakConfig:
    mode: Mode = _f(Mode.ALERT, "mode")
    window: float = _f(90.0, "positive", "seconds of samples the slope is fitted over")
    slope_bytes_per_s: float = _f(5_000_000.0, "positive", "robust slope that counts as a leak")
    warmup: float = _f(
        300.0,
        "nonneg",
        "longest warm-up: growth that has not levelled off since ready is judged only after this many seconds",
    )
    open_after: int = _f(1, "positive")
    resolve_after: int = _f(3, "positive")


@dataclass(frozen=True)
class OutputCorruptionConfig:
    """Conditions A-D over the gates' results (rounds: see ``gates``)."""

    mode: Mode = _f(Mode.ALERT, "mode")
    l1_l2_failures: int = _f(5, "positive", "A: this many L1/L2 failures on one target ...")
    l1_l2_window: float = _f(60.0, "positive", "A: ... within this many seconds")
    l4_rounds: int = _f(3, "positive", "C: L4 failed this many rounds in a row")
    l5_rounds: int = _f(3, "positive", "D: L5 failed this many rounds in a row")
    open_after: int = _f(1, "positive")
    resolve_after: int = _f(3, "positive", "ticks without a condition (and a clean latest round)")


@dataclass(frozen=True)
class ProbeFailureConfig:
    mode: Mode = _f(Mode.ALERT, "mode")
    after: int = _f(30, "positive", "consecutive failures of one probe before alerting")


@dataclass(frozen=True)
class StartupTimeoutConfig:
    """A server that never becomes ready within ``lifecycle.startup_limit``."""

    mode: Mode = _f(Mode.ALERT, "mode")
    open_after: int = _f(1, "positive")
    resolve_after: int = _f(1, "positive")


@dataclass(frozen=True)
class PauseTooLongConfig:
    """A server paused or asleep on purpose for longer than ``lifecycle.max_pause``: never a restart."""

    mode: Mode = _f(Mode.ALERT, "mode")
    open_after: int = _f(1, "positive")
    resolve_after: int = _f(1, "positive")


@dataclass(frozen=True)
class AccelFaultConfig:
    """``accel_fault``: one incident per device, from the device-fault telemetry (NVML, kernel log,
    npu-smi) and the device-fault catalog. Alert only: the guardian cannot mend a device; what it
    does is refuse to restart a server onto one (``remediation``) and say so."""

    mode: Mode = _f(Mode.ALERT, "mode")
    window: float = _f(
        900.0, "positive", "seconds an event (an Xid) counts after it was seen; conditions count while present"
    )
    open_after: int = _f(1, "positive")
    resolve_after: int = _f(3, "positive", "consecutive evaluations without a fault in the window")


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


# ---------------------------------------------------------------- probes, discovery
@dataclass(frozen=True)
class ProcfsProbeConfig:
    interval: float = _f(1.0, "positive")
    deadline: float = _f(0.5, "positive")
    proc_root: str = _f("/proc")
    hot_cpu_ratio: float = _f(0.5, "ratio", "a process this busy gets per-thread reads")


@dataclass(frozen=True)
class HttpProbeConfig:
    interval: float = _f(1.0, "positive")
    timeout: float = _f(2.0, "positive")


@dataclass(frozen=True)
class CanaryProbeConfig:
    interval: float = _f(10.0, "positive", "periodic end-to-end check, seconds")
    timeout: float = _f(5.0, "positive", "a canary slower than this counts as a hang")
    confirm_cooldown: float = _f(3.0, "nonneg", "min seconds between two confirmation canaries")
    prompt: str = _f("Hello")
    max_tokens: int = _f(1, "positive")


@dataclass(frozen=True)
class DiagnosticPromptConfig:
    """L5: a prompt with a known answer (greedy, fixed seed)."""

    prompt: str
    expect: str = _f("baseline", "expect", "a regex searched in the answer, or the word baseline")
    max_tokens: int = _f(4, "positive")


_SHADOW_PROMPTS = (
    "The first month of the year is",
    "Water freezes at a temperature of",
    "Once upon a time, there was a",
)


@dataclass(frozen=True)
class TrustConfig:
    """Who may make the guardian act: signed reports, decisions and L4 fingerprints (docs/gates.md, Trust)."""

    keys_file: str | None = _f(None, doc="file of `kid secret` lines (mode 0600); the first line signs")
    key_env: str | None = _f(None, doc="environment variable holding one secret (kid `default`)")
    max_skew: float = _f(30.0, "nonneg", "seconds a signed message may be stamped ahead of this clock")
    max_age: float = _f(600.0, "positive", "seconds after which a report is stale (its replay window)")
    reports_per_minute: int = _f(30, "positive", "counted reports per target per minute; the rest dropped")
    min_peer_nodes: int = _f(2, "positive", "L4: other nodes' fingerprints vote only from this many nodes")


@dataclass(frozen=True)
class GatesConfig:
    """Output-correctness gates L1-L5, run by the guardian against each target."""

    enabled: bool = _f(False, doc="opt-in")
    interval: float = _f(60.0, "positive", "seconds between gate rounds per target")
    diagnostics: tuple[DiagnosticPromptConfig, ...] = _f(
        (DiagnosticPromptConfig("1+1=", r"^\s*2", 4),), doc="L5 prompts"
    )
    reference_text: str | None = _f(None, doc="L2 text; null = a built-in passage")
    shadow: bool = _f(True, doc="L4 agreement across instances of one model")
    reports_channel: str = "vllm_health_alert"
    control_channel: str = "vllm_control"
    shadow_prompts: tuple[str, ...] = _f(_SHADOW_PROMPTS, doc="L4 prompts (greedy)")
    shadow_max_tokens: int = _f(8, "positive")
    top_logprobs: int = _f(5, "positive", "L3 reads this many top logprobs per position")
    seed: int = _f(0, "nonneg", "per-request seed of every gate request")
    timeout: float = _f(30.0, "positive", "per gate request, seconds")
    perplexity_factor: float = _f(3.0, "positive", "L2 fails above factor x baseline")
    baseline_samples: int = _f(3, "positive", "reference perplexities whose median is the L2 baseline")
    max_entropy: float = _f(8.0, "positive", "L3: mean estimated entropy bound, nats")
    min_top1: float = _f(0.05, "ratio", "L3: top-1 probability bound while entropy is low")
    low_entropy: float = _f(2.0, "positive", "L3: what counts as low entropy, nats")
    peer_max_age: float | None = _f(None, "positive", "L4: ignore peer fingerprints older; null = 3 x interval")
    tie_margin: float = _f(
        0.05,
        "nonneg",
        "an answer leaving its baseline where the two tokens were within this "
        "many nats is a batching flip, not a failure",
    )
    trust: TrustConfig = field(default_factory=TrustConfig)
    builtin_checks: bool = _f(
        True,
        doc="L5: the built-in known-answer checks (copy, counting, a pattern), each expecting the "
        "target's own first healthy answer; they need no world knowledge",
    )
    confirm_rounds: int | None = _f(
        None,
        "nonneg",
        "quick rounds after a failing one (or a confirmation request) while they keep failing; "
        "null = enough for conditions A, C and D to conclude (the largest of their counts - 1)",
    )
    confirm_delay: float = _f(2.0, "positive", "seconds between a failing round and its confirmation round")


@dataclass(frozen=True)
class ProbesConfig:
    procfs: ProcfsProbeConfig = field(default_factory=ProcfsProbeConfig)
    vllm_http: HttpProbeConfig = field(default_factory=HttpProbeConfig)
    canary: CanaryProbeConfig = field(default_factory=CanaryProbeConfig)


@dataclass(frozen=True)
class DiscoveryConfig:
    interval: float = _f(5.0, "positive", "seconds between re-discoveries (a vanished process is seen every tick)")
    process_name_prefix: str = _f("VLLM", doc="vLLM's VLLM_PROCESS_NAME_PREFIX")
    forget_after: float = _f(600.0, "positive", "seconds a vanished autodiscovered target is remembered")
    pass_wait: float = _f(
        0.5, "nonneg", "seconds the loop waits for a pass it started; a slower one is applied on a later tick"
    )
    stuck_after: float = _f(30.0, "positive", "seconds after which a pass blocked in a read is abandoned")


# ---------------------------------------------------------------- policy, alerts, evidence, ...
@dataclass(frozen=True)
class BudgetConfig:
    max_restarts: int = _f(3, "positive")
    period: float = _f(3600.0, "positive")


@dataclass(frozen=True)
class BackoffConfig:
    initial: float = _f(30.0, "positive")
    max: float = _f(900.0, "positive")


@dataclass(frozen=True)
class FleetConfig:
    max_concurrent_restarts: int = _f(1, "positive")
    lease_ttl: float = _f(900.0, "positive")
    when_redis_down: str = _f("deny", doc="allow | deny a restart when the lease cannot be checked")


@dataclass(frozen=True)
class NodeAnomalyConfig:
    fraction: float = _f(0.5, "ratio", "share of a node's targets tripping at once")
    min_targets: int = _f(2, "positive")


@dataclass(frozen=True)
class PolicyConfig:
    dry_run: bool = False
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    backoff: BackoffConfig = field(default_factory=BackoffConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)
    node_anomaly: NodeAnomalyConfig = field(default_factory=NodeAnomalyConfig)


@dataclass(frozen=True)
class SpoolConfig:
    max_events: int = _f(10000, "positive")
    max_bytes: int = _f(64 * 1024 * 1024, "positive")


@dataclass(frozen=True)
class AlertsConfig:
    redis_url: str = _f("embedded", doc="embedded | redis://... | rediss://... | unix://...")
    password_env: str | None = None
    password_file: str | None = None
    stream: str = "guardian:alerts"
    stream_maxlen: int = _f(100000, "positive")
    channel: str = "guardian:alerts"
    control_channel: str = "guardian:control"
    renotify_interval: float = _f(3600.0, "positive")
    heartbeat_ttl: float = _f(30.0, "positive")
    timeout: float = _f(2.0, "positive")
    spool: SpoolConfig = field(default_factory=SpoolConfig)


@dataclass(frozen=True)
class RetentionConfig:
    max_bundles: int = _f(50, "positive")
    max_bytes: int = _f(512 * 1024 * 1024, "positive")


@dataclass(frozen=True)
class EvidenceConfig:
    pyspy: str = _f("py-spy", doc="path or name on PATH")
    record_seconds: float = _f(3.0, "nonneg")
    locals: bool = _f(False, doc="py-spy --locals: off, locals can hold user prompts")
    native: bool = False
    dump_timeout: float = _f(10.0, "positive")
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    output_corruption_stacks: bool = _f(
        False,
        doc="py-spy stacks and a flame record for output_corruption too (off: its bundle holds the "
        "failing answers in gates.json; a server answering wrong is not stuck, a dump only pauses it)",
    )


@dataclass(frozen=True)
class AcceleratorsConfig:
    nvml: str = _f("auto", "onoff")
    npu_smi: str = _f("auto", "onoff")
    npu_smi_path: str = "npu-smi"
    npu_smi_timeout: float = _f(5.0, "positive")
    kmsg: str = _f("auto", "onoff", "NVRM: Xid lines of the kernel log (<kmsg_root>/dev/kmsg); auto: when readable")
    kmsg_root: str = _f("/", doc="the root /dev/kmsg and /proc/uptime are read under (a host mount in a container)")
    kmsg_backlog: float = _f(600.0, "nonneg", "at start, kernel-log Xids this many seconds old still count")
    health_interval: float = _f(
        5.0, "positive", "seconds between device health reads (ECC, remapping, throttle, links)"
    )


@dataclass(frozen=True)
class DiagnosisConfig:
    catalogs: tuple[str, ...] = _f((), doc="extra signature catalogs (YAML files or folders), after the shipped ones")
    log_max_bytes: int = _f(256 * 1024, "positive", "bytes of the log tail read for crash forensics")


@dataclass(frozen=True)
class LifecycleConfig:
    """A server's life: warm-up, pause and sleep on purpose (see docs/design.md, "Lifecycle")."""

    startup_limit: float = _f(
        1200.0, "positive", "seconds from first seen to ready (/health 200 and /v1/models) before startup_timeout"
    )
    server_state: str = _f("auto", "onoff", "ask GET /is_paused and /is_sleeping where the server exposes them")
    max_pause: float = _f(600.0, "positive", "a pause or sleep on purpose longer than this: an alert, never a restart")
    resume_grace: float = _f(
        30.0, "nonneg", "seconds after a resume, a wake-up or an undrain the hang detectors stay down"
    )


@dataclass(frozen=True)
class LogConfig:
    """The daemon's log lines (``--log-format``/``--log-level`` and GUARDIAN_LOG_* win over these)."""

    format: str = _f("text", "log_format", "text | json | logfmt")
    level: str = _f("info", "log_level", "debug | info | warning | error | critical")


@dataclass(frozen=True)
class ApiConfig:
    socket: str | None = _f(None, doc="unix socket; default <state_dir>/guardian.sock")
    http: str | None = _f("127.0.0.1:9464", "hostport", "/metrics + readiness; null = off")


@dataclass(frozen=True)
class KubernetesConfig:
    """What the guardian tells the Kubernetes API about the pods it supervises (pods matched by
    ``match.kubernetes`` or restarted with ``restart.mode: kubernetes``; docs/operate.md)."""

    kubeconfig: str | None = _f(None, doc="outside a pod (systemd on a node): a kubeconfig; default $KUBECONFIG")
    context: str | None = _f(None, doc="the kubeconfig's context; default its current-context")
    readiness_gate: bool = _f(True, doc="patch the pod condition vllm-guardian.io/serving (the pod's readiness gate)")
    events: bool = _f(True, doc="Kubernetes Events on the pod, node-wide findings on the Node")
    node_condition: bool = _f(False, doc="a NodeCondition VllmGuardianProblem (needs nodes/status patch)")
    taint_on_device_fault: bool = _f(
        False, doc="taint this Node <taint_key>=vllm-guardian:NoSchedule while a device fault blocks restarts"
    )
    taint_key: str = _f("vllm-guardian.io/accel-fault", "taint_key", "the taint's key (needs nodes get + patch)")
    pod_removal: str = _f("evict", "pod_removal", "restart.mode kubernetes: evict (respects PDBs) | delete")
    event_burst: int = _f(25, "positive", "Events per object before rate limiting (the kubelet's burst)")
    event_refill: float = _f(300.0, "positive", "seconds per Event regained after the burst (the kubelet's)")
    timeout: float = _f(10.0, "positive", "seconds per API call")


@dataclass(frozen=True)
class Config:
    node: str | None = _f(None, doc="default: the host name")
    state_dir: str = "/var/lib/guardian"
    interval: float = _f(1.0, "positive", "seconds per tick")
    autodiscover: bool = True
    targets: tuple[TargetConfig, ...] = ()
    detectors: DetectorsConfig = field(default_factory=DetectorsConfig)
    probes: ProbesConfig = field(default_factory=ProbesConfig)
    discovery: DiscoveryConfig = field(default_factory=DiscoveryConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    evidence: EvidenceConfig = field(default_factory=EvidenceConfig)
    accelerators: AcceleratorsConfig = field(default_factory=AcceleratorsConfig)
    gates: GatesConfig = field(default_factory=GatesConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    diagnosis: DiagnosisConfig = field(default_factory=DiagnosisConfig)
    lifecycle: LifecycleConfig = field(default_factory=LifecycleConfig)
    log: LogConfig = field(default_factory=LogConfig)
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)

    def socket_path(self) -> str:
        return self.api.socket or f"{self.state_dir.rstrip('/')}/guardian.sock"
