"""The Prometheus exporter, on status documents built by hand (the shape of
vllm_guardian/surface/status_view.py build_status): the exposition holds exactly the declared
families, label sets are the declared ones, absent values give no sample (never 0),
and the totals the spec wants from the start are present at 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import REGISTRY

from vllm_guardian.surface.exporter import (
    ACTION_OUTCOMES,
    DECLARED,
    LABELS,
    RESTART_OUTCOMES,
    GuardianCollector,
    build_registry,
)
from vllm_guardian.model import Kind
from vllm_guardian.surface.status_codec import StatusDocumentError
from vllm_guardian.surface.status_snapshot import StatusSnapshot
from vllm_guardian.state.tick_times import TickTimes

KINDS = [k.value for k in Kind]


def target(name: str = "llama", **over) -> dict:
    t = {
        "name": name,
        "source": "config",
        "pid": 100,
        "starttime": 1000,
        "port": 8000,
        "api_url": "http://127.0.0.1:8000",
        "other_listeners": 2,  # a neighbour on 127.0.0.2:8000 and one on [::]:8000 (IPv6-only)
        "model": "m",
        "phase": "serving",
        "serving": True,
        "ready": True,
        "health": {"status": 200, "error": None, "latency_s": 0.002},
        "engine": {"requests_running": 3.0, "requests_waiting": 1.0, "kv_cache_usage": 0.25, "steps_per_s": 12.5},
        "canary": {"ok": True, "timed_out": False, "latency_s": 0.05, "error": None, "age_s": 2.0},
        "processes": [
            {
                "pid": 100,
                "starttime": 1000,
                "role": "api_server",
                "cmdline": "vllm serve m",
                "state": "S",
                "cpu_ratio": 0.1,
                "rss_bytes": 1_000_000,
                "threads": 4,
                "hottest_thread": None,
            },
            {
                "pid": 110,
                "starttime": 1020,
                "role": "engine_core",
                "cmdline": "VLLM::EngineCore",
                "state": "R",
                "cpu_ratio": 0.99,
                "rss_bytes": 2_000_000,
                "threads": 9,
                "hottest_thread": {
                    "tid": 110,
                    "comm": "VLLM::EngineCor",
                    "cpu_ratio": 0.98,
                    "voluntary_per_s": 0.0,
                    "involuntary_per_s": 25.0,
                    "syscall": "running",
                },
            },
        ],
        "accelerators": [
            {
                "device": "0",
                "backend": "nvml",
                "memory_used_bytes": 70e9,
                "memory_total_bytes": 80e9,
                "utilization_ratio": 0.0,
                "target_memory_bytes": 69e9,
            }
        ],
        "suspects": {},
        "incidents": [],
        "errors": {},
    }
    t.update(over)
    return t


def incident(kind: str, target_name: str) -> dict:
    return {
        "id": "01J",
        "kind": kind,
        "status": "firing",
        "severity": "critical",
        "node": "n1",
        "target": {"name": target_name, "pid": 100, "starttime": 1000, "port": 8000, "model": "m", "role": None},
        "summary": "x",
        "signals": {},
        "opened_at": 1.0,
        "resolved_at": None,
        "evidence_dir": None,
        "actions": [],
        "fingerprint": f"n1/{target_name}/{kind}",
    }


def status(**over) -> dict:
    doc = {
        "schema": 1,
        "node": "n1",
        "version": "0.1.0",
        "time": 1_700_000_000.0,
        "uptime_s": 60.0,
        "guardian": {
            "pid": 1,
            "ticks": 60,
            "last_tick_s": 0.002,
            "max_tick_s": 0.01,
            "tick_p50_s": 0.0015,
            "tick_p99_s": 0.009,
            "cpu_seconds": 1.5,
            "max_rss_bytes": 40_000_000,
        },
        "probes": {
            "procfs": {"runs": 60, "failures": 1, "overruns": 2, "last_duration_s": 0.001, "mean_duration_s": 0.0012}
        },
        "targets": [target()],
        "unmatched": [],
        "incidents": [],
        "errors": {},
    }
    doc.update(over)
    return doc


def ticks(*seconds: float) -> TickTimes:
    t = TickTimes()
    for s in seconds:
        t.add(s)
    return t


@dataclass
class Stats:
    incidents_opened: dict = field(default_factory=dict)
    incidents_resolved: dict = field(default_factory=dict)
    tick_times: TickTimes = field(default_factory=lambda: ticks(0.002, 0.003, 0.7))


def scrape(doc, stats=None, everything: bool = False) -> dict:
    """family name as exposed (counters without _total) -> family, parsed back from the text format;
    the guardian's own families only (``process_*`` of the process collector with ``everything``)."""
    snapshot = None if doc is None else StatusSnapshot.from_dict(doc)
    text = generate_latest(build_registry(lambda: snapshot, (lambda: stats) if stats is not None else None))
    fams = {f.name: f for f in text_string_to_metric_families(text.decode())}
    return fams if everything else {n: f for n, f in fams.items() if not n.startswith("process_")}


