"""Prometheus exporter: a custom collector over the daemon's latest status snapshot.

Reads memory only (a scrape never touches /proc or the network; docs/design.md, Operating surface):
``status()`` returns the immutable ``StatusSnapshot`` the loop publishes after each tick
(``vllm_guardian.surface.status_view.build_status``) and ``stats()`` the daemon's ``SelfStats``
(for the tick histogram and the incident open/resolve totals, which the snapshot does not carry).
Every family is declared in ``DECLARED`` (``surface/metric_table.py``: name, type, help) with its label names in
``LABELS``; the collector can only emit declared families, and always emits all of
them (a family with no samples still shows its HELP/TYPE), so a dashboard or a rule
never meets an undeclared name. A value the status does not have (``None``, a section not
wired) is *absent* (no sample), never 0 — except the totals the spec wants present from the
start: every incident ``Kind`` and the standard action/restart outcomes start at 0.

Snapshot fields read:

- ``node``, ``version``; ``guardian.{ticks, max_tick_s, cpu_seconds, max_rss_bytes}``;
  ``capabilities.missing[].capability`` (what the guardian lacks: ``host.capabilities``);
  ``server_files.refused[setting]`` (files refused on a server's behalf: ``host.server_files``);
- ``probes[name].{runs, failures, overruns, last_duration_s, mean_duration_s}``;
- ``targets[]``: ``name``, ``model``, ``source``, ``phase``, ``ready``, ``serving``, ``other_listeners``,
  ``health.status``, ``gates.health_score``, ``metrics_dropped[reason]``,
  ``engine.{steps_per_s, requests_running, requests_waiting, kv_cache_usage}``,
  ``canary.{ok, latency_s}``, ``vllm.{version, row, notice, recovering[engine]}``,
  ``processes[].{pid, role, cpu_ratio, rss_bytes, threads,
  hottest_thread.{cpu_ratio, voluntary_per_s, involuntary_per_s}}``,
  ``accelerators[].{device, backend, memory_used_bytes, memory_total_bytes, utilization_ratio,
  target_memory_bytes}``;
- ``accelerators[].{device, backend, fault_health}`` and ``device_faults[device].health``
  (the health gauge per device); ``accelerators_refused[backend][reason]`` (input refused);
- ``incidents[].{kind, target.name}`` (the open incidents; an ``accel_fault``'s target is a
  device, counted by kind only);
- ``actions.outcomes[outcome]`` and ``actions.restarts[target][outcome]``;
- ``alerts.{spooled, dropped_total}`` (the alert sink's section);
- ``alertmanager.instances[]`` (the direct push, per Alertmanager);
- ``listeners[listener].{refused, evicted, timed_out}`` (the control socket's and HTTP listener's);
- ``kubernetes.failures[call]`` (the Kubernetes publisher's failed API calls);
- ``gates.{reports, reports_dropped, fingerprints_dropped, fingerprints_deleted}`` (external gate
  reports, other nodes' L4 fingerprint entries);
- ``http.{connections_refused, auth_failures}`` and ``http.web_config.{reloads, reload_failures,
  last_reload_ok}`` (the HTTP listener and its web config).
- ``trust.{kids, control_messages}`` (the trust keys in force, the control channel's messages).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from vllm_guardian.model import Kind
from vllm_guardian.surface.connection_slots import DROP_REASONS
from vllm_guardian.surface.metric_table import ACTION_OUTCOMES, DECLARED, LABELS, RESTART_OUTCOMES, TABLE, MetricSpec

if TYPE_CHECKING:
    from vllm_guardian.state.selfstats import SelfStats
    from vllm_guardian.probes.procfs_status import ProcessStatus
    from vllm_guardian.surface.http_stats import HttpStatus
    from vllm_guardian.surface.status_snapshot import StatusSnapshot, TargetStatus


def _num(value: float | int | bool | None) -> float | None:
    """A finite number from the status, or None (absent). Booleans become 1/0."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


