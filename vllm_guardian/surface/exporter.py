"""Prometheus exporter: a custom collector over the daemon's latest status document.

Reads memory only (a scrape never touches /proc or the network; docs/design.md, Operating surface):
``status()`` returns the immutable dict the loop publishes after each tick
(``vllm_guardian.surface.status_view.build_status``) and ``stats()`` the daemon's ``SelfStats``
(for the incident open/resolve totals, which the status document does not carry).
Every family is declared in ``DECLARED`` (name, type, help) with its label names in
``LABELS``; the collector can only emit declared families, and always emits all of
them (a family with no samples still shows its HELP/TYPE), so a dashboard or a rule
never meets an undeclared name. A value the status does not have is *absent* (no
sample), never 0 — except the totals the spec wants present from the start: every
incident ``Kind`` and the standard action/restart outcomes start at 0.

Status fields read (all optional; a missing section means no samples):

- ``node``, ``version``;
  ``guardian.{ticks, last_tick_s, max_tick_s, tick_p50_s, tick_p99_s, cpu_seconds, max_rss_bytes}``;
  ``capabilities.missing[].capability`` (what the guardian lacks: ``host.capabilities``);
- ``probes.<name>.{runs, failures, overruns, last_duration_s, mean_duration_s}``;
- ``targets[]``: ``name``, ``model``, ``source``, ``phase``, ``ready``, ``serving`` (bool;
  when absent: ``phase == "serving"``), ``health.status``,
  ``engine.{steps_per_s, requests_running, requests_waiting, kv_cache_usage}``,
  ``canary.{ok, latency_s}``, ``processes[].{pid, role, cpu_ratio, rss_bytes, threads,
  hottest_thread.{cpu_ratio, voluntary_per_s, involuntary_per_s}}``,
  ``accelerators[]`` (or a mapping device → entry) with ``device``, ``backend``,
  ``memory_used_bytes``, ``memory_total_bytes``, ``utilization_ratio``, ``target_memory_bytes``;
- ``accelerators[].{device, backend, fault_health}`` and ``device_faults.<device>.health``
  (the health gauge per device);
- ``incidents[].{kind, target.name}`` (the open incidents; an ``accel_fault``'s target is a
  device, counted by kind only);
- ``actions.outcomes.<outcome>`` (every action taken, by outcome) and
  ``actions.restarts.<target>.<outcome>``;
- ``alerts.{spooled, dropped_total}`` (the alert sink's ``stats()``);
- ``kubernetes.failures.<call>`` (the Kubernetes publisher's failed API calls).
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from vllm_guardian.model import Kind


class MetricSpec(NamedTuple):
    name: str  # the sample name as exposed (counters end in ``_total``)
    type: str  # "gauge" | "counter" | "histogram"
    help: str


# name, type, label names, help
_TABLE: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
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
    ("guardian_target_info", "gauge", ("target", "model", "source"), "Always 1 per supervised vLLM server."),
    ("guardian_target_up", "gauge", ("target",), "1 when the target should take traffic (serving), else 0."),
    ("guardian_target_ready", "gauge", ("target",), "1 once the target is ready (warm-up over), else 0."),
    (
        "guardian_target_phase",
        "gauge",
        ("target", "phase"),
        "1 for the target's phase (serving, warming, paused, sleeping, incident, draining, ...).",
    ),
    ("guardian_target_health_ok", "gauge", ("target",), "1 when the target's /health last answered 200, else 0."),
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
        "unknown_target, future, stale, replay, rate_limited).",
    ),
    (
        "guardian_gate_fingerprints_dropped_total",
        "counter",
        ("reason",),
        "Other nodes' L4 fingerprint entries that did not vote, by reason "
        "(unsigned, bad_signature, malformed, misfiled, stale, future).",
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
    # incidents, actions, alerts
    ("guardian_incidents_open", "gauge", ("kind",), "Open incidents on this node, by kind."),
    ("guardian_target_incidents_open", "gauge", ("target", "kind"), "Open incidents of a target, by kind."),
    ("guardian_incidents_opened_total", "counter", ("kind",), "Incidents opened since the guardian started."),
    ("guardian_incidents_resolved_total", "counter", ("kind",), "Incidents resolved since the guardian started."),
    ("guardian_actions_total", "counter", ("outcome",), "Remediation actions taken, by outcome."),
    ("guardian_restarts_total", "counter", ("target", "outcome"), "Restarts of a target, by outcome."),
    ("guardian_alerts_spooled", "gauge", (), "Alert events waiting in the local spool (Redis unreachable)."),
    ("guardian_alerts_dropped_total", "counter", (), "Alert events the full spool had to drop."),
    (
        "guardian_kubernetes_failures_total",
        "counter",
        ("call",),
        "Kubernetes API calls of the publisher that failed (GateWant, EventWant, NodeWant, TaintWant).",
    ),
)

DECLARED: tuple[MetricSpec, ...] = tuple(MetricSpec(n, t, h) for n, t, _, h in _TABLE)
LABELS: Mapping[str, tuple[str, ...]] = MappingProxyType({n: labels for n, _, labels, _ in _TABLE})

#: Outcomes present (at 0) from the start; an outcome the status reports beyond these is added.
ACTION_OUTCOMES: tuple[str, ...] = ("ok", "failed", "skipped", "dry_run")
RESTART_OUTCOMES: tuple[str, ...] = ("ok", "failed", "dry_run")


def serving(target: Mapping[str, Any]) -> bool:
    """Should this status target take traffic? Its ``serving`` field, else ``phase == "serving"``."""
    value = target.get("serving")
    if value is None:
        return target.get("phase") == "serving"
    return bool(value)


def _num(value: Any) -> float | None:
    """A finite number from the status, or None (absent). Booleans become 1/0."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


