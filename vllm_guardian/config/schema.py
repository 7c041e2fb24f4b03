"""The configuration's shape: typed, frozen dataclasses with the defaults.

The YAML file maps 1:1 onto these classes (``vllm_guardian.config.loader`` loads and validates
it strictly: an unknown key or a wrong type is an error naming the key path).
Field metadata ``check`` names a validation rule (see ``vllm_guardian.config.rules``):
``positive`` (> 0), ``nonneg`` (>= 0), ``ratio`` (0..1), ``mode``, ``onoff``
(auto|off), ``restart_mode``, ``regex``, ``expect`` (regex or ``baseline``), ``port``,
``hostport``, ``log_format``, ``log_level``, ``taint_key``.
The top-level names are a contract: scripts and operators rely on them. The detectors' sections are
``config/schema_detectors.py``'s; ``Mode`` and the field helper are ``config/schema_fields.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_guardian.config.schema_alertmanager import AlertmanagerConfig
from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.config.schema_groups import GroupsConfig
from vllm_guardian.config.schema_fields import INTERVAL, SECONDS, TICK, Limit, setting
from vllm_guardian.config.schema_policy import (
    BreakerConfig,
    DeviceCheckConfig,
    DeviceFaultRule,
    ProfileConfig,
    RecurrenceConfig,
)


# ---------------------------------------------------------------- targets
@dataclass(frozen=True)
class KubernetesMatch:
    """A pod on this node: ``namespace`` + ``pod`` (name) or ``selector`` (labels), or ``pod_uid``."""

    pod_uid: str | None = None
    namespace: str | None = None
    pod: str | None = None
    selector: str | None = setting(None, doc="label selector, e.g. app=vllm,model=llama")
    container: str | None = setting(None, doc="the container running vLLM; default: the pod's only one")


@dataclass(frozen=True)
class MatchConfig:
    """Exactly one matcher must be set."""

    port: int | None = setting(None, "port", "the port the API server listens on")
    pid_file: str | None = setting(None, doc="a file holding the API server's pid")
    cmdline_regex: str | None = setting(None, "regex", "regex searched in the joined cmdline")
    systemd_unit: str | None = setting(None, doc="the systemd unit running the API server (its cgroup)")
    kubernetes: KubernetesMatch | None = None


@dataclass(frozen=True)
class RestartConfig:
    mode: str = setting("signal", "restart_mode", "systemd | command | kubernetes | signal")
    command: tuple[str, ...] = setting((), doc="argv for mode=command (no shell)")
    unit: str | None = None
    env: dict[str, str] = setting({}, doc="mode=command: the server's whole environment (plus PATH, LANG, HOME)")
    cwd: str | None = None
    log_file: str | None = None
    user: str | None = setting(None, doc="mode=command: run the server as this user (name or uid)")
    group: str | None = setting(None, doc="mode=command: and this group (default: the user's)")
    namespace: str | None = setting(
        None, doc="kubernetes: the pod's namespace; its pods are listed only there (RBAC is granted per namespace)"
    )
    stop_timeout: float = setting(30.0, "positive", "SIGTERM -> SIGKILL of the whole tree, seconds", bound=SECONDS)
    hang_stop_grace: float = setting(
        1.0,
        "nonneg",
        "SIGTERM -> SIGKILL for a hung tree (busy loop, stall, "
        "engine death): a stuck engine does not shut down cleanly",
    )
    ready_timeout: float = setting(600.0, "positive", "start -> /health 200 and a canary answered", bound=SECONDS)
    owner_grace: float = setting(
        10.0,
        "nonneg",
        "before starting anything, seconds to let the owner (a deploy, "
        "systemd, a controller) bring the target back first",
    )


@dataclass(frozen=True)
class DrainConfig:
    timeout: float = setting(120.0, "nonneg", bound=SECONDS)
    hook: tuple[str, ...] = setting(())
    checkpoint: str = setting(
        "auto",
        "onoff",
        "before a restart, drain through vLLM's own POST /checkpoint/prepare?mode=wait where the server "
        "offers it (vLLM 0.34 with --enable-sleep-mode); off: the queue and the hook only",
    )


@dataclass(frozen=True)
class TargetConfig:
    name: str
    match: MatchConfig
    api_url: str | None = setting(None, doc="default: http://127.0.0.1:<port>")
    model: str | None = setting(None, doc="served model name; default: first of /v1/models")
    api_key_env: str | None = setting(None, doc="variable of the guardian's environment holding the server's API key")
    api_key_file: str | None = setting(None, doc="file whose first line is the server's API key")
    restart: RestartConfig = field(default_factory=RestartConfig)
    drain: DrainConfig = field(default_factory=DrainConfig)
    log_path: str | None = setting(None, doc="the server's log file, read for crash forensics (engine_dead)")


# ---------------------------------------------------------------- probes, discovery
@dataclass(frozen=True)
class ProcfsProbeConfig:
    interval: float = setting(1.0, "positive", bound=INTERVAL)
    deadline: float = setting(0.5, "positive", bound=SECONDS)
    proc_root: str = setting("/proc")
    hot_cpu_ratio: float = setting(0.5, "ratio", "a process this busy gets per-thread reads")


# The most the HTTP client reads of an answer (host/http.py): a /metrics page of a big vLLM is
# ~100 KiB. Here, beside the setting it bounds (probes.vllm_http.max_page_bytes).
MAX_BODY = 8 * 1024 * 1024
PAGE_BYTES = (Limit(f"at most {MAX_BODY} (the most the HTTP client reads of an answer)", high=MAX_BODY),)
MAX_ENGINES_JUDGED = 1024  # data-parallel ranks behind one API server judged one by one
ENGINES_JUDGED = (Limit(f"at most {MAX_ENGINES_JUDGED} (each engine is judged every tick)", high=MAX_ENGINES_JUDGED),)
MAX_PASS_WAIT = 5.0  # the loop waits this long for a discovery pass: longer would stall the tick
PASS_WAIT = (Limit(f"at most {MAX_PASS_WAIT:g} seconds (the loop waits that long)", high=MAX_PASS_WAIT), *SECONDS)
STUCK_AFTER = (
    Limit("at least 1 second (a pass of a busy node takes tens of milliseconds)", low=1.0),
    *SECONDS,
)


@dataclass(frozen=True)
class HttpProbeConfig:
    interval: float = setting(1.0, "positive", bound=INTERVAL)
    timeout: float = setting(2.0, "positive", bound=SECONDS)
    max_engines: int = setting(
        64,
        "positive",
        "engines of a data-parallel server judged one by one (engine labels 0..N-1; others dropped)",
        bound=ENGINES_JUDGED,
    )
    max_page_bytes: int = setting(
        4 * 1024 * 1024,
        "positive",
        "a /metrics page larger than this is refused (a real one is ~50 KB per engine)",
        bound=PAGE_BYTES,
    )


@dataclass(frozen=True)
class CanaryProbeConfig:
    interval: float = setting(10.0, "positive", "periodic end-to-end check, seconds", bound=INTERVAL)
    timeout: float = setting(5.0, "positive", "a canary slower than this counts as a hang", bound=SECONDS)
    confirm_cooldown: float = setting(3.0, "nonneg", "min seconds between two confirmation canaries", bound=SECONDS)
    prompt: str = setting("Hello")
    max_tokens: int = setting(1, "positive")


@dataclass(frozen=True)
class DiagnosticPromptConfig:
    """L5: a prompt with a known answer (greedy, fixed seed)."""

    prompt: str
    expect: str = setting("baseline", "expect", "a regex searched in the answer, or the word baseline")
    max_tokens: int = setting(4, "positive")


_SHADOW_PROMPTS = (
    "The first month of the year is",
    "Water freezes at a temperature of",
    "Once upon a time, there was a",
)


@dataclass(frozen=True)
class TrustConfig:
    """Who may make the guardian act: signed reports, decisions and L4 fingerprints (docs/gates.md, Trust)."""

    keys_file: str | None = setting(None, doc="file of `kid secret` lines (mode 0600); the first line signs")
    key_env: str | None = setting(None, doc="environment variable holding one secret (kid `default`)")
    max_skew: float = setting(30.0, "nonneg", "seconds a signed message may be stamped ahead of this clock")
    max_age: float = setting(600.0, "positive", "seconds after which a report is stale (its replay window)")
    reports_per_minute: int = setting(30, "positive", "counted reports per target per minute; the rest dropped")
    min_peer_nodes: int = setting(2, "positive", "L4: other nodes' fingerprints vote only from this many nodes")


@dataclass(frozen=True)
class GatesConfig:
    """Output-correctness gates L1-L5, run by the guardian against each target."""

    enabled: bool = setting(False, doc="opt-in")
    interval: float = setting(60.0, "positive", "seconds between gate rounds per target", bound=INTERVAL)
    diagnostics: tuple[DiagnosticPromptConfig, ...] = setting(
        (DiagnosticPromptConfig("1+1=", r"^\s*2", 4),), doc="L5 prompts"
    )
    reference_text: str | None = setting(None, doc="L2 text; null = a built-in passage")
    shadow: bool = setting(True, doc="L4 agreement across instances of one model")
    reports_channel: str = "vllm_health_alert"
    control_channel: str = "vllm_control"
    shadow_prompts: tuple[str, ...] = setting(_SHADOW_PROMPTS, doc="L4 prompts (greedy)")
    shadow_max_tokens: int = setting(8, "positive")
    top_logprobs: int = setting(5, "positive", "L3 reads this many top logprobs per position")
    seed: int = setting(0, "nonneg", "per-request seed of every gate request")
    timeout: float = setting(30.0, "positive", "per gate request, seconds", bound=SECONDS)
    perplexity_factor: float = setting(3.0, "positive", "L2 fails above factor x baseline")
    baseline_samples: int = setting(3, "positive", "reference perplexities whose median is the L2 baseline")
    max_entropy: float = setting(8.0, "positive", "L3: mean estimated entropy bound, nats")
    min_top1: float = setting(0.05, "ratio", "L3: top-1 probability bound while entropy is low")
    low_entropy: float = setting(2.0, "positive", "L3: what counts as low entropy, nats")
    peer_max_age: float | None = setting(None, "positive", "L4: ignore peer fingerprints older; null = 3 x interval")
    tie_margin: float = setting(
        0.05,
        "nonneg",
        "an answer leaving its baseline where the two tokens were within this "
        "many nats is a batching flip, not a failure",
    )
    trust: TrustConfig = field(default_factory=TrustConfig)
    builtin_checks: bool = setting(
        True,
        doc="L5: the built-in known-answer checks (copy, counting, a pattern), each expecting the "
        "target's own first healthy answer; they need no world knowledge",
    )
    confirm_rounds: int | None = setting(
        None,
        "nonneg",
        "quick rounds after a failing one (or a confirmation request) while they keep failing; "
        "null = enough for conditions A, C and D to conclude (the largest of their counts - 1)",
    )
    confirm_delay: float = setting(2.0, "positive", "seconds between a failing round and its confirmation round")


@dataclass(frozen=True)
class ProbesConfig:
    procfs: ProcfsProbeConfig = field(default_factory=ProcfsProbeConfig)
    vllm_http: HttpProbeConfig = field(default_factory=HttpProbeConfig)
    canary: CanaryProbeConfig = field(default_factory=CanaryProbeConfig)


@dataclass(frozen=True)
class DiscoveryConfig:
    interval: float = setting(
        5.0, "positive", "seconds between re-discoveries (a vanished process is seen every tick)", bound=INTERVAL
    )
    process_name_prefix: str = setting("VLLM", doc="vLLM's VLLM_PROCESS_NAME_PREFIX")
    forget_after: float = setting(
        600.0, "positive", "seconds a vanished autodiscovered target is remembered", bound=SECONDS
    )
    pass_wait: float = setting(
        0.5,
        "nonneg",
        "seconds the loop waits for a pass it started; a slower one is applied on a later tick",
        bound=PASS_WAIT,
    )
    stuck_after: float = setting(
        30.0, "positive", "seconds after which a pass blocked in a read is abandoned", bound=STUCK_AFTER
    )


# ---------------------------------------------------------------- policy, alerts, evidence, ...
@dataclass(frozen=True)
class BudgetConfig:
    max_restarts: int = setting(3, "positive")
    period: float = setting(3600.0, "positive", bound=SECONDS)


@dataclass(frozen=True)
class BackoffConfig:
    initial: float = setting(30.0, "positive", bound=SECONDS)
    max: float = setting(900.0, "positive", bound=SECONDS)


@dataclass(frozen=True)
class FleetConfig:
    max_concurrent_restarts: int = setting(1, "positive")
    lease_ttl: float = setting(900.0, "positive", bound=SECONDS)
    when_redis_down: str = setting("deny", doc="allow | deny a restart when the lease cannot be checked")
    lease_replicas: int = setting(
        1, "nonneg", "on a Sentinel or Cluster store: replicas that must acknowledge a lease (WAIT) before it counts"
    )
    lease_replica_timeout: float = setting(
        1.0, "positive", "how long a lease grant waits for its replicas", bound=SECONDS
    )


@dataclass(frozen=True)
class NodeAnomalyConfig:
    fraction: float = setting(0.5, "ratio", "share of a node's targets tripping at once")
    min_targets: int = setting(2, "positive")


@dataclass(frozen=True)
class PolicyConfig:
    dry_run: bool = False
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    backoff: BackoffConfig = field(default_factory=BackoffConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)
    node_anomaly: NodeAnomalyConfig = field(default_factory=NodeAnomalyConfig)
    profiles: tuple[ProfileConfig, ...] = setting((), doc="ordered rules, first match wins (docs/policy.md)")
    breaker: BreakerConfig = field(default_factory=lambda: BreakerConfig(enabled=False))
    recurrence: RecurrenceConfig = field(default_factory=RecurrenceConfig)
    device_fault_rules: tuple[DeviceFaultRule, ...] = setting((), doc="per-code rules over the device catalog")
    device_check: DeviceCheckConfig = field(default_factory=DeviceCheckConfig)


@dataclass(frozen=True)
class SpoolConfig:
    max_events: int = setting(10000, "positive")
    max_bytes: int = setting(64 * 1024 * 1024, "positive")


@dataclass(frozen=True)
class AlertsConfig:
    redis_url: str = setting(
        "embedded",
        doc="embedded | redis://... | rediss://... | unix://... "
        "| redis+sentinel://h:26379[,h:p]/mymaster | redis+cluster://h:p[,h:p]",
    )
    password_env: str | None = None
    password_file: str | None = None
    stream: str = "guardian:alerts"
    stream_maxlen: int = setting(100000, "positive")
    channel: str = "guardian:alerts"
    control_channel: str = "guardian:control"
    renotify_interval: float = setting(3600.0, "positive", bound=INTERVAL)
    heartbeat_ttl: float = setting(30.0, "positive", bound=SECONDS)
    timeout: float = setting(2.0, "positive", bound=SECONDS)
    wait_replicas: int = setting(
        1, "nonneg", "on a Sentinel or Cluster store: replicas that must hold an alert before the spool forgets it"
    )
    spool: SpoolConfig = field(default_factory=SpoolConfig)
    alertmanager: AlertmanagerConfig = field(default_factory=AlertmanagerConfig)


@dataclass(frozen=True)
class RetentionConfig:
    max_bundles: int = setting(50, "positive")
    max_bytes: int = setting(512 * 1024 * 1024, "positive")


@dataclass(frozen=True)
class EvidenceConfig:
    pyspy: str = setting("py-spy", doc="path or name on PATH")
    record_seconds: float = setting(3.0, "nonneg", bound=SECONDS)
    locals: bool = setting(False, doc="py-spy --locals: off, locals can hold user prompts")
    native: bool = False
    dump_timeout: float = setting(10.0, "positive", bound=SECONDS)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    output_corruption_stacks: bool = setting(
        False,
        doc="py-spy stacks and a flame record for output_corruption too (off: its bundle holds the "
        "failing answers in gates.json; a server answering wrong is not stuck, a dump only pauses it)",
    )


@dataclass(frozen=True)
class AcceleratorsConfig:
    nvml: str = setting("auto", "onoff")
    npu_smi: str = setting("auto", "onoff")
    npu_smi_path: str = "npu-smi"
    npu_smi_timeout: float = setting(5.0, "positive", bound=SECONDS)
    kmsg: str = setting(
        "auto", "onoff", "NVRM: Xid lines of the kernel log (<kmsg_root>/dev/kmsg); auto: when readable"
    )
    kmsg_root: str = setting(
        "/", doc="the root /dev/kmsg and /proc/uptime are read under (a host mount in a container)"
    )
    kmsg_backlog: float = setting(600.0, "nonneg", "at start, kernel-log Xids this many seconds old still count")
    health_interval: float = setting(
        5.0, "positive", "seconds between device health reads (ECC, remapping, throttle, links)", bound=INTERVAL
    )


@dataclass(frozen=True)
class DiagnosisConfig:
    catalogs: tuple[str, ...] = setting(
        (), doc="extra signature catalogs (YAML files or folders), after the shipped ones"
    )
    log_max_bytes: int = setting(256 * 1024, "positive", "bytes of the log tail read for crash forensics")


@dataclass(frozen=True)
class LifecycleConfig:
    """A server's life: warm-up, pause and sleep on purpose (see docs/design.md, "Lifecycle")."""

    startup_limit: float = setting(
        1200.0, "positive", "seconds from first seen to ready (/health 200 and /v1/models) before startup_timeout"
    )
    server_state: str = setting(
        "auto",
        "onoff",
        "ask the server's own state where it exposes it: /is_paused, /is_sleeping, /version, vLLM's "
        "checkpoint and fault-tolerance status",
    )
    max_pause: float = setting(
        600.0, "positive", "a pause or sleep on purpose longer than this: an alert, never a restart"
    )
    resume_grace: float = setting(
        30.0, "nonneg", "seconds after a resume, a wake-up or an undrain the hang detectors stay down"
    )
    max_pause_spin: float = setting(
        30.0,
        "positive",
        "a pause or sleep this long with a thread burning a core all through: judged for a hang as usual",
    )
    max_pause_pending: float = setting(
        300.0,
        "positive",
        "a pause or sleep this long with requests pending all through: judged for a hang as usual",
    )
    recovery_grace: float = setting(
        30.0,
        "nonneg",
        "seconds past vLLM's own engine_recovery_timeout_sec (120 s) the guardian waits on a "
        "fault-tolerance round before judging the engine",
        bound=SECONDS,
    )