class _Families:
    """One family per declared name; ``add`` refuses undeclared names and absent values."""

    def __init__(self) -> None:
        self._fams: dict[str, CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily] = {}
        kinds = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily, "histogram": HistogramMetricFamily}
        for name, typ, labels, help_ in TABLE:
            self._fams[name] = kinds[typ](name, help_, labels=list(labels))

    def histogram(self, name: str, hist: tuple[list[tuple[str, int]], float] | None) -> None:
        """A histogram without labels from ``(cumulative (le, count) pairs, sum)``; None: no samples."""
        if hist is not None:
            buckets, total = hist
            fam = self._fams[name]
            assert isinstance(fam, HistogramMetricFamily)
            fam.add_metric([], buckets=[(le, float(n)) for le, n in buckets], sum_value=total)

    def add(self, name: str, labels: Iterable[str], value: float | int | bool | None) -> None:
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

    def __init__(
        self, status: Callable[[], StatusSnapshot | None], stats: Callable[[], SelfStats] | None = None
    ) -> None:
        self._status = status
        self._stats = stats

    def describe(self) -> list[Metric]:
        return _Families().all()

    def collect(self) -> list[Metric]:
        snap = self._status()
        stats = self._stats() if self._stats is not None else None
        f = _Families()
        f.histogram("guardian_tick_duration_seconds", stats.tick_times.histogram() if stats is not None else None)
        if snap is not None:
            _snapshot_metrics(f, snap)
        _incident_totals(f, stats)
        return f.all()


def _snapshot_metrics(f: _Families, s: StatusSnapshot) -> None:
    _self_metrics(f, s)
    _probe_metrics(f, s)
    for t in s.targets:
        _target_metrics(f, t)
    _device_metrics(f, s)
    _incident_metrics(f, s)
    _action_metrics(f, s)
    for provable in ("true", "false"):
        f.add("guardian_orphans", (provable,), sum(1 for o in s.orphans.found if str(o.provable).lower() == provable))
    f.add("guardian_orphans_stopped_total", (), s.orphans.stopped_total)
    for g in s.groups:
        for health in sorted({r.health for r in g.ranks}):
            f.add("guardian_group_ranks", (g.group, health), sum(1 for r in g.ranks if r.health == health))
    if s.alerts is not None:
        f.add("guardian_alerts_spooled", (), s.alerts.spooled)
        f.add("guardian_alerts_dropped_total", (), s.alerts.dropped_total)
    for am in s.alertmanager.instances if s.alertmanager is not None else ():
        f.add("guardian_alertmanager_spooled", (am.url,), am.spooled)
        f.add("guardian_alertmanager_sent_total", (am.url,), am.sent_total)
        f.add("guardian_alertmanager_rejected_total", (am.url,), am.rejected_total + am.dropped_total)
        f.add("guardian_alertmanager_failures_total", (am.url,), am.failures_total)
        f.add("guardian_alertmanager_up", (am.url,), 1 if am.up else 0)
    for listener, counts in (s.listeners or {}).items():
        for reason in DROP_REASONS:
            f.add("guardian_listener_connections_dropped_total", (listener, reason), getattr(counts, reason))
    if s.kubernetes is not None:
        for call, n in s.kubernetes.failures.items():
            f.add("guardian_kubernetes_failures_total", (call,), n)
    if s.http is not None:
        _http_metrics(f, s.http)
    if s.trust is not None:
        f.add("guardian_trust_keys", (), len(s.trust.kids))
        for outcome, n in (s.trust.control_messages or {}).items():
            f.add("guardian_control_messages_total", (outcome,), n)
    if s.gates is not None:
        for outcome, n in s.gates.reports.items():
            f.add("guardian_gate_reports_total", (outcome,), n)
        for reason, n in s.gates.reports_dropped.items():
            f.add("guardian_gate_reports_dropped_total", (reason,), n)
        for reason, n in (s.gates.fingerprints_dropped or {}).items():
            f.add("guardian_gate_fingerprints_dropped_total", (reason,), n)
        for reason, n in (s.gates.fingerprints_deleted or {}).items():
            f.add("guardian_gate_fingerprints_deleted_total", (reason,), n)