class _Families:
    """One family per declared name; ``add`` refuses undeclared names and absent values."""

    def __init__(self) -> None:
        self._fams: dict[str, CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily] = {}
        kinds = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily, "histogram": HistogramMetricFamily}
        for name, typ, labels, help_ in _TABLE:
            self._fams[name] = kinds[typ](name, help_, labels=list(labels))

    def histogram(self, name: str, hist: Any) -> None:
        """A histogram without labels from ``(cumulative (le, count) pairs, sum)``; None: no samples."""
        if hist is not None:
            buckets, total = hist
            fam = self._fams[name]
            assert isinstance(fam, HistogramMetricFamily)
            fam.add_metric([], buckets=[(le, float(n)) for le, n in buckets], sum_value=total)

    def add(self, name: str, labels: Iterable[Any], value: Any) -> None:
        v = _num(value)
        if v is None:
            return
        fam = self._fams[name]
        assert not isinstance(fam, HistogramMetricFamily), name  # histograms: ``histogram()``
        fam.add_metric([str(x) for x in labels], v)

    def all(self) -> list[Metric]:
        return list(self._fams.values())


class GuardianCollector:
    """A ``prometheus_client`` collector over ``status()`` (and optionally ``stats()``)."""

    def __init__(self, status: Callable[[], Mapping[str, Any] | None], stats: Callable[[], Any] | None = None) -> None:
        self._status = status
        self._stats = stats

    def describe(self) -> list[Metric]:
        return _Families().all()

    def collect(self) -> list[Metric]:
        doc = _map(self._status())
        stats = self._stats() if self._stats is not None else None
        f = _Families()
        self._self_metrics(f, doc)
        ticks = getattr(stats, "tick_times", None)  # every tick since start, not only the last ones
        f.histogram("guardian_tick_duration_seconds", ticks.histogram() if ticks is not None else None)
        self._probe_metrics(f, doc)
        names = [t for t in (_map(x) for x in _list(doc.get("targets"))) if isinstance(t.get("name"), str)]
        for t in names:
            self._target_metrics(f, t)
        self._device_metrics(f, doc)
        self._incident_metrics(f, doc, [t["name"] for t in names], stats)
        self._action_metrics(f, doc, [t["name"] for t in names])
        alerts = _map(doc.get("alerts"))
        f.add("guardian_alerts_spooled", (), alerts.get("spooled"))
        f.add("guardian_alerts_dropped_total", (), alerts.get("dropped_total"))
        for call, n in _map(_map(doc.get("kubernetes")).get("failures")).items():
            f.add("guardian_kubernetes_failures_total", (call,), n)
        gates = _map(doc.get("gates"))
        for outcome, n in _map(gates.get("reports")).items():
            f.add("guardian_gate_reports_total", (outcome,), n)
        for reason, n in _map(gates.get("reports_dropped")).items():
            f.add("guardian_gate_reports_dropped_total", (reason,), n)
        for reason, n in _map(gates.get("fingerprints_dropped")).items():
            f.add("guardian_gate_fingerprints_dropped_total", (reason,), n)
        return f.all()

    # ---------------------------------------------------------------- sections
    @staticmethod
    def _self_metrics(f: _Families, doc: Mapping[str, Any]) -> None:
        if doc.get("version") is not None or doc.get("node") is not None:
            f.add("guardian_build_info", (doc.get("version") or "", doc.get("node") or ""), 1)
        g = _map(doc.get("guardian"))
        f.add("guardian_ticks_total", (), g.get("ticks"))
        f.add("guardian_tick_duration_max_seconds", (), g.get("max_tick_s"))
        f.add("guardian_self_cpu_seconds_total", (), g.get("cpu_seconds"))
        f.add("guardian_self_max_resident_memory_bytes", (), g.get("max_rss_bytes"))
        for c in _list(_map(doc.get("capabilities")).get("missing")):
            if isinstance(c, Mapping) and c.get("capability"):
                f.add("guardian_capability_missing", (str(c["capability"]),), 1)

    @staticmethod
    def _probe_metrics(f: _Families, doc: Mapping[str, Any]) -> None:
        for probe, s in sorted(_map(doc.get("probes")).items()):
            s = _map(s)
            f.add("guardian_probe_runs_total", (probe,), s.get("runs"))
            f.add("guardian_probe_failures_total", (probe,), s.get("failures"))
            f.add("guardian_probe_overruns_total", (probe,), s.get("overruns"))
            f.add("guardian_probe_duration_seconds", (probe,), s.get("last_duration_s"))
            f.add("guardian_probe_duration_mean_seconds", (probe,), s.get("mean_duration_s"))

    @staticmethod
    def _target_metrics(f: _Families, t: Mapping[str, Any]) -> None:
        name = t["name"]
        tl = (name,)
        f.add("guardian_target_info", (name, t.get("model") or "", t.get("source") or ""), 1)
        f.add("guardian_target_up", tl, serving(t))
        f.add("guardian_target_ready", tl, bool(t.get("ready")))
        if t.get("phase"):
            f.add("guardian_target_phase", (name, str(t["phase"])), 1)
        health = t.get("health")
        if isinstance(health, Mapping):
            f.add("guardian_target_health_ok", tl, health.get("status") == 200)
        f.add("guardian_target_health_score", tl, _map(t.get("gates")).get("health_score"))
        eng = _map(t.get("engine"))
        f.add("guardian_engine_steps_per_second", tl, eng.get("steps_per_s"))
        f.add("guardian_engine_requests_running", tl, eng.get("requests_running"))
        f.add("guardian_engine_requests_waiting", tl, eng.get("requests_waiting"))
        f.add("guardian_engine_kv_cache_usage_ratio", tl, eng.get("kv_cache_usage"))
        canary = t.get("canary")
        if isinstance(canary, Mapping):
            f.add("guardian_canary_latency_seconds", tl, canary.get("latency_s"))
            f.add("guardian_canary_ok", tl, canary.get("ok"))
        for pl, p in _process_labels(name, t.get("processes")):
            f.add("guardian_process_cpu_ratio", pl, p.get("cpu_ratio"))
            f.add("guardian_process_resident_memory_bytes", pl, p.get("rss_bytes"))
            f.add("guardian_process_threads", pl, p.get("threads"))
            hot = _map(p.get("hottest_thread"))
            f.add("guardian_hottest_thread_cpu_ratio", pl, hot.get("cpu_ratio"))
            f.add("guardian_hottest_thread_voluntary_switches_per_second", pl, hot.get("voluntary_per_s"))
            f.add("guardian_hottest_thread_involuntary_switches_per_second", pl, hot.get("involuntary_per_s"))
        for dev in _accelerators(t.get("accelerators")):
            al = (name, dev.get("device"), dev.get("backend") or "")
            f.add("guardian_accelerator_memory_used_bytes", al, dev.get("memory_used_bytes"))
            f.add("guardian_accelerator_memory_total_bytes", al, dev.get("memory_total_bytes"))
            f.add("guardian_accelerator_utilization_ratio", al, dev.get("utilization_ratio"))
            f.add("guardian_target_accelerator_memory_bytes", al, dev.get("target_memory_bytes"))

    @staticmethod
    def _device_metrics(f: _Families, doc: Mapping[str, Any]) -> None:
        """A health gauge for every device of the node table, and for any device with a fault."""
        seen = set()
        for row in (_map(x) for x in _list(doc.get("accelerators"))):
            dev = row.get("device")
            if dev is None:
                continue
            seen.add(dev)
            f.add("guardian_accelerator_health", (dev, row.get("backend") or ""), row.get("fault_health", 0))
        for dev, st in sorted(_map(doc.get("device_faults")).items()):
            if dev not in seen:
                f.add("guardian_accelerator_health", (dev, ""), _map(st).get("health", 0))

    @staticmethod
    def _incident_metrics(f: _Families, doc: Mapping[str, Any], targets: list[str], stats: Any) -> None:
        kinds = [k.value for k in Kind]
        open_by_kind = dict.fromkeys(kinds, 0)
        open_by_target: dict[tuple[str, str], int] = {(t, k): 0 for t in targets for k in kinds}
        for inc in (_map(x) for x in _list(doc.get("incidents"))):
            kind = inc.get("kind")
            if not isinstance(kind, str):
                continue
            open_by_kind[kind] = open_by_kind.get(kind, 0) + 1
            target = _map(inc.get("target")).get("name")
            if isinstance(target, str) and kind != Kind.ACCEL_FAULT.value:  # a device, not a server
                for k in kinds:  # a target known only from its incident still gets every kind
                    open_by_target.setdefault((target, k), 0)
                open_by_target[(target, kind)] = open_by_target.get((target, kind), 0) + 1
        for kind, n in open_by_kind.items():
            f.add("guardian_incidents_open", (kind,), n)
        for (target, kind), n in sorted(open_by_target.items()):
            f.add("guardian_target_incidents_open", (target, kind), n)
        for attr, metric in (
            ("incidents_opened", "guardian_incidents_opened_total"),
            ("incidents_resolved", "guardian_incidents_resolved_total"),
        ):
            counts = dict.fromkeys(kinds, 0)
            counts.update(dict(getattr(stats, attr, None) or {}))  # dict() copies atomically
            for kind, n in counts.items():
                f.add(metric, (kind,), n)

    @staticmethod
    def _action_metrics(f: _Families, doc: Mapping[str, Any], targets: list[str]) -> None:
        actions = _map(doc.get("actions"))
        outcomes = dict.fromkeys(ACTION_OUTCOMES, 0)
        outcomes.update({str(k): v for k, v in _map(actions.get("outcomes")).items()})
        for outcome, n in outcomes.items():
            f.add("guardian_actions_total", (outcome,), n)
        restarts: dict[tuple[str, str], Any] = {(t, o): 0 for t in targets for o in RESTART_OUTCOMES}
        for target, by_outcome in _map(actions.get("restarts")).items():
            for o in RESTART_OUTCOMES:
                restarts.setdefault((str(target), o), 0)
            for outcome, n in _map(by_outcome).items():
                restarts[(str(target), str(outcome))] = n
        for (target, outcome), n in sorted(restarts.items()):
            f.add("guardian_restarts_total", (target, outcome), n)