def value(fams: dict, name: str, **labels) -> float | None:
    fam = fams[name[: -len("_total")] if name.endswith("_total") else name]
    hits = [s.value for s in fam.samples if s.name == name and s.labels == {k: str(v) for k, v in labels.items()}]
    assert len(hits) <= 1
    return hits[0] if hits else None


def family_name(spec) -> str:
    return spec.name[: -len("_total")] if spec.type == "counter" else spec.name


FULL = status(
    targets=[
        target(
            gates={"health_score": 20, "baseline": "complete", "failures": [], "notes": []},
            metrics_dropped={"engines": 19_936, "too_many_samples": 3},
            vllm={
                "version": "0.35.0",
                "row": "0.34.0",
                "notice": "newer",
                "phase": "recovering",
                "checkpoint": None,
                "engines": {"0": "diagnosing"},
                "recovering": {"0": 12.0},
            },
        )
    ],
    incidents=[incident("busy_loop", "llama")],
    actions={"outcomes": {"ok": 4, "failed": 1}, "restarts": {"llama": {"ok": 1}}},
    alerts={"spooled": 7, "dropped_total": 2},  # the keys RedisAlertSink.stats() writes
    alertmanager={  # AlertmanagerSink.status_section()
        "instances": [
            {
                "url": "http://am1:9093",
                "spooled": 3,
                "sent_total": 40,
                "rejected_total": 1,
                "dropped_total": 2,
                "failures_total": 5,
                "up": False,
                "last_error": "HTTP 503",
            }
        ],
        "firing": 1,
    },
    gates={
        "reports": {"accepted": 3, "malformed": 1, "unsigned": 2},
        "reports_dropped": {"malformed": 1, "unsigned": 2},
        "fingerprints_dropped": {"future": 2},
        "fingerprints_deleted": {"malformed": 1100},
    },
    accelerators=[{"device": "nvml:0", "backend": "nvml", "fault_health": 0}],
    device_faults={"pci:0000:3b:00": {"health": 2}},
    accelerators_refused={"kmsg": {"not_kernel": 2, "unknown_device": 0}},  # AccelResult.refused
    kubernetes={"failures": {"TaintWant": 3}, "queue_full": 0, "node_tainted": True},  # KubePublisher.stats()
    http={  # HttpCounters.status_section()
        "address": "0.0.0.0:9464",
        "scheme": "https",
        "connections_refused": {"full": 0, "evicted": 2, "tls_handshake": 5},
        "auth_failures": {"no_credentials": 3, "bad_credentials": 1, "busy": 0},
        "web_config": {
            "file": "/etc/guardian/web.yml",
            "applied": "TLS",
            "reloads": 2,
            "reload_failures": 1,
            "last_reload_ok": False,
            "last_error": "bad",
        },
    },
    trust={"source": "file /k", "kids": ["gw"], "last_reload": None, "control_messages": {"own": 2, "unsigned": 1}},
    listeners={"socket": {"refused": 0, "evicted": 15, "timed_out": 16}, "http": {"refused": 2}},
    capabilities={"missing": [{"capability": "ptrace", "why": "no CAP_SYS_PTRACE", "consequence": "no py-spy"}]},
    server_files={"refused": {"restart.log_file": 2}, "last_refusal": "restart.log_file /l: a symbolic link"},
    groups=[  # GroupStage.status()
        {
            "group": "dp@10.0.0.1:13345",
            "kind": "vllm-dp",
            "size": 2,
            "targets": ["rank1"],
            "local_ranks": [1],
            "leader_node": "node-a",
            "ranks": [
                {"rank": 0, "node": "node-a", "pid": 10, "health": "serving", "leader": True, "incident": None},
                {"rank": 1, "node": "node-b", "pid": 20, "health": "stalled", "leader": False, "incident": "i-1"},
            ],
        }
    ],
    orphans={"found": [{"pid": 7, "title": "VLLM::EngineCore", "rss": 1, "why": "title", "provable": False}]},
)
MINIMAL: dict = {}  # before the first tick the daemon's status() is an empty dict