def _http_metrics(f: _Families, h: HttpStatus) -> None:
    for reason, n in h.connections_refused.items():
        f.add("guardian_http_connections_refused_total", (reason,), n)
    for reason, n in h.auth_failures.items():
        f.add("guardian_http_auth_failures_total", (reason,), n)
    web = h.web_config
    if web is not None:
        f.add("guardian_http_web_config_reloads_total", ("ok",), web.reloads)
        f.add("guardian_http_web_config_reloads_total", ("failed",), web.reload_failures)
        f.add("guardian_http_web_config_last_reload_successful", (), web.last_reload_ok)


def _self_metrics(f: _Families, s: StatusSnapshot) -> None:
    if s.version or s.node:  # a snapshot read from an empty document names neither
        f.add("guardian_build_info", (s.version, s.node), 1)
    g = s.guardian
    f.add("guardian_ticks_total", (), g.ticks)
    f.add("guardian_tick_duration_max_seconds", (), g.max_tick_s)
    f.add("guardian_self_cpu_seconds_total", (), g.cpu_seconds)
    f.add("guardian_self_max_resident_memory_bytes", (), g.max_rss_bytes)
    for c in s.capabilities.missing:
        f.add("guardian_capability_missing", (c.capability,), 1)
    for setting, n in s.server_files.refused.items():
        f.add("guardian_server_files_refused_total", (setting,), n)


def _probe_metrics(f: _Families, s: StatusSnapshot) -> None:
    for probe, c in sorted(s.probes.items()):
        f.add("guardian_probe_runs_total", (probe,), c.runs)
        f.add("guardian_probe_failures_total", (probe,), c.failures)
        f.add("guardian_probe_overruns_total", (probe,), c.overruns)
        f.add("guardian_probe_duration_seconds", (probe,), c.last_duration_s)
        f.add("guardian_probe_duration_mean_seconds", (probe,), c.mean_duration_s)


def _target_metrics(f: _Families, t: TargetStatus) -> None:
    name = t.name
    tl = (name,)
    f.add("guardian_target_info", (name, t.model or "", t.source or "", t.namespace or "", t.pod or ""), 1)
    f.add("guardian_target_up", tl, t.serving)
    f.add("guardian_target_ready", tl, t.ready)
    f.add("guardian_target_port_other_listeners", tl, t.other_listeners)
    if t.phase:
        f.add("guardian_target_phase", (name, t.phase), 1)
    if t.vllm is not None:
        v = t.vllm
        f.add("guardian_target_vllm_info", (name, v.version or "", v.row, "1" if v.notice else "0"), 1)
        for engine, seconds in v.recovering.items():
            f.add("guardian_target_vllm_recovering_seconds", (name, engine), seconds)
    if t.health is not None:
        f.add("guardian_target_health_ok", tl, t.health.status == 200)
    if t.gates is not None:
        f.add("guardian_target_health_score", tl, t.gates.health_score)
    for reason, n in t.metrics_dropped.items():
        f.add("guardian_target_metrics_dropped_total", (name, reason), n)
    eng = t.engine
    f.add("guardian_engine_steps_per_second", tl, eng.steps_per_s)
    f.add("guardian_engine_requests_running", tl, eng.requests_running)
    f.add("guardian_engine_requests_waiting", tl, eng.requests_waiting)
    f.add("guardian_engine_kv_cache_usage_ratio", tl, eng.kv_cache_usage)
    if t.canary is not None:
        f.add("guardian_canary_latency_seconds", tl, t.canary.latency_s)
        f.add("guardian_canary_ok", tl, t.canary.ok)
    for pl, p in _process_labels(name, t.processes):
        f.add("guardian_process_cpu_ratio", pl, p.cpu_ratio)
        f.add("guardian_process_resident_memory_bytes", pl, p.rss_bytes)
        f.add("guardian_process_threads", pl, p.threads)
        hot = p.hottest_thread
        if hot is not None:
            f.add("guardian_hottest_thread_cpu_ratio", pl, hot.cpu_ratio)
            f.add("guardian_hottest_thread_voluntary_switches_per_second", pl, hot.voluntary_per_s)
            f.add("guardian_hottest_thread_involuntary_switches_per_second", pl, hot.involuntary_per_s)
    for dev in t.accelerators:
        al = (name, dev.device, dev.backend or "")
        f.add("guardian_accelerator_memory_used_bytes", al, dev.memory_used_bytes)
        f.add("guardian_accelerator_memory_total_bytes", al, dev.memory_total_bytes)
        f.add("guardian_accelerator_utilization_ratio", al, dev.utilization_ratio)
        f.add("guardian_target_accelerator_memory_bytes", al, dev.target_memory_bytes)


