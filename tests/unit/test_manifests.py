"""The Kubernetes overlays render, and what they render is accepted by the API schemas of every
Kubernetes version supported, in strict mode (an unknown field is an error, as ``kubectl apply
--validate=strict`` makes it); the Prometheus Operator objects match the fields of their CRDs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from vllm_guardian.config.loader import parse_config
from tools.kustomize_subset import RenderError, render

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("observe-only", "remediate")
CONFIG_OF = {"observe-only": "kubernetes-observe-only.yaml", "remediate": "kubernetes.yaml"}
# Kubernetes versions supported: the oldest still in common managed offerings to the newest.
VERSIONS = ("1.29", "1.31", "1.33", "1.35")


def rendered(overlay: str) -> list[dict]:
    return render(K8S / "overlays" / overlay)


def builtin_and_crd(overlay: str) -> tuple[list[dict], list[dict]]:
    docs = rendered(overlay)
    crd = [d for d in docs if d["apiVersion"].startswith("monitoring.coreos.com/")]
    return [d for d in docs if d not in crd], crd


CASES = [
    (o, v, f"{d['kind']}/{d['metadata']['name']}") for o in OVERLAYS for v in VERSIONS for d in builtin_and_crd(o)[0]
]


@pytest.mark.parametrize("overlay, version, obj", CASES)
def test_rendered_objects_are_valid_for_each_supported_version(overlay, version, obj):
    doc = next(d for d in builtin_and_crd(overlay)[0] if f"{d['kind']}/{d['metadata']['name']}" == obj)
    kubernetes_validate.validate(doc, version, strict=True)


def test_strict_validation_rejects_an_unknown_field():
    """The check above has teeth: a misspelt field is refused."""
    ds = next(d for d in rendered("remediate") if d["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, VERSIONS[-1], strict=True)


# The fields of monitoring.coreos.com/v1 the shipped objects use, with their CRD's types;
# additionalProperties false, so a field the operator does not know fails here.
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {"type": "array", "items": {"type": "string"}},
        "targetLabel": {"type": "string"},
        "action": {"type": "string"},
        "regex": {"type": "string"},
        "replacement": {"type": "string"},
    },
}
_META = {"type": "object", "required": ["name", "namespace"]}
CRD_SCHEMAS = {
    "PodMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PodMonitor"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["selector", "podMetricsEndpoints"],
                "additionalProperties": False,
                "properties": {
                    "selector": {"type": "object", "properties": {"matchLabels": {"type": "object"}}},
                    "namespaceSelector": {"type": "object"},
                    "podMetricsEndpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string"},
                                "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                                "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                                "relabelings": {"type": "array", "items": _RELABEL},
                            },
                        },
                    },
                },
            },
        },
    },
    "PrometheusRule": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PrometheusRule"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["groups"],
                "additionalProperties": False,
                "properties": {
                    "groups": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["name", "rules"],
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string"},
                                "interval": {"type": "string"},
                                "rules": {
                                    "type": "array",
                                    "minItems": 1,
                                    "items": {
                                        "type": "object",
                                        "required": ["expr"],
                                        "additionalProperties": False,
                                        "properties": {
                                            "alert": {"type": "string"},
                                            "record": {"type": "string"},
                                            "expr": {"type": "string"},
                                            "for": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                                            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                            "annotations": {
                                                "type": "object",
                                                "additionalProperties": {"type": "string"},
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            },
        },
    },
}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_prometheus_operator_objects_match_their_crds(overlay):
    _, crd = builtin_and_crd(overlay)
    assert {d["kind"] for d in crd} == {"PodMonitor", "PrometheusRule"}
    for doc in crd:
        jsonschema.validate(doc, CRD_SCHEMAS[doc["kind"]])


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


def test_the_renderer_refuses_what_it_does_not_implement(tmp_path):
    (tmp_path / "kustomization.yaml").write_text("resources: []\npatches: []\n")
    with pytest.raises(RenderError, match="patches"):
        render(tmp_path)


def _by_id(docs: list[dict]) -> dict:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}


KUBECTL = shutil.which("kubectl")


@pytest.mark.skipif(
    KUBECTL is None,
    reason="kubectl (with its built-in kustomize) is not installed here; it is on neither PyPI nor this Debian",
)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_subset_renderer_agrees_with_kubectl_kustomize(overlay):
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(K8S / "overlays" / overlay)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    real = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert _by_id(real) == _by_id(rendered(overlay))