# ------------------------------------------------------------------ the declared list
def test_declared_names_are_prefixed_unique_and_typed():
    names = [s.name for s in DECLARED]
    assert len(names) == len(set(names))
    assert all(n.startswith("guardian_") for n in names)
    assert {s.type for s in DECLARED} <= {"gauge", "counter", "histogram"}
    assert all(s.name.endswith("_total") == (s.type == "counter") for s in DECLARED)
    assert set(LABELS) == set(names)
    assert all(s.help for s in DECLARED)


@pytest.mark.parametrize("doc", [FULL, status(), MINIMAL], ids=["full", "typical", "empty"])
def test_exposition_holds_exactly_the_declared_families(doc):
    fams = scrape(doc, Stats())
    assert {n: f.type for n, f in fams.items()} == {family_name(s): s.type for s in DECLARED}
    assert {n: f.documentation for n, f in fams.items()} == {family_name(s): s.help for s in DECLARED}


@pytest.mark.parametrize("doc", [FULL, status(), MINIMAL], ids=["full", "typical", "empty"])
def test_every_sample_has_exactly_the_declared_labels(doc):
    specs = {family_name(s): s for s in DECLARED}
    for fam in scrape(doc, Stats()).values():
        spec = specs[fam.name]
        for s in fam.samples:
            if spec.type == "histogram":
                assert s.name in {spec.name + "_bucket", spec.name + "_sum", spec.name + "_count"}
                assert set(s.labels) - {"le"} == set(LABELS[spec.name]), s
                continue
            assert s.name == spec.name
            assert set(s.labels) == set(LABELS[spec.name]), s
            assert all(re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", k) for k in s.labels)


def test_the_full_document_gives_every_family_a_sample():
    fams = scrape(FULL, Stats())
    assert sorted(n for n, f in fams.items() if not f.samples) == []


def test_the_collector_uses_its_own_registry_not_the_global_default():
    before = set(REGISTRY._names_to_collectors)
    reg = build_registry(lambda: StatusSnapshot.from_dict(FULL))
    assert reg is not REGISTRY
    assert set(REGISTRY._names_to_collectors) == before


def test_describe_names_every_declared_family_without_reading_status():
    def boom():
        raise AssertionError("describe must not read the status")

    assert sorted(m.name for m in GuardianCollector(boom).describe()) == sorted(family_name(s) for s in DECLARED)


# ------------------------------------------------------------------ values
@pytest.mark.parametrize(
    "name, labels, expected",
    [
        ("guardian_build_info", {"version": "0.1.0", "node": "n1"}, 1.0),
        ("guardian_ticks_total", {}, 60.0),
        ("guardian_tick_duration_max_seconds", {}, 0.01),
        ("guardian_self_cpu_seconds_total", {}, 1.5),
        ("guardian_self_max_resident_memory_bytes", {}, 40_000_000.0),
        ("guardian_probe_runs_total", {"probe": "procfs"}, 60.0),
        ("guardian_probe_failures_total", {"probe": "procfs"}, 1.0),
        ("guardian_probe_overruns_total", {"probe": "procfs"}, 2.0),
        ("guardian_probe_duration_seconds", {"probe": "procfs"}, 0.001),
        ("guardian_probe_duration_mean_seconds", {"probe": "procfs"}, 0.0012),
        (
            "guardian_target_info",
            {"target": "llama", "model": "m", "source": "config", "namespace": "", "pod": ""},
            1.0,
        ),
        ("guardian_target_up", {"target": "llama"}, 1.0),
        ("guardian_target_ready", {"target": "llama"}, 1.0),
        ("guardian_target_health_ok", {"target": "llama"}, 1.0),
        ("guardian_target_port_other_listeners", {"target": "llama"}, 2.0),
        ("guardian_process_cpu_ratio", {"target": "llama", "role": "engine_core", "index": "0"}, 0.99),
        ("guardian_process_resident_memory_bytes", {"target": "llama", "role": "api_server", "index": "0"}, 1e6),
        ("guardian_process_threads", {"target": "llama", "role": "engine_core", "index": "0"}, 9.0),
        ("guardian_hottest_thread_cpu_ratio", {"target": "llama", "role": "engine_core", "index": "0"}, 0.98),
        (
            "guardian_hottest_thread_voluntary_switches_per_second",
            {"target": "llama", "role": "engine_core", "index": "0"},
            0.0,
        ),
        (
            "guardian_hottest_thread_involuntary_switches_per_second",
            {"target": "llama", "role": "engine_core", "index": "0"},
            25.0,
        ),
        ("guardian_engine_steps_per_second", {"target": "llama"}, 12.5),
        ("guardian_engine_requests_running", {"target": "llama"}, 3.0),
        ("guardian_engine_requests_waiting", {"target": "llama"}, 1.0),
        ("guardian_engine_kv_cache_usage_ratio", {"target": "llama"}, 0.25),
        ("guardian_canary_latency_seconds", {"target": "llama"}, 0.05),
        ("guardian_canary_ok", {"target": "llama"}, 1.0),
        ("guardian_accelerator_memory_used_bytes", {"target": "llama", "device": "0", "backend": "nvml"}, 70e9),
        ("guardian_accelerator_memory_total_bytes", {"target": "llama", "device": "0", "backend": "nvml"}, 80e9),
        ("guardian_accelerator_utilization_ratio", {"target": "llama", "device": "0", "backend": "nvml"}, 0.0),
        ("guardian_target_accelerator_memory_bytes", {"target": "llama", "device": "0", "backend": "nvml"}, 69e9),
        ("guardian_incidents_open", {"kind": "busy_loop"}, 1.0),
        ("guardian_incidents_open", {"kind": "engine_stall"}, 0.0),
        ("guardian_target_incidents_open", {"target": "llama", "kind": "busy_loop"}, 1.0),
        ("guardian_target_incidents_open", {"target": "llama", "kind": "engine_dead"}, 0.0),
        ("guardian_actions_total", {"outcome": "ok"}, 4.0),
        ("guardian_actions_total", {"outcome": "failed"}, 1.0),
        ("guardian_actions_total", {"outcome": "dry_run"}, 0.0),
        ("guardian_restarts_total", {"target": "llama", "outcome": "ok"}, 1.0),
        ("guardian_restarts_total", {"target": "llama", "outcome": "failed"}, 0.0),
        ("guardian_alerts_spooled", {}, 7.0),
        ("guardian_alerts_dropped_total", {}, 2.0),
        ("guardian_alertmanager_spooled", {"alertmanager": "http://am1:9093"}, 3.0),
        ("guardian_alertmanager_sent_total", {"alertmanager": "http://am1:9093"}, 40.0),
        ("guardian_alertmanager_rejected_total", {"alertmanager": "http://am1:9093"}, 3.0),
        ("guardian_alertmanager_failures_total", {"alertmanager": "http://am1:9093"}, 5.0),
        ("guardian_alertmanager_up", {"alertmanager": "http://am1:9093"}, 0.0),
        ("guardian_kubernetes_failures_total", {"call": "TaintWant"}, 3.0),
        ("guardian_http_connections_refused_total", {"reason": "tls_handshake"}, 5.0),
        ("guardian_http_connections_refused_total", {"reason": "evicted"}, 2.0),
        ("guardian_http_auth_failures_total", {"reason": "no_credentials"}, 3.0),
        ("guardian_http_auth_failures_total", {"reason": "busy"}, 0.0),
        ("guardian_http_web_config_reloads_total", {"outcome": "ok"}, 2.0),
        ("guardian_http_web_config_reloads_total", {"outcome": "failed"}, 1.0),
        ("guardian_http_web_config_last_reload_successful", {}, 0.0),
        ("guardian_trust_keys", {}, 1.0),
        ("guardian_control_messages_total", {"outcome": "unsigned"}, 1.0),
        ("guardian_listener_connections_dropped_total", {"listener": "socket", "reason": "evicted"}, 15.0),
        ("guardian_listener_connections_dropped_total", {"listener": "socket", "reason": "timed_out"}, 16.0),
        ("guardian_listener_connections_dropped_total", {"listener": "http", "reason": "refused"}, 2.0),
        ("guardian_listener_connections_dropped_total", {"listener": "http", "reason": "timed_out"}, 0.0),
        ("guardian_target_metrics_dropped_total", {"target": "llama", "reason": "engines"}, 19_936.0),
        ("guardian_target_metrics_dropped_total", {"target": "llama", "reason": "too_many_samples"}, 3.0),
        ("guardian_accelerator_input_refused_total", {"backend": "kmsg", "reason": "not_kernel"}, 2.0),
        ("guardian_accelerator_input_refused_total", {"backend": "kmsg", "reason": "unknown_device"}, 0.0),
    ],
)
def test_status_fields_map_to_metric_values(name, labels, expected):
    assert value(scrape(FULL, Stats()), name, **labels) == pytest.approx(expected)


def test_incident_totals_come_from_the_self_stats_with_every_kind_present():
    fams = scrape(status(), Stats(incidents_opened={"busy_loop": 3}, incidents_resolved={"busy_loop": 2}))
    opened = {s.labels["kind"]: s.value for s in fams["guardian_incidents_opened"].samples}
    resolved = {s.labels["kind"]: s.value for s in fams["guardian_incidents_resolved"].samples}
    assert opened == {k: (3.0 if k == "busy_loop" else 0.0) for k in KINDS}
    assert resolved == {k: (2.0 if k == "busy_loop" else 0.0) for k in KINDS}


def test_without_self_stats_the_incident_totals_are_zero_for_every_kind():
    fams = scrape(status())
    assert {s.labels["kind"]: s.value for s in fams["guardian_incidents_opened"].samples} == dict.fromkeys(KINDS, 0.0)


def test_incidents_open_lists_every_kind_at_zero_when_nothing_is_open():
    fams = scrape(status())
    assert {s.labels["kind"]: s.value for s in fams["guardian_incidents_open"].samples} == dict.fromkeys(KINDS, 0.0)


def test_an_incident_of_a_target_no_longer_listed_still_counts_for_that_target():
    fams = scrape(status(targets=[], incidents=[incident("engine_dead", "gone-one")]))
    samples = fams["guardian_target_incidents_open"].samples
    per_target = {(s.labels["target"], s.labels["kind"]): s.value for s in samples}
    assert per_target == {("gone-one", k): (1.0 if k == "engine_dead" else 0.0) for k in KINDS}


def test_action_and_restart_totals_are_declared_at_zero_before_remediation_reports_any():
    fams = scrape(status())  # no "actions" section yet
    assert {s.labels["outcome"]: s.value for s in fams["guardian_actions"].samples} == dict.fromkeys(
        ACTION_OUTCOMES, 0.0
    )
    assert {(s.labels["target"], s.labels["outcome"]): s.value for s in fams["guardian_restarts"].samples} == {
        ("llama", o): 0.0 for o in RESTART_OUTCOMES
    }


@pytest.mark.parametrize(
    "phase, serving_field, expected",
    [
        ("serving", True, 1.0),
        ("incident", True, 1.0),  # the readiness verdict, not the phase
        ("serving", False, 0.0),  # e.g. drained for a restart
        ("warming", False, 0.0),
    ],
)
def test_target_up_is_the_serving_verdict(phase, serving_field, expected):
    t = target(phase=phase, serving=serving_field)
    assert value(scrape(status(targets=[t])), "guardian_target_up", target="llama") == expected


# ------------------------------------------------------------------ absence is not zero
ABSENT_CASES = [
    (
        "no accelerators section",
        {"accelerators": []},
        [
            "guardian_accelerator_memory_used_bytes",
            "guardian_accelerator_memory_total_bytes",
            "guardian_accelerator_utilization_ratio",
            "guardian_target_accelerator_memory_bytes",
        ],
    ),
    ("no canary yet", {"canary": None}, ["guardian_canary_latency_seconds", "guardian_canary_ok"]),
    ("no scrape yet", {"health": None}, ["guardian_target_health_ok"]),
    (
        "engine gauges unknown",
        {"engine": {"requests_running": None, "requests_waiting": None, "kv_cache_usage": None, "steps_per_s": None}},
        [
            "guardian_engine_requests_running",
            "guardian_engine_requests_waiting",
            "guardian_engine_kv_cache_usage_ratio",
            "guardian_engine_steps_per_second",
        ],
    ),
    (
        "no per-thread reads",
        {
            "processes": [
                {
                    "pid": 100,
                    "role": "api_server",
                    "cpu_ratio": None,
                    "rss_bytes": None,
                    "threads": None,
                    "hottest_thread": None,
                }
            ]
        },
        [
            "guardian_process_cpu_ratio",
            "guardian_process_resident_memory_bytes",
            "guardian_process_threads",
            "guardian_hottest_thread_cpu_ratio",
            "guardian_hottest_thread_voluntary_switches_per_second",
            "guardian_hottest_thread_involuntary_switches_per_second",
        ],
    ),
]


@pytest.mark.parametrize("what, over, families", ABSENT_CASES, ids=[c[0] for c in ABSENT_CASES])
def test_absent_values_give_no_sample_never_zero(what, over, families):
    fams = scrape(status(targets=[target(**over)]))
    assert {f: fams[f].samples for f in families} == {f: [] for f in families}


def test_a_hottest_thread_without_an_involuntary_rate_exports_only_what_it_has():
    proc = {
        "pid": 110,
        "role": "engine_core",
        "cpu_ratio": 1.0,
        "rss_bytes": 1,
        "threads": 2,
        "hottest_thread": {"tid": 110, "cpu_ratio": 0.97, "voluntary_per_s": 3.0},
    }
    fams = scrape(status(targets=[target(processes=[proc])]))
    labels = {"target": "llama", "role": "engine_core", "index": "0"}
    assert value(fams, "guardian_hottest_thread_voluntary_switches_per_second", **labels) == 3.0
    assert value(fams, "guardian_hottest_thread_involuntary_switches_per_second", **labels) is None


@pytest.mark.parametrize("section", [{}, {"alerts": None}])
def test_alert_spool_metrics_are_absent_until_the_alert_sink_reports_them(section):
    fams = scrape(status(**section))
    assert (fams["guardian_alerts_spooled"].samples, fams["guardian_alerts_dropped"].samples) == ([], [])


@pytest.mark.parametrize(
    "bad, where",
    [
        ({"targets": None}, "status.targets"),
        ({"targets": [{"no": "name"}, "junk", 3]}, "status.targets[1]"),
        ({"targets": [target(engine="junk")]}, "status.targets[0].engine"),
        ({"guardian": {"ticks": "sixty"}}, "status.guardian.ticks"),
    ],
)
def test_a_malformed_status_document_is_refused_naming_the_key(bad, where):
    with pytest.raises(StatusDocumentError, match=re.escape(where)):
        StatusSnapshot.from_dict(status(**bad))


# ------------------------------------------------------------------ label escaping
@pytest.mark.parametrize("name", ['we"ird', "back\\slash", "new\nline", "ünïcode", "a,b=c{d}"])
def test_label_values_are_escaped_and_round_trip(name):
    fams = scrape(status(targets=[target(name=name)], incidents=[incident("busy_loop", name)]))
    assert value(fams, "guardian_target_up", target=name) == 1.0
    assert value(fams, "guardian_target_incidents_open", target=name, kind="busy_loop") == 1.0


def test_a_scrape_reads_the_latest_status_each_time():
    docs = iter(
        [StatusSnapshot.from_dict(d) for d in (status(), status(targets=[target(phase="warming", serving=False)]))]
    )
    reg = build_registry(lambda: next(docs))  # registration describes; it does not consume a status
    first = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
    second = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
    assert (
        value(first, "guardian_target_up", target="llama"),
        value(second, "guardian_target_up", target="llama"),
    ) == (1.0, 0.0)


def test_the_gates_health_score_and_report_outcomes_are_exported():
    fams = scrape(FULL)
    assert value(fams, "guardian_target_health_score", target="llama") == 20
    assert value(fams, "guardian_gate_reports_total", outcome="malformed") == 1
    assert value(fams, "guardian_gate_fingerprints_deleted_total", reason="malformed") == 1100


def test_no_health_score_before_a_gate_round():
    assert value(scrape(status()), "guardian_target_health_score", target="llama") is None


def test_every_device_gets_a_health_gauge_and_a_device_incident_no_target_series():
    doc = status(
        accelerators=[
            {"device": "nvml:0", "backend": "nvml", "fault_health": 2},
            {"device": "nvml:1", "backend": "nvml"},
        ],
        device_faults={"nvml:0": {"health": 2}, "pci:0000:3b:00": {"health": 1}},
        incidents=[incident("accel_fault", "nvml:0")],
    )
    fams = scrape(doc)
    assert value(fams, "guardian_accelerator_health", device="nvml:0", backend="nvml") == 2.0
    assert value(fams, "guardian_accelerator_health", device="nvml:1", backend="nvml") == 0.0
    assert value(fams, "guardian_accelerator_health", device="pci:0000:3b:00", backend="") == 1.0
    assert value(fams, "guardian_incidents_open", kind="accel_fault") == 1.0
    assert value(fams, "guardian_target_incidents_open", target="nvml:0", kind="accel_fault") is None


# ------------------------------------------------------------------ metrics hygiene
def test_tick_durations_are_a_histogram_of_every_tick():
    fams = scrape(status(), Stats(tick_times=ticks(0.002, 0.003, 0.7)))
    samples = {(s.name, s.labels.get("le")): s.value for s in fams["guardian_tick_duration_seconds"].samples}
    assert samples[("guardian_tick_duration_seconds_bucket", "0.005")] == 2.0
    assert samples[("guardian_tick_duration_seconds_bucket", "0.5")] == 2.0
    assert samples[("guardian_tick_duration_seconds_bucket", "1")] == 3.0
    assert samples[("guardian_tick_duration_seconds_bucket", "+Inf")] == 3.0
    assert samples[("guardian_tick_duration_seconds_count", None)] == 3.0
    assert samples[("guardian_tick_duration_seconds_sum", None)] == pytest.approx(0.705)


def test_processes_are_labelled_by_role_and_index_never_by_pid():
    """A pid makes new series at every restart of the server; role + index stay the same."""
    workers = [{"pid": pid, "role": "worker", "cpu_ratio": 0.5} for pid in (300, 200)]
    fams = scrape(status(targets=[target(processes=workers)]))
    got = {(s.labels["role"], s.labels["index"]) for s in fams["guardian_process_cpu_ratio"].samples}
    assert got == {("worker", "0"), ("worker", "1")}
    assert all("pid" not in spec_labels for spec_labels in LABELS.values())


def test_the_guardians_own_process_metrics_are_exported():
    fams = scrape(status(), Stats(), everything=True)
    assert {"process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds"} <= set(fams)
    assert fams["process_resident_memory_bytes"].samples[0].value > 0


def test_a_targets_vllm_version_row_guess_and_rounds_are_exported():
    fams = scrape(FULL)
    info = {"target": "llama", "version": "0.35.0", "row": "0.34.0", "guessed": "1"}
    assert value(fams, "guardian_target_vllm_info", **info) == 1.0
    assert value(fams, "guardian_target_vllm_recovering_seconds", target="llama", engine="0") == 12.0
    assert value(scrape(status()), "guardian_target_vllm_recovering_seconds", target="llama", engine="0") is None
