"""Every render of the Helm chart (the defaults and each value set of its ci/ folder) and every
kustomize overlay, applied server-side (``--dry-run=server``: the real server validates, admits and
defaults each object, and stores nothing) to a real kube-apiserver v1.20.2.

What 1.20 does not serve is named, never silently dropped: the node admission policies
(admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy, Kubernetes 1.30+). The Prometheus
Operator objects apply once their CRDs exist (here minimal ones that keep every field; their fields
are checked against the operator's types in tests/unit/test_helm_chart.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.real_kube import RealKube
from tools.k8s_render import CHART, helm_lint, helm_template, kustomize

ROOT = Path(__file__).resolve().parents[2]
VALUE_SETS = [None, *sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))]
OVERLAYS = sorted(p.name for p in (ROOT / "deploy" / "k8s" / "overlays").iterdir() if p.is_dir())
# newer than the real server: the guardian's own Node narrowed by an admission policy (1.30+)
NOT_SERVED_BY_1_20 = {
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
}
OPERATOR_KINDS = {"PodMonitor": "podmonitors", "ServiceMonitor": "servicemonitors", "PrometheusRule": "prometheusrules"}


def crd(kind: str, plural: str) -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


def served(kube: RealKube) -> set[tuple[str, str]]:
    """(apiVersion, kind) of every resource the server serves, from its discovery documents."""
    out = {("v1", r["kind"]) for r in kube.request("GET", "/api/v1").body["resources"]}
    for group in kube.request("GET", "/apis").body["groups"]:
        for version in group["versions"]:
            gv = version["groupVersion"]
            out |= {(gv, r["kind"]) for r in kube.request("GET", f"/apis/{gv}").body["resources"]}
    return out


@pytest.fixture(scope="module")
def cluster(kube):
    out = kube.apply([crd(kind, plural) for kind, plural in OPERATOR_KINDS.items()])
    assert out.returncode == 0, out.stderr
    for ns in ("guardian", "inference", "llm", "vllm-guardian", "monitoring"):
        kube.namespace(ns)
    for plural in OPERATOR_KINDS.values():  # the CRDs are established (kubectl fails otherwise)
        kube.kubectl("wait", "--for=condition=Established", f"crd/{plural}.monitoring.coreos.com")
    return kube, served(kube)


def applies(cluster, objects: list[dict]) -> list[tuple[str, str]]:
    """Dry-run server-side apply of what the server serves; the (apiVersion, kind) it does not."""
    kube, kinds = cluster
    for ns in {o["metadata"].get("namespace") for o in objects} - {None}:  # where the chart puts them
        kube.namespace(ns)
    skipped = sorted({(o["apiVersion"], o["kind"]) for o in objects if (o["apiVersion"], o["kind"]) not in kinds})
    out = kube.apply([o for o in objects if (o["apiVersion"], o["kind"]) in kinds], dry_run=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("serverside-applied (server dry run)") == len(objects) - sum(
        1 for o in objects if (o["apiVersion"], o["kind"]) not in kinds
    ), out.stdout
    return skipped


@pytest.mark.parametrize("values", VALUE_SETS, ids=lambda v: v or "defaults")
def test_every_chart_render_lints_strict_and_is_accepted_by_a_real_server(cluster, values):
    path = [CHART / "ci" / values] if values else []
    helm_lint(path[0] if path else None)
    skipped = applies(cluster, helm_template(path, namespace="guardian"))
    assert set(skipped) <= NOT_SERVED_BY_1_20, skipped


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_kustomize_overlay_is_accepted_by_a_real_server(cluster, overlay):
    skipped = applies(cluster, kustomize(ROOT / "deploy" / "k8s" / "overlays" / overlay))
    assert set(skipped) <= NOT_SERVED_BY_1_20, skipped
