"""The Kubernetes overlays render with the real ``kubectl kustomize`` (tools/k8s_render.py), and
what they render is accepted by the API schemas of every Kubernetes version supported, in strict
mode; the Prometheus Operator objects match the fields of their CRDs; a changed config renames the
generated ConfigMap, so the DaemonSet's pod template changes and the pods roll."""

from __future__ import annotations

import shutil
from pathlib import Path

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from tests.support.k8s_schemas import VERSIONS, split, validate

from tools.k8s_render import kustomize
from vllm_guardian.config.loader import parse_config

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("observe-only", "remediate")
CONFIG_OF = {"observe-only": "kubernetes-observe-only.yaml", "remediate": "kubernetes.yaml"}
_RENDERED: dict[str, list[dict]] = {}


def rendered(overlay: str) -> list[dict]:
    if overlay not in _RENDERED:
        _RENDERED[overlay] = kustomize(K8S / "overlays" / overlay)
    return [dict(d) for d in _RENDERED[overlay]]


def _id(d: dict) -> str:
    return f"{d['kind']}/{d['metadata']['name']}"


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", VERSIONS)
def test_rendered_objects_are_valid_for_each_supported_version(overlay, version):
    for doc in rendered(overlay):
        validate(doc, version)


@pytest.mark.parametrize("component", ["node-taint", "node-condition"])
@pytest.mark.parametrize("version", [v for v in VERSIONS if tuple(map(int, v.split("."))) >= (1, 30)])
def test_the_optional_node_components_are_valid_from_1_30(version, component):
    """Their admission policy (admissionregistration.k8s.io/v1) exists from Kubernetes 1.30 on."""
    docs = kustomize(K8S / "optional" / component)
    assert {d["kind"] for d in docs} == {
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for doc in docs:
        validate(doc, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_example_vllm_server_is_valid_for_each_supported_version(version):
    for doc in yaml.safe_load_all((K8S / "example-vllm.yaml").read_text(encoding="utf-8")):
        if doc:
            validate(doc, version)


def test_strict_validation_rejects_an_unknown_field():
    """The check above has teeth: a misspelt field is refused."""
    ds = next(d for d in rendered("remediate") if d["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, VERSIONS[-1], strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_generated_config_map_carries_the_label_the_prune_recipe_selects(overlay):
    """docs/operate.md prunes old generated ConfigMaps with -l app.kubernetes.io/name=vllm-guardian."""
    (cm,) = [d for d in kustomize(K8S / "overlays" / overlay) if d["kind"] == "ConfigMap"]
    assert cm["metadata"]["name"].startswith("vllm-guardian-config-")  # the hash suffix: a new name per change
    assert cm["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm-guardian"
    assert "-l app.kubernetes.io/name=vllm-guardian" in (ROOT / "docs" / "operate.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_prometheus_operator_objects_are_rendered(overlay):
    assert {d["kind"] for d in split(rendered(overlay))[1]} == {"PodMonitor", "PrometheusRule"}


def test_the_prometheus_rule_is_the_rules_file():
    rule = yaml.safe_load((K8S / "monitoring" / "prometheusrule.yaml").read_text(encoding="utf-8"))
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules.yaml").read_text(encoding="utf-8"))
    assert rule["spec"]["groups"] == rules["groups"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_config_is_its_example_and_valid(overlay):
    cm = next(d for d in rendered(overlay) if d["kind"] == "ConfigMap")
    example = (ROOT / "configs" / "examples" / CONFIG_OF[overlay]).read_text(encoding="utf-8")
    assert cm["data"]["guardian.yaml"] == example
    cfg = parse_config(yaml.safe_load(example))
    if overlay == "observe-only":
        assert cfg.policy.dry_run and all(t.restart.mode != "kubernetes" for t in cfg.targets)
    else:
        assert not cfg.policy.dry_run and any(t.restart.mode == "kubernetes" for t in cfg.targets)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_node_name_comes_from_the_downward_api(overlay):
    ds = next(d for d in rendered(overlay) if d["kind"] == "DaemonSet")
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def _pod_template(docs: list[dict]) -> dict:
    return next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]


def test_a_changed_config_value_changes_the_rendered_pod_template(tmp_path):
    tree = tmp_path / "k8s"
    shutil.copytree(K8S, tree)
    before = kustomize(tree / "overlays" / "remediate")
    config = tree / "overlays" / "remediate" / "guardian.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("ready_timeout: 900", "ready_timeout: 901"))
    after = kustomize(tree / "overlays" / "remediate")
    assert _pod_template(before) != _pod_template(after)
    cm_name = next(d for d in after if d["kind"] == "ConfigMap")["metadata"]["name"]
    volumes = _pod_template(after)["spec"]["volumes"]
    assert next(v for v in volumes if "configMap" in v)["configMap"]["name"] == cm_name
