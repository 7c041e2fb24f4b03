"""The Helm chart (deploy/helm/vllm-guardian) with the real ``helm`` (tools/k8s_render.py): it
lints for every value set in its ci/ folder, renders objects the API schemas of every supported
Kubernetes version accept, renders the guardian config the guardian accepts, grants exactly the
namespaces it is given, and rolls the pods when — and only when — the guardian's config changes;
with webConfig, a web config the guardian accepts at the mounted path, monitors that scrape with
https and the given credentials, and a liveness probe the kubelet can pass."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from tests.support.k8s_schemas import VERSIONS, split, validate

from tools.k8s_render import CHART, ToolFailed, helm_lint, helm_template
from vllm_guardian.config.loader import parse_config
from vllm_guardian.config.web import parse_web_config

ROOT = Path(__file__).resolve().parents[2]
VALUE_SETS = sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))
_CACHE: dict[tuple, list[dict]] = {}


def render(values: str | None = None, kube_version: str | None = None, **sets: str) -> list[dict]:
    key = (values, kube_version, tuple(sorted(sets.items())))
    if key not in _CACHE:
        _CACHE[key] = helm_template([CHART / "ci" / values] if values else [], sets, kube_version=kube_version)
    return _CACHE[key]


def node_features(values: str | None) -> bool:
    """Does the value set turn on kubernetes.node_condition or taint_on_device_fault?"""
    kube = ((yaml.safe_load((CHART / "ci" / values).read_text()) if values else {}).get("config") or {}).get(
        "kubernetes"
    ) or {}
    return bool(kube.get("node_condition") or kube.get("taint_on_device_fault"))


def kind(docs: list[dict], k: str) -> list[dict]:
    return [d for d in docs if d["kind"] == k]


def config_of(docs: list[dict]):
    (cm,) = [d for d in kind(docs, "ConfigMap") if "guardian.yaml" in d["data"]]
    return parse_config(yaml.safe_load(cm["data"]["guardian.yaml"]))


def grants(docs: list[dict]) -> set[tuple[str, str, str]]:
    """(verb, resource, namespace or '*') the service account is granted."""
    roles = {d["metadata"]["name"]: d for d in kind(docs, "ClusterRole")}
    out = set()
    for b in kind(docs, "RoleBinding") + kind(docs, "ClusterRoleBinding"):
        ns = b["metadata"].get("namespace", "*") if b["kind"] == "RoleBinding" else "*"
        for rule in roles[b["roleRef"]["name"]]["rules"]:
            out |= {(v, r, ns) for v in rule["verbs"] for r in rule["resources"]}
    return out


def test_there_is_a_matrix_of_value_sets():
    assert len(VALUE_SETS) >= 4


@pytest.mark.parametrize("values", [None, *VALUE_SETS])
def test_helm_lint_passes_strict(values):
    helm_lint(CHART / "ci" / values if values else None)


@pytest.mark.parametrize("values", [None, *VALUE_SETS])
@pytest.mark.parametrize("version", VERSIONS)
def test_rendered_objects_are_valid_for_each_supported_version(values, version):
    """Rendered for that version: before 1.30 a Node grant has no admission policy to narrow it,
    and the chart refuses unless told to go without (nodeAdmissionPolicy=false)."""
    if node_features(values) and tuple(map(int, version.split("."))) < (1, 30):
        with pytest.raises(ToolFailed, match=r"needs Kubernetes 1\.30\+.*nodeAdmissionPolicy=false"):
            render(values, f"{version}.0")
        docs = render(values, f"{version}.0", nodeAdmissionPolicy="false")
        assert not [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]
    else:
        docs = render(values, f"{version}.0")
    for doc in docs:
        validate(doc, version)


@pytest.mark.parametrize("values", [None, *VALUE_SETS])
def test_the_rendered_config_is_one_the_guardian_accepts(values):
    docs = render(values)
    cfg = config_of(docs)
    mode = (yaml.safe_load((CHART / "ci" / values).read_text()) if values else {}).get("mode", "observe")
    assert cfg.policy.dry_run is (mode == "observe")


def test_observe_mode_can_neither_evict_nor_delete():
    acting = {("create", "pods/eviction"), ("delete", "pods")}
    assert not {g for g in grants(render("observe-values.yaml")) if g[:2] in acting}


def test_remediate_mode_evicts_in_the_targets_namespace_and_never_deletes():
    g = grants(render("remediate-values.yaml"))
    assert ("create", "pods/eviction", "llm") in g
    assert not {x for x in g if x[:2] == ("delete", "pods")}


def test_pod_removal_delete_grants_delete_instead_of_eviction():
    g = grants(render("full-values.yaml"))
    assert {("delete", "pods", "team-a"), ("delete", "pods", "team-b")} <= g
    assert not {x for x in g if x[1] == "pods/eviction"}


def test_rbac_is_rendered_from_the_namespaces_given_and_no_other():
    assert {ns for *_, ns in grants(render("full-values.yaml")) if ns != "*"} == {"team-a", "team-b", "default"}
    assert {ns for *_, ns in grants(render("observe-values.yaml"))} == {"inference", "default"}


def test_the_defaults_grant_no_namespace_and_never_name_llm():
    docs = render()
    assert {ns for *_, ns in grants(docs)} == {"default"}  # the Node's Events only
    assert not re.search(r"namespace: llm\b", yaml.safe_dump_all(docs))


def test_no_cluster_wide_grant_but_the_opt_in_node_condition_and_taint():
    assert "*" not in {ns for *_, ns in grants(render("remediate-values.yaml"))}
    wide = {g for g in grants(render("full-values.yaml")) if g[2] == "*"}
    assert wide == {("patch", "nodes/status", "*"), ("get", "nodes", "*"), ("patch", "nodes", "*")}


def test_the_taint_alone_grants_get_and_patch_nodes_and_reaches_the_config():
    docs = render("taint-values.yaml")
    assert {g for g in grants(docs) if g[2] == "*"} == {("get", "nodes", "*"), ("patch", "nodes", "*")}
    k = config_of(docs).kubernetes
    assert (k.taint_on_device_fault, k.taint_key, k.node_condition) == (True, "example.com/gpu-fault", False)


def test_readiness_gate_and_events_off_grant_neither():
    g = grants(render("no-events-values.yaml"))
    assert not {x for x in g if x[1] in ("pods/status", "events")}


def _template(docs: list[dict]) -> dict:
    return kind(docs, "DaemonSet")[0]["spec"]["template"]


def test_a_changed_config_value_changes_the_pod_template():
    before = _template(render("remediate-values.yaml"))
    after = _template(render("remediate-values.yaml", **{"config.interval": "2"}))
    assert before["metadata"]["annotations"]["checksum/config"] != after["metadata"]["annotations"]["checksum/config"]


def test_switching_mode_rolls_the_pods():
    a = _template(render("remediate-values.yaml"))
    b = _template(render("remediate-values.yaml", mode="observe"))
    assert a["metadata"]["annotations"]["checksum/config"] != b["metadata"]["annotations"]["checksum/config"]


def test_a_value_outside_the_config_leaves_the_checksum_alone():
    a = _template(render("remediate-values.yaml"))
    b = _template(render("remediate-values.yaml", **{"resources.limits.memory": "1Gi"}))
    assert a["metadata"]["annotations"]["checksum/config"] == b["metadata"]["annotations"]["checksum/config"]


def test_an_unknown_mode_is_refused():
    with pytest.raises(ToolFailed, match="value must be one of 'observe', 'remediate'"):  # values.schema.json
        helm_template(sets={"mode": "fix-everything"})


def test_a_metrics_port_the_config_does_not_listen_on_is_refused():
    with pytest.raises(ToolFailed, match="must listen on metricsPort 9500"):
        helm_template(sets={"metricsPort": "9500"})
    helm_template(sets={"metricsPort": "9500", "config.api.http": "0.0.0.0:9500"})


def test_monitoring_objects_render_when_enabled_and_match_their_crds():
    docs = render("full-values.yaml")
    assert {d["kind"] for d in split(docs)[1]} == {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
    assert not split(render())[1]


def test_the_prometheus_rule_is_the_rules_file():
    (rule,) = kind(render("full-values.yaml"), "PrometheusRule")
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules.yaml").read_text(encoding="utf-8"))
    assert rule["spec"]["groups"] == rules["groups"]


def test_the_dashboard_configmap_is_the_dashboard_file():
    (cm,) = [d for d in kind(render("full-values.yaml"), "ConfigMap") if "vllm-guardian.json" in d["data"]]
    shipped = json.loads((ROOT / "deploy" / "grafana" / "guardian-dashboard.json").read_text(encoding="utf-8"))
    assert json.loads(cm["data"]["vllm-guardian.json"]) == shipped
    assert cm["metadata"]["namespace"] == "monitoring" and cm["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_scheduling_values_reach_the_pod():
    spec = _template(render("full-values.yaml"))["spec"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["affinity"]["nodeAffinity"] and spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert not kind(render("full-values.yaml"), "PriorityClass")
    assert spec["containers"][0]["image"] == "registry.example.com/vllm-guardian:0.1.0"


# ------------------------------------------------------------------ TLS and basic auth (webConfig)
WEB_HASH = "$2b$10$" + "a" * 53
INLINE_TLS = {"webConfig.enabled": "true", "webConfig.tls.cert": "CERT-PEM", "webConfig.tls.key": "KEY-PEM"}


def web_secret(docs: list[dict]) -> dict:
    (secret,) = [d for d in kind(docs, "Secret") if d["metadata"]["name"].endswith("-web-config")]
    return secret


def mounts(docs: list[dict]) -> dict[str, str]:
    """mount path -> the Secret mounted there."""
    spec = _template(docs)["spec"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    return {m["mountPath"]: secrets[m["name"]] for m in spec["containers"][0]["volumeMounts"] if m["name"] in secrets}


def test_the_rendered_web_config_is_one_the_guardian_accepts_at_the_path_the_config_names():
    docs = render("tls-values.yaml")
    web = parse_web_config(yaml.safe_load(web_secret(docs)["stringData"]["web.yml"]))
    assert config_of(docs).api.web_config_file == "/etc/guardian-web/web.yml"
    assert web.tls_server_config is not None and web.tls_server_config.requires_client_cert
    assert (web.tls_server_config.min_version, sorted(web.basic_auth_users)) == ("TLS13", ["prometheus"])
    assert mounts(docs) == {
        "/etc/guardian-web": web_secret(docs)["metadata"]["name"],
        "/etc/guardian-tls": "vllm-guardian-tls",  # the existing Secret: cert_file, key_file, client_ca_file
    }
    tls = web.tls_server_config
    assert {tls.cert_file, tls.key_file, tls.client_ca_file} == {
        "/etc/guardian-tls/tls.crt",
        "/etc/guardian-tls/tls.key",
        "/etc/guardian-tls/ca.crt",
    }


def test_an_inline_certificate_goes_into_the_charts_own_secret():
    docs = render(**INLINE_TLS)
    data = web_secret(docs)["stringData"]
    web = parse_web_config(yaml.safe_load(data["web.yml"]))
    assert (data["tls.crt"].strip(), data["tls.key"].strip()) == ("CERT-PEM", "KEY-PEM")
    assert web.tls_server_config is not None and web.tls_server_config.cert_file == "/etc/guardian-web/tls.crt"
    assert list(mounts(docs)) == ["/etc/guardian-web"]


def test_the_monitors_scrape_with_https_and_the_given_tls_config_and_basic_auth():
    values = yaml.safe_load((CHART / "ci" / "tls-values.yaml").read_text())["webConfig"]["scrape"]
    for d in split(render("tls-values.yaml"))[1]:
        endpoint = (d["spec"].get("podMetricsEndpoints") or d["spec"]["endpoints"])[0]
        assert (endpoint["scheme"], endpoint["tlsConfig"], endpoint["basicAuth"]) == (
            "https",
            values["tlsConfig"],
            values["basicAuth"],
        )


def liveness(docs: list[dict]) -> dict:
    return _template(docs)["spec"]["containers"][0]["livenessProbe"]


@pytest.mark.parametrize(
    "sets, probe",
    [
        ({}, {"httpGet": {"path": "/healthz", "port": "metrics"}}),
        (INLINE_TLS, {"httpGet": {"path": "/healthz", "port": "metrics", "scheme": "HTTPS"}}),
        (
            {**INLINE_TLS, "webConfig.basicAuthUsers.prom": WEB_HASH},
            {"exec": {"command": ["guardian", "healthz", "--socket", "/var/lib/guardian/guardian.sock"]}},
        ),
        (
            {
                **INLINE_TLS,
                "webConfig.tls.clientCA": "CA-PEM",
                "webConfig.tls.clientAuthType": "RequireAndVerifyClientCert",
            },
            {"exec": {"command": ["guardian", "healthz", "--socket", "/var/lib/guardian/guardian.sock"]}},
        ),
    ],
    ids=["plain", "tls", "basic_auth", "client_certs"],
)
def test_the_liveness_probe_is_one_the_kubelet_can_pass(sets, probe):
    got = liveness(render(**sets))
    assert {k: v for k, v in got.items() if k in ("httpGet", "exec")} == probe


@pytest.mark.parametrize(
    "sets, message",
    [
        ({"webConfig.enabled": "true"}, "webConfig.tls: needs secretName"),
        ({**INLINE_TLS, "webConfig.tls.secretName": "s"}, "webConfig.tls: set secretName or cert and key, not both"),
        (
            {**INLINE_TLS, "webConfig.tls.clientAuthType": "RequireAndVerifyClientCert"},
            "webConfig.tls.clientCA: required with clientAuthType RequireAndVerifyClientCert",
        ),
        ({"webConfig.enabled": "true", "webConfig.tls.enabled": "false"}, "asks for neither TLS"),
        ({**INLINE_TLS, "podMonitor.enabled": "true"}, "webConfig.scrape.tlsConfig: required"),
        (
            {
                **INLINE_TLS,
                "webConfig.basicAuthUsers.prom": WEB_HASH,
                "webConfig.scrape.tlsConfig.insecureSkipVerify": "true",
                "serviceMonitor.enabled": "true",
            },
            "webConfig.scrape.basicAuth: required",
        ),
        ({**INLINE_TLS, "config.api.http": "null"}, "webConfig.enabled needs config.api.http"),
    ],
    ids=["no_certificate", "two_certificates", "no_client_ca", "nothing", "monitor_tls", "monitor_auth", "no_listener"],
)
def test_a_web_config_the_guardian_or_prometheus_could_not_use_is_refused(sets, message):
    with pytest.raises(ToolFailed, match=re.escape(message)):
        helm_template(sets=sets)


def test_without_web_config_nothing_of_it_is_rendered():
    docs = render()
    assert not [d for d in kind(docs, "Secret")] and config_of(docs).api.web_config_file is None
    assert mounts(docs) == {}


# ------------------------------------------------------------------ what reaches the guardian from outside the chart
def kubelet_secret_volume(root: Path, files: dict[str, str]) -> Path:
    """A Secret volume as the kubelet writes it: the files in a timestamped folder, ``..data`` a
    link to it, each key a link through ``..data``; mode 0400 (defaultMode 0400)."""
    stamped = root / "..2026_12_06_10_00_00.000000001"
    stamped.mkdir(parents=True)
    for key, text in files.items():
        (stamped / key).write_text(text)
        (stamped / key).chmod(0o400)
    (root / "..data").symlink_to(stamped.name)
    for key in files:
        (root / key).symlink_to(f"..data/{key}")
    return root


def secret_volume(docs: list[dict], mount_path: str) -> tuple[dict, dict]:
    """(the volume, the mount) of the guardian container at ``mount_path``."""
    spec = _template(docs)["spec"]
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == mount_path]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return volume, mount


def test_a_secret_held_trust_key_reaches_the_guardian_with_no_template_edits(tmp_path):
    from vllm_guardian.gates.trust import load_keys

    docs = render("secrets-values.yaml")
    volume, mount = secret_volume(docs, "/etc/guardian-trust")
    assert volume["secret"]["secretName"] == "guardian-trust" and volume["secret"]["defaultMode"] == 0o400
    assert mount["readOnly"] is True
    keys_file = config_of(docs).gates.trust.keys_file
    assert keys_file == "/etc/guardian-trust/keys"
    mounted = kubelet_secret_volume(tmp_path / "etc-guardian-trust", {"keys": "k1 " + "s" * 40 + "\n"})
    keys = load_keys(str(mounted / keys_file.rsplit("/", 1)[1]), None)
    assert keys.signer == "k1" and keys.secrets["k1"] == b"s" * 40


def test_the_redis_password_from_a_secret_reaches_the_config_as_a_file():
    docs = render("secrets-values.yaml")
    volume, _ = secret_volume(docs, "/etc/guardian-redis")
    assert volume["secret"] == {
        "secretName": "guardian-redis",
        "defaultMode": 0o400,
        "items": [{"key": "password", "path": "password"}],
    }
    assert config_of(docs).alerts.password_file == "/etc/guardian-redis/password"


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ({"trust.existingSecret": "t", "config.gates.trust.key_env": "K"}, "remove config.gates.trust.key_env"),
        ({"redis.passwordSecret.name": "r", "config.alerts.password_env": "P"}, "remove config.alerts.password_env"),
    ],
    ids=["trust-secret-and-key-env", "redis-secret-and-password-env"],
)
def test_a_secret_and_the_config_naming_another_source_is_refused(sets, message):
    with pytest.raises(ToolFailed, match=message):
        render(None, None, **sets)


def test_env_env_from_and_extra_volumes_reach_the_guardian_container():
    spec = _template(render("secrets-values.yaml"))["spec"]
    container = spec["containers"][0]
    assert {"name": "GUARDIAN_EXTRA", "value": "1"} in container["env"]
    assert container["env"][0]["name"] == "NODE_NAME"  # the chart's own come first
    assert container["envFrom"] == [{"secretRef": {"name": "guardian-env", "optional": True}}]
    assert {"name": "ca-bundle", "configMap": {"name": "guardian-ca", "optional": True}} in spec["volumes"]
    assert {"name": "ca-bundle", "mountPath": "/etc/guardian-ca", "readOnly": True} in container["volumeMounts"]


def test_an_image_digest_pins_the_image_instead_of_the_tag():
    image = _template(render("secrets-values.yaml"))["spec"]["containers"][0]["image"]
    assert image == "vllm-guardian@sha256:" + "0123456789abcdef" * 4


def test_two_releases_create_priority_classes_that_do_not_collide():
    names = []
    for release in ("guardian-a", "guardian-b"):
        docs = helm_template(release=release)
        (pc,) = kind(docs, "PriorityClass")
        assert _template(docs)["spec"]["priorityClassName"] == pc["metadata"]["name"]
        names.append(pc["metadata"]["name"])
    assert names == ["guardian-a-vllm-guardian-node-critical", "guardian-b-vllm-guardian-node-critical"]


def test_no_priority_class_at_all_when_told_so():
    docs = render(None, None, **{"priorityClass.create": "false"})
    assert not kind(docs, "PriorityClass") and "priorityClassName" not in _template(docs)["spec"]