def _device_metrics(f: _Families, s: StatusSnapshot) -> None:
    """A health gauge for every device of the node table, and for any device with a fault."""
    seen = set()
    for row in s.accelerators:
        seen.add(row.device)
        f.add("guardian_accelerator_health", (row.device, row.backend or ""), row.fault_health)
    for dev, st in sorted((s.device_faults or {}).items()):
        if dev not in seen:
            f.add("guardian_accelerator_health", (dev, ""), st.health)
    for backend, reasons in sorted(s.accelerators_refused.items()):
        for reason, n in sorted(reasons.items()):
            f.add("guardian_accelerator_input_refused_total", (backend, reason), n)


def _incident_metrics(f: _Families, s: StatusSnapshot) -> None:
    kinds = [k.value for k in Kind]
    open_by_kind = dict.fromkeys(kinds, 0)
    open_by_target: dict[tuple[str, str], int] = {(t.name, k): 0 for t in s.targets for k in kinds}
    for inc in s.incidents:
        kind = inc.kind.value
        open_by_kind[kind] = open_by_kind.get(kind, 0) + 1
        if inc.kind is not Kind.ACCEL_FAULT:  # a device, not a server
            target = inc.target.name
            for k in kinds:  # a target known only from its incident still gets every kind
                open_by_target.setdefault((target, k), 0)
            open_by_target[(target, kind)] += 1
    for kind, n in open_by_kind.items():
        f.add("guardian_incidents_open", (kind,), n)
    for (target, kind), n in sorted(open_by_target.items()):
        f.add("guardian_target_incidents_open", (target, kind), n)


def _incident_totals(f: _Families, stats: SelfStats | None) -> None:
    kinds = [k.value for k in Kind]
    for counted, metric in (
        (None if stats is None else stats.incidents_opened, "guardian_incidents_opened_total"),
        (None if stats is None else stats.incidents_resolved, "guardian_incidents_resolved_total"),
    ):
        counts = dict.fromkeys(kinds, 0)
        counts.update(dict(counted or {}))  # dict() copies atomically
        for kind, n in counts.items():
            f.add(metric, (kind,), n)


def _action_metrics(f: _Families, s: StatusSnapshot) -> None:
    outcomes: dict[str, int] = dict.fromkeys(ACTION_OUTCOMES, 0)
    outcomes.update(s.actions.outcomes)
    for outcome, n in outcomes.items():
        f.add("guardian_actions_total", (outcome,), n)
    restarts: dict[tuple[str, str], int] = {(t.name, o): 0 for t in s.targets for o in RESTART_OUTCOMES}
    for target, by_outcome in s.actions.restarts.items():
        for o in RESTART_OUTCOMES:
            restarts.setdefault((target, o), 0)
        for outcome, n in by_outcome.items():
            restarts[(target, outcome)] = n
    for (target, outcome), n in sorted(restarts.items()):
        f.add("guardian_restarts_total", (target, outcome), n)


def _process_labels(
    target: str, processes: Iterable[ProcessStatus]
) -> list[tuple[tuple[str, str, str], ProcessStatus]]:
    """(target, role, index) for each process: ``index`` counts the processes of one role in pid
    order. No pid label: a pid makes new series at every restart of the server (unbounded
    cardinality over time); which pid it is today is in ``guardian status``."""
    seen: dict[str, int] = {}
    out = []
    for p in sorted(processes, key=lambda p: p.pid):
        role = p.role or "other"
        out.append(((target, role, str(seen.get(role, 0))), p))
        seen[role] = seen.get(role, 0) + 1
    return out


def build_registry(
    status: Callable[[], StatusSnapshot | None], stats: Callable[[], SelfStats] | None = None
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
]