@dataclass(frozen=True)
class LogConfig:
    """The daemon's log lines (``--log-format``/``--log-level`` and GUARDIAN_LOG_* win over these)."""

    format: str = setting("text", "log_format", "text | json | logfmt")
    level: str = setting("info", "log_level", "debug | info | warning | error | critical")


@dataclass(frozen=True)
class ApiConfig:
    socket: str | None = setting(None, doc="unix socket; default <state_dir>/guardian.sock")
    http: str | None = setting("127.0.0.1:9464", "hostport", "/metrics + readiness; null = off")
    web_config_file: str | None = setting(
        None,
        doc="TLS and basic auth for api.http: a web config file in the node_exporter (exporter-toolkit) "
        "format (docs/operate.md); re-read on SIGHUP and when it or a file it names changes; null = plain HTTP",
    )


@dataclass(frozen=True)
class KubernetesConfig:
    """What the guardian tells the Kubernetes API about the pods it supervises (pods matched by
    ``match.kubernetes`` or restarted with ``restart.mode: kubernetes``; docs/operate.md)."""

    kubeconfig: str | None = setting(None, doc="outside a pod (systemd on a node): a kubeconfig; default $KUBECONFIG")
    context: str | None = setting(None, doc="the kubeconfig's context; default its current-context")
    plain_http_loopback: bool = setting(
        False, doc="a test API server: send the token to an http:// server on a loopback address (else https only)"
    )
    readiness_gate: bool = setting(
        True, doc="patch the pod condition vllm-guardian.io/serving (the pod's readiness gate)"
    )
    events: bool = setting(True, doc="Kubernetes Events on the pod, node-wide findings on the Node")
    node_condition: bool = setting(False, doc="a NodeCondition VllmGuardianProblem (needs nodes/status patch)")
    taint_on_device_fault: bool = setting(
        False, doc="taint this Node <taint_key>=vllm-guardian:NoSchedule while a device fault blocks restarts"
    )
    taint_key: str = setting("vllm-guardian.io/accel-fault", "taint_key", "the taint's key (needs nodes get + patch)")
    pod_removal: str = setting("evict", "pod_removal", "restart.mode kubernetes: evict (respects PDBs) | delete")
    event_burst: int = setting(25, "positive", "Events per object before rate limiting (the kubelet's burst)")
    event_refill: float = setting(300.0, "positive", "seconds per Event regained after the burst (the kubelet's)")
    timeout: float = setting(10.0, "positive", "seconds per API call", bound=SECONDS)


@dataclass(frozen=True)
class Config:
    node: str | None = setting(None, doc="default: the host name")
    node_labels: dict[str, str] = setting(
        {}, doc="this node's labels, matched by policy.profiles[].match.node_labels (docs/policy.md)"
    )
    state_dir: str = "/var/lib/guardian"
    interval: float = setting(1.0, "positive", "seconds per tick", bound=TICK)
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
    groups: GroupsConfig = field(default_factory=GroupsConfig)

    def socket_path(self) -> str:
        return self.api.socket or f"{self.state_dir.rstrip('/')}/guardian.sock"
