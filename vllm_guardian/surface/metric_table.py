"""Every metric family the guardian exports, declared once: name, type, label names, help.

The exporter (``surface/exporter.py``) fills them from the status snapshot; docs/operate.md's
metrics table and the alert rules are checked against ``DECLARED`` (tests/unit/test_docs_true.py,
test_deploy_files.py).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, NamedTuple


class MetricSpec(NamedTuple):
    name: str  # the sample name as exposed (counters end in ``_total``)
    type: str  # "gauge" | "counter" | "histogram"
    help: str


# name, type, label names, help
TABLE: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    # the guardian itself
    ("guardian_build_info", "gauge", ("version", "node"), "Always 1; labels carry the guardian version and node name."),
    ("guardian_ticks_total", "counter", (), "Ticks of the main loop since the guardian started."),
    ("guardian_tick_duration_seconds", "histogram", (), "Duration of the ticks of the main loop since start."),
    ("guardian_tick_duration_max_seconds", "gauge", (), "Longest tick of the main loop since start."),
    ("guardian_self_cpu_seconds_total", "counter", (), "CPU time (user + system) the guardian process used."),
    ("guardian_self_max_resident_memory_bytes", "gauge", (), "Peak resident memory of the guardian process."),
    (
        "guardian_capability_missing",
        "gauge",
        ("capability",),
        "1 for each capability the guardian lacks here (read_other_users_sockets, ptrace, signal_other_users, "
        "kmsg, nvml); absent when it has it.",
    ),
    # probes
    ("guardian_probe_runs_total", "counter", ("probe",), "Runs of a probe (successful or not)."),
    (
        "guardian_probe_failures_total",
        "counter",
        ("probe",),
        "Failures a probe reported (a vllm_http run can count one for /health and one for /metrics).",
    ),
    ("guardian_probe_overruns_total", "counter", ("probe",), "Runs of a probe that exceeded their deadline."),
    ("guardian_probe_duration_seconds", "gauge", ("probe",), "Duration of the last run of a probe."),
    ("guardian_probe_duration_mean_seconds", "gauge", ("probe",), "Mean duration of a probe's runs since start."),
    # targets
    (
        "guardian_target_info",
        "gauge",
        ("target", "model", "source", "namespace", "pod"),
        "Always 1 per supervised vLLM server; namespace and pod: its Kubernetes pod (empty outside one). "
        "Join it onto any per-target series: `* on(target) group_left(namespace, pod) guardian_target_info`.",
    ),
    ("guardian_target_up", "gauge", ("target",), "1 when the target should take traffic (serving), else 0."),
    ("guardian_target_ready", "gauge", ("target",), "1 once the target is ready (warm-up over), else 0."),
    (
        "guardian_target_phase",
        "gauge",
        ("target", "phase"),
        "1 for the target's phase (serving, warming, paused, sleeping, checkpointing, recovering, retired, "
        "incident, draining, ...).",
    ),
    (
        "guardian_target_vllm_info",
        "gauge",
        ("target", "version", "row", "guessed"),
        "Always 1 per target: the vLLM version its /version said (empty: not read), the capability row the "
        "guardian uses for it, and guessed 1 when that row is a guess (a newer or unread version).",
    ),
    (
        "guardian_target_vllm_recovering_seconds",
        "gauge",
        ("target", "engine"),
        "Seconds an engine has been in vLLM's own fault-tolerance round; the guardian stands down for it "
        "until engine_recovery_timeout_sec (120 s) + lifecycle.recovery_grace.",
    ),
    ("guardian_target_health_ok", "gauge", ("target",), "1 when the target's /health last answered 200, else 0."),
    (
        "guardian_target_port_other_listeners",
        "gauge",
        ("target",),
        "Sockets listening on the target's port that do not serve its URL (another address or family).",
    ),
    (
        "guardian_target_metrics_dropped_total",
        "counter",
        ("target", "reason"),
        "What the guardian dropped of a target's input, by reason: engines (engine labels that are no "
        "data-parallel rank below probes.vllm_http.max_engines), page_too_large, too_many_samples (pages "
        "refused), series (samples past the series store's cap per target).",
    ),
    (
        "guardian_target_health_score",
        "gauge",
        ("target",),
        "Output-correctness health 0..100 from the gates (100: nothing wrong seen); absent before a gate round.",
    ),
    (
        "guardian_gate_reports_total",
        "counter",
        ("outcome",),
        "External gate reports by outcome (accepted, other_node, or a drop reason).",
    ),
    (
        "guardian_gate_reports_dropped_total",
        "counter",
        ("reason",),
        "External gate reports dropped, by reason (malformed, unsigned, bad_signature, no_node, "
        "unknown_target, future, stale, replay, before_start, rate_limited).",
    ),
    (
        "guardian_control_messages_total",
        "counter",
        ("outcome",),
        "Messages on the control channel (alerts.control_channel) by outcome, checked with trust keys: "
        "accepted, own, or a drop reason (malformed, unsigned, bad_signature, future, stale, replay, "
        "not_ours, before_start). None is ever acted on.",
    ),
    ("guardian_trust_keys", "gauge", (), "Trust keys in force (gates.trust; re-read on a reload)."),
    (
        "guardian_gate_fingerprints_dropped_total",
        "counter",
        ("reason",),
        "Other nodes' L4 fingerprint entries that did not vote, by reason "
        "(unsigned, bad_signature, malformed, misfiled, stale, future); this node's own junk fields included.",
    ),
    (
        "guardian_gate_fingerprints_deleted_total",
        "counter",
        ("reason",),
        "L4 fingerprint hash fields the guardian deleted because they can never vote, by reason "
        "(unreadable or foreign: malformed, unsigned, bad_signature, misfiled; future; long stale).",
    ),
    ("guardian_process_cpu_ratio", "gauge", ("target", "role", "index"), "CPU use of a process (1.0 = one core)."),
    ("guardian_process_resident_memory_bytes", "gauge", ("target", "role", "index"), "Resident memory of a process."),
    ("guardian_process_threads", "gauge", ("target", "role", "index"), "Threads of a process."),
    (
        "guardian_hottest_thread_cpu_ratio",
        "gauge",
        ("target", "role", "index"),
        "CPU use of the busiest thread of a process (1.0 = one core).",
    ),
    (
        "guardian_hottest_thread_voluntary_switches_per_second",
        "gauge",
        ("target", "role", "index"),
        "Voluntary context switches per second of the busiest thread of a process.",
    ),
    (
        "guardian_hottest_thread_involuntary_switches_per_second",
        "gauge",
        ("target", "role", "index"),
        "Involuntary context switches per second of the busiest thread of a process.",
    ),
    ("guardian_engine_steps_per_second", "gauge", ("target",), "Engine progress: vLLM engine steps per second."),
    ("guardian_engine_requests_running", "gauge", ("target",), "Requests the engine is running (vLLM gauge)."),
    ("guardian_engine_requests_waiting", "gauge", ("target",), "Requests waiting for the engine (vLLM gauge)."),
    ("guardian_engine_kv_cache_usage_ratio", "gauge", ("target",), "KV cache usage, 0..1 (vLLM gauge)."),
    ("guardian_canary_latency_seconds", "gauge", ("target",), "Latency of the last canary completion."),
    ("guardian_canary_ok", "gauge", ("target",), "1 when the last canary completion succeeded, else 0."),
    # accelerators
    (
        "guardian_accelerator_memory_used_bytes",
        "gauge",
        ("target", "device", "backend"),
        "Memory used on an accelerator device the target runs on (all processes).",
    ),
    (
        "guardian_accelerator_memory_total_bytes",
        "gauge",
        ("target", "device", "backend"),
        "Memory of an accelerator device the target runs on.",
    ),
    (
        "guardian_accelerator_utilization_ratio",
        "gauge",
        ("target", "device", "backend"),
        "Utilisation of an accelerator device the target runs on, 0..1.",
    ),
    (
        "guardian_target_accelerator_memory_bytes",
        "gauge",
        ("target", "device", "backend"),
        "Accelerator memory held by the target's own processes on a device.",
    ),
    (
        "guardian_accelerator_health",
        "gauge",
        ("device", "backend"),
        "Health of an accelerator device from the faults it reported: 0 ok, 1 warning, 2 critical (accel_fault).",
    ),
    (
        "guardian_accelerator_input_refused_total",
        "counter",
        ("backend", "reason"),
        "Accelerator backend input refused and never acted on, by backend and reason (kmsg: not_kernel, "
        "not_driver_line, unknown_device; npu_smi: broken_row).",
    ),
    # incidents, actions, alerts
    ("guardian_incidents_open", "gauge", ("kind",), "Open incidents on this node, by kind."),
    ("guardian_orphans", "gauge", ("provable",), "VLLM:: processes on this node with no live API server above them."),
    ("guardian_orphans_stopped_total", "counter", (), "Provable orphans stopped (groups.stop_orphans)."),
    ("guardian_group_ranks", "gauge", ("group", "health"), "Ranks of each group this node hosts, by health."),
    ("guardian_target_incidents_open", "gauge", ("target", "kind"), "Open incidents of a target, by kind."),
    ("guardian_incidents_opened_total", "counter", ("kind",), "Incidents opened since the guardian started."),
    ("guardian_incidents_resolved_total", "counter", ("kind",), "Incidents resolved since the guardian started."),
    ("guardian_actions_total", "counter", ("outcome",), "Remediation actions taken, by outcome."),
    ("guardian_restarts_total", "counter", ("target", "outcome"), "Restarts of a target, by outcome."),
    ("guardian_alerts_spooled", "gauge", (), "Alert events waiting in the local spool (Redis unreachable)."),
    ("guardian_alerts_dropped_total", "counter", (), "Alert events the full spool had to drop."),
    ("guardian_alertmanager_spooled", "gauge", ("alertmanager",), "Alerts waiting in an Alertmanager's spool."),
    ("guardian_alertmanager_sent_total", "counter", ("alertmanager",), "Alerts an Alertmanager accepted (2xx)."),
    (
        "guardian_alertmanager_rejected_total",
        "counter",
        ("alertmanager",),
        "Alerts never delivered to an Alertmanager: refused with a 4xx, or dropped by its full spool.",
    ),
    (
        "guardian_alertmanager_failures_total",
        "counter",
        ("alertmanager",),
        "Posts to an Alertmanager that failed and will be retried (unreachable, 5xx, timeout).",
    ),
    ("guardian_alertmanager_up", "gauge", ("alertmanager",), "1 when the last post to an Alertmanager went through."),
    (
        "guardian_server_files_refused_total",
        "counter",
        ("setting",),
        "Files the guardian refused to open on a server's behalf (a symbolic link the server's user could "
        "change, a hard link, not a regular file), by the setting that names them.",
    ),
    (
        "guardian_listener_connections_dropped_total",
        "counter",
        ("listener", "reason"),
        "Connections a listener (socket: the control socket, http: the HTTP listener) dropped, by reason: "
        "refused (all being answered), evicted (cut while still sending, for a newcomer), timed_out (its "
        "request not read whole within the deadline).",
    ),
    (
        "guardian_kubernetes_failures_total",
        "counter",
        ("call",),
        "Kubernetes API calls of the publisher that failed (GateWant, EventWant, NodeWant, TaintWant).",
    ),
    # the HTTP listener
    (
        "guardian_http_connections_refused_total",
        "counter",
        ("reason",),
        "HTTP listener connections closed unanswered, by reason (full, evicted, tls_handshake).",
    ),
    (
        "guardian_http_auth_failures_total",
        "counter",
        ("reason",),
        "HTTP requests refused by basic auth, by reason (no_credentials, bad_credentials, busy).",
    ),
    ("guardian_http_web_config_reloads_total", "counter", ("outcome",), "Web config reloads by outcome (ok, failed)."),
    (
        "guardian_http_web_config_last_reload_successful",
        "gauge",
        (),
        "1 when the last web config reload was applied (or none was tried), 0 when it was refused.",
    ),
)

DECLARED: tuple[MetricSpec, ...] = tuple(MetricSpec(n, t, h) for n, t, _, h in TABLE)
LABELS: Mapping[str, tuple[str, ...]] = MappingProxyType({n: labels for n, _, labels, _ in TABLE})

#: Outcomes present (at 0) from the start; an outcome the status reports beyond these is added.
ACTION_OUTCOMES: tuple[str, ...] = ("ok", "failed", "skipped", "dry_run")
RESTART_OUTCOMES: tuple[str, ...] = ("ok", "failed", "dry_run")


__all__ = ["ACTION_OUTCOMES", "DECLARED", "LABELS", "RESTART_OUTCOMES", "TABLE", "MetricSpec"]