def _process_labels(target: str, processes: Any) -> list[tuple[tuple[str, str, str], Mapping[str, Any]]]:
    """(target, role, index) for each process: ``index`` counts the processes of one role in pid
    order. No pid label: a pid makes new series at every restart of the server (unbounded
    cardinality over time); which pid it is today is in ``guardian status``."""
    procs = [p for p in (_map(x) for x in _list(processes)) if isinstance(p.get("pid"), int)]
    seen: dict[str, int] = {}
    out = []
    for p in sorted(procs, key=lambda p: p["pid"]):
        role = str(p.get("role") or "other")
        out.append(((target, role, str(seen.get(role, 0))), p))
        seen[role] = seen.get(role, 0) + 1
    return out


def _accelerators(value: Any) -> list[Mapping[str, Any]]:
    """Accelerator entries as a list; a mapping device → entry is accepted too."""
    if isinstance(value, Mapping):
        return [{"device": dev, **_map(entry)} for dev, entry in sorted(value.items(), key=lambda kv: str(kv[0]))]
    return [d for d in (_map(x) for x in _list(value)) if d.get("device") is not None]


def build_registry(
    status: Callable[[], Mapping[str, Any] | None], stats: Callable[[], Any] | None = None
) -> CollectorRegistry:
    """A fresh registry (never the global default): the guardian's collector and prometheus-client's
    process collector (``process_cpu_seconds_total``, ``process_resident_memory_bytes``, ... of the
    guardian itself, as every Prometheus exporter has them)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(GuardianCollector(status, stats))
    ProcessCollector(registry=registry)  # process_*: the guardian's own CPU, memory, descriptors, start time
    return registry


__all__ = [
    "ACTION_OUTCOMES",
    "DECLARED",
    "LABELS",
    "RESTART_OUTCOMES",
    "GuardianCollector",
    "MetricSpec",
    "build_registry",
    "serving",
]
