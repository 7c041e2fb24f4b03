"""The admission policies that narrow the guardian's Node grants (deploy/helm/vllm-guardian/templates/
node-policy.yaml; deploy/k8s/optional/node-taint/node-policy.yaml): RBAC lets every guardian pod patch
every Node; the policies let it change only the Node its pod runs on (the node name of its
service-account token) and there only its own taint or its own condition.

Rendered with the real helm and kubectl (tools/k8s_render.py), then evaluated as the API server
would (failurePolicy Fail: an error denies; matchConditions first; then the variables, then each
validation) with cel-python, a CEL implementation of the language the API server runs, against the
Node changes the guardian's own code makes (``node_taint``, the publisher's condition) and the
ones it must never make. Without an API server this is as close as a test gets; the CEL text is
asserted too.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import pytest

from tools.k8s_render import CHART, helm_template, kustomize
from vllm_guardian.surface import node_taint
from vllm_guardian.surface.kube_publisher import NODE_CONDITION

ROOT = Path(__file__).resolve().parents[2]
NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
DEFAULT_KEY = "vllm-guardian.io/accel-fault"
_ENV = celpy.Environment()


# ---------------------------------------------------------------- the policies as shipped
def _policies(docs: list[dict]) -> dict[str, dict]:
    """resource ("nodes" | "nodes/status") -> the policy that checks it."""
    out = {}
    for d in docs:
        if d["kind"] == "ValidatingAdmissionPolicy":
            (rule,) = d["spec"]["matchConstraints"]["resourceRules"]
            (resource,) = rule["resources"]
            out[resource] = d
    return out


CHART_DOCS = helm_template([CHART / "ci" / "full-values.yaml"])
CHART_USER = "system:serviceaccount:guardian:vllm-guardian"
KUSTOMIZE_DOCS = kustomize(ROOT / "deploy" / "k8s" / "optional" / "node-taint")
KUSTOMIZE_USER = "system:serviceaccount:guardian:vllm-guardian"
KUSTOMIZE_CONDITION_DOCS = kustomize(ROOT / "deploy" / "k8s" / "optional" / "node-condition")
SHIPPED = {
    "chart nodes": (_policies(CHART_DOCS)["nodes"], CHART_USER),
    "chart nodes/status": (_policies(CHART_DOCS)["nodes/status"], CHART_USER),
    "kustomize nodes": (_policies(KUSTOMIZE_DOCS)["nodes"], KUSTOMIZE_USER),
    "kustomize nodes/status": (_policies(KUSTOMIZE_CONDITION_DOCS)["nodes/status"], KUSTOMIZE_USER),
}


# ---------------------------------------------------------------- an admission, evaluated
def _eval(expr: str, activation: dict[str, Any]) -> Any:
    program = _ENV.program(_ENV.compile(expr))
    result = program.evaluate(activation)
    if isinstance(result, Exception):
        raise result
    return result


def admit(policy: dict, user: str, old: dict, new: dict, *, claims: list[str] | None, resource: str) -> str | None:
    """None when the API server admits the update, else the message it denies it with."""
    spec = policy["spec"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    if resource not in rule["resources"]:
        return None  # another resource: the policy is not asked
    extra = {NODE_NAME_CLAIM: claims} if claims is not None else {}
    request = {"operation": "UPDATE", "userInfo": {"username": user, "groups": [], "extra": extra}}
    base = {"request": request, "object": new, "oldObject": old}
    activation = {k: celpy.json_to_cel(v) for k, v in base.items()}
    try:
        for cond in spec.get("matchConditions", ()):
            if not _eval(cond["expression"], activation):
                return None  # not the guardian: the policy does not apply
        variables = celpy.celtypes.MapType({})
        activation["variables"] = variables  # each variable sees the ones before it
        for var in spec.get("variables", ()):
            variables[celpy.celtypes.StringType(var["name"])] = _eval(var["expression"], activation)
        for check in spec["validations"]:
            if not _eval(check["expression"], activation):
                return check["message"]
    except Exception as e:  # noqa: BLE001 - failurePolicy Fail: an expression that errs denies
        assert spec["failurePolicy"] == "Fail"
        return f"error: {type(e).__name__}: {e}"
    return None


# ---------------------------------------------------------------- Nodes and changes
def node(name: str = "node-a") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": "41",
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {
            "podCIDR": "10.244.1.0/24",
            "podCIDRs": ["10.244.1.0/24"],
            "providerID": f"gce://p/z/{name}",
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": {"cpu": "96", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "95", "nvidia.com/gpu": "8"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kubeletVersion": "v1.33.1", "machineID": "m"},
        },
    }


def tainted(n: dict, key: str) -> dict:
    out = copy.deepcopy(n)
    new = node_taint.with_taint(out["spec"].get("taints") or [], key)  # what the guardian writes
    assert new is not None
    out["spec"]["taints"] = new
    return out


def untainted(n: dict, key: str) -> dict:
    out = copy.deepcopy(n)
    new = node_taint.without_taint(out["spec"]["taints"], key)
    assert new is not None
    out["spec"]["taints"] = new
    return out


def changed(n: dict, edit) -> dict:
    out = copy.deepcopy(n)
    edit(out)
    return out


def with_condition(n: dict, ctype: str, status: str) -> dict:
    """A strategic-merge patch of one condition by type, as the publisher sends it."""
    out = copy.deepcopy(n)
    conds = [c for c in out["status"]["conditions"] if c["type"] != ctype]
    out["status"]["conditions"] = conds + [{"type": ctype, "status": status, "reason": "NodeAnomaly"}]
    return out


OTHER_USER = "system:node:node-a"  # the kubelet: not the guardian, the policy does not apply

# (why, old Node, new Node, claims, user or None for the guardian's, admitted?)
TAINT_CASES = [
    ("adds its own taint to its own Node", node(), tainted(node(), DEFAULT_KEY), ["node-a"], None, True),
    (
        "removes its own taint from its own Node",
        tainted(node(), DEFAULT_KEY),
        untainted(tainted(node(), DEFAULT_KEY), DEFAULT_KEY),
        ["node-a"],
        None,
        True,
    ),
    ("taints another Node", node("node-b"), tainted(node("node-b"), DEFAULT_KEY), ["node-a"], None, False),
    ("has a token without a node name", node(), tainted(node(), DEFAULT_KEY), None, None, False),
    ("adds another taint key", node(), tainted(node(), "example.com/evil"), ["node-a"], None, False),
    (
        "removes an operator's taint",
        node(),
        changed(node(), lambda n: n["spec"].update(taints=[])),
        ["node-a"],
        None,
        False,
    ),
    (
        "adds its key with another effect",
        node(),
        changed(node(), lambda n: n["spec"]["taints"].append({"key": DEFAULT_KEY, "effect": "NoExecute"})),
        ["node-a"],
        None,
        False,
    ),
    (
        "removes an operator's taint under its own key",
        changed(
            node(), lambda n: n["spec"]["taints"].append({"key": DEFAULT_KEY, "value": "ops", "effect": "NoSchedule"})
        ),
        node(),
        ["node-a"],
        None,
        False,
    ),
    (
        "changes a label beside its taint",
        node(),
        changed(
            tainted(node(), DEFAULT_KEY), lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.present": "false"})
        ),
        ["node-a"],
        None,
        False,
    ),
    (
        "cordons the Node",
        node(),
        changed(node(), lambda n: n["spec"].update(unschedulable=True)),
        ["node-a"],
        None,
        False,
    ),
    (
        "changes the provider id",
        node(),
        changed(node(), lambda n: n["spec"].update(providerID="gce://p/z/other")),
        ["node-a"],
        None,
        False,
    ),
    ("is not the guardian (the kubelet)", node(), tainted(node(), "example.com/evil"), None, OTHER_USER, True),
]

CONDITION_CASES = [
    (
        "sets its own condition on its own Node",
        node(),
        with_condition(node(), NODE_CONDITION, "True"),
        ["node-a"],
        None,
        True,
    ),
    (
        "clears its own condition",
        with_condition(node(), NODE_CONDITION, "True"),
        with_condition(node(), NODE_CONDITION, "False"),
        ["node-a"],
        None,
        True,
    ),
    (
        "sets it on another Node",
        node("node-b"),
        with_condition(node("node-b"), NODE_CONDITION, "True"),
        ["node-a"],
        None,
        False,
    ),
    ("has a token without a node name", node(), with_condition(node(), NODE_CONDITION, "True"), None, None, False),
    ("sets another condition (Ready)", node(), with_condition(node(), "Ready", "False"), ["node-a"], None, False),
    (
        "changes what the Node can allocate",
        node(),
        changed(node(), lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "64"})),
        ["node-a"],
        None,
        False,
    ),
    (
        "changes the kubelet's endpoint",
        node(),
        changed(node(), lambda n: n["status"]["daemonEndpoints"]["kubeletEndpoint"].update(Port=1)),
        ["node-a"],
        None,
        False,
    ),
    (
        "changes an address",
        node(),
        changed(node(), lambda n: n["status"]["addresses"][0].update(address="10.9.9.9")),
        ["node-a"],
        None,
        False,
    ),
    (
        "changes a label through the status",
        node(),
        changed(with_condition(node(), NODE_CONDITION, "True"), lambda n: n["metadata"]["labels"].update(x="y")),
        ["node-a"],
        None,
        False,
    ),
    ("is not the guardian (the kubelet)", node(), with_condition(node(), "Ready", "False"), None, OTHER_USER, True),
]


@pytest.mark.parametrize("shipped", ["chart nodes", "kustomize nodes"])
@pytest.mark.parametrize("why, old, new, claims, user, admitted", TAINT_CASES, ids=[c[0] for c in TAINT_CASES])
def test_the_guardian_may_change_only_its_own_taint_on_its_own_node(shipped, why, old, new, claims, user, admitted):
    policy, guardian = SHIPPED[shipped]
    denied = admit(policy, user or guardian, old, new, claims=claims, resource="nodes")
    assert (denied is None) is admitted, f"{why}: {denied}"
    if not admitted:
        assert denied and not denied.startswith("error"), denied  # denied by a rule, not by an error


@pytest.mark.parametrize("why, old, new, claims, user, admitted", CONDITION_CASES, ids=[c[0] for c in CONDITION_CASES])
def test_the_guardian_may_set_only_its_own_condition_on_its_own_node(why, old, new, claims, user, admitted):
    policy, guardian = SHIPPED["chart nodes/status"]
    denied = admit(policy, user or guardian, old, new, claims=claims, resource="nodes/status")
    assert (denied is None) is admitted, f"{why}: {denied}"
    if not admitted:
        assert denied and not denied.startswith("error"), denied


def test_the_policies_check_updates_of_nodes_and_their_status_by_the_guardian_only_and_deny():
    docs = CHART_DOCS
    policies = _policies(docs)
    assert set(policies) == {"nodes", "nodes/status"}
    for p in policies.values():
        assert p["apiVersion"] == "admissionregistration.k8s.io/v1" and p["spec"]["failurePolicy"] == "Fail"
        assert p["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["UPDATE"]
        (cond,) = p["spec"]["matchConditions"]
        assert cond["expression"] == f"request.userInfo.username == '{CHART_USER}'"
        own = next(v for v in p["spec"]["variables"] if v["name"] == "ownNode")["expression"]
        assert f"request.userInfo.extra['{NODE_NAME_CLAIM}'].exists(n, n == object.metadata.name)" in own
    bindings = {d["spec"]["policyName"]: d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert set(bindings) == {p["metadata"]["name"] for p in policies.values()}
    assert all(
        b["spec"]["validationActions"] == ["Deny"] and "matchResources" not in b["spec"] for b in bindings.values()
    )


def test_the_taint_policy_names_the_configured_key():
    docs = helm_template([CHART / "ci" / "taint-values.yaml"])
    policies = _policies(docs)
    assert set(policies) == {"nodes"}  # no NodeCondition asked: no status policy
    text = str(policies["nodes"]["spec"]["variables"])
    assert "t.key == 'example.com/gpu-fault'" in text and DEFAULT_KEY not in text


@pytest.mark.parametrize("values", ["observe-values.yaml", "remediate-values.yaml", "no-events-values.yaml", None])
def test_no_node_grant_no_policy(values):
    docs = helm_template([CHART / "ci" / values] if values else [])
    assert not [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]


def test_the_policy_can_be_left_out_and_then_the_grant_stands_alone():
    docs = helm_template([CHART / "ci" / "full-values.yaml"], {"nodeAdmissionPolicy": "false"})
    assert not [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]
    assert [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("node-taint")]


def test_the_kustomize_taint_policy_is_the_charts():
    """One policy, two renderings: the same spec once names and the service account are aligned."""
    chart = copy.deepcopy(_policies(CHART_DOCS)["nodes"]["spec"])
    shipped = copy.deepcopy(_policies(KUSTOMIZE_DOCS)["nodes"]["spec"])
    assert chart == shipped
