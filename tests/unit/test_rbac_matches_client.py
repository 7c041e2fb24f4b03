"""The RBAC the overlays and the Helm chart grant is exactly what the Kubernetes client calls:
every client call is replayed against a recording API server, each request mapped to the (verb,
resource, namespace) the API server authorizes it as, and compared with the Roles and bindings
`kubectl kustomize` and `helm template` render."""

from __future__ import annotations

import ast
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import vllm_guardian.host.kube as kube
from vllm_guardian.host.kube import KubeClient, PodRef, list_node_pods
from tools.k8s_render import CHART, helm_template, kustomize

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ROOT / "deploy" / "k8s" / "overlays"
NS = "llm"  # the namespace the shipped RoleBindings grant (the example vLLM's)
UID = "3f8e2a1c-7b4d-4e9a-9c1f-2d6b8e0a5f71"
POD = PodRef(NS, "vllm-llama-0", UID)

# Every function of vllm_guardian/host/kube.py that talks to the API server, driven once.
DRIVERS = {
    "list_node_pods": lambda c: list_node_pods(c, NS, "vllm-llama-0", "app=vllm"),
    "find_pod": lambda c: c.find_pod(UID),
    "delete_pod": lambda c: c.delete_pod(POD, 30),
    "read_log": lambda c: c.read_log(NS, "vllm-llama-0", "vllm"),
    "evict_pod": lambda c: c.evict_pod(POD, 30),
    "patch_pod_condition": lambda c: c.patch_pod_condition(POD, {"type": "vllm-guardian.io/serving", "status": "True"}),
    "create_event": lambda c: c.create_event(NS, {"metadata": {"name": "e"}}),
    "patch_event": lambda c: c.patch_event(NS, "e", {"count": 2}),
    "node_event": lambda c: c.create_event("default", {"metadata": {"name": "n"}}),
    "node_event_repeat": lambda c: c.patch_event("default", "n", {"count": 2}),
    "patch_node_condition": lambda c: c.patch_node_condition("node-a", {"type": "VllmGuardianProblem"}),
    "read_node": lambda c: c.read_node("node-a"),
    "set_node_taints": lambda c: c.set_node_taints("node-a", "7", []),
    "eviction_version": lambda c: c.eviction_version(),
}
# Discovery documents: non-resource URLs every authenticated user may read (the cluster's own
# system:discovery role), so no Role of ours grants them (tests/k8s_real shows a real server agree).
DISCOVERY = {"/apis/policy"}
# Drivers that call one method with other arguments (the Node's Events).
ALIASES = {"node_event": "create_event", "node_event_repeat": "patch_event"}
# Calls the shipped RBAC deliberately does not grant, and why. An entry whose call no longer
# needs it fails the test: remove it then.
KNOWN_GAPS = {
    "find_pod": {("list", "pods", "*")},  # lists pods cluster-wide until it lists per namespace
}
# Which calls only remediation may make; which only a config option enables (kubernetes.pod_removal
# delete; kubernetes.node_condition; kubernetes.taint_on_device_fault), granted by neither overlay
# nor the chart's defaults.
REMEDIATE_ONLY = {("create", "pods/eviction"), ("delete", "pods")}
NODE_TAINT = {("get", "nodes"), ("patch", "nodes")}
OPT_IN = {("delete", "pods"), ("patch", "nodes/status")} | NODE_TAINT


def authorization(method: str, path: str) -> tuple[str, str, str]:
    """(verb, resource[/subresource], namespace or '*') as the API server's authorizer sees a request."""
    parts = [p for p in urlsplit(path).path.split("/") if p]
    assert parts[:2] == ["api", "v1"], path
    rest = parts[2:]
    namespace = "*"
    if rest[:1] == ["namespaces"]:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0]
    named = len(rest) >= 2
    if len(rest) == 3:
        resource = f"{rest[0]}/{rest[2]}"
    verb = {"GET": "get" if named else "list", "DELETE": "delete", "POST": "create", "PATCH": "patch", "PUT": "update"}[
        method
    ]
    return verb, resource, namespace


class Recorder(BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *a):
        pass

    def _answer(self):
        self.seen.append((self.command, self.path))
        if self.path.split("?")[0].endswith("/log"):
            data, ctype = b"engine crashed\n", "text/plain"
        elif self.path in DISCOVERY:
            data, ctype = (
                json.dumps({"kind": "APIGroup", "versions": [{"groupVersion": "policy/v1"}]}).encode(),
                ("application/json"),
            )
        else:
            data, ctype = (
                json.dumps({"items": [{"metadata": {"namespace": NS, "name": "vllm-llama-0", "uid": UID}}]}).encode(),
                "application/json",
            )
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = _answer

    def _with_body(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer()

    do_DELETE = do_POST = do_PATCH = _with_body


@pytest.fixture(scope="module")
def needs() -> dict[str, set[tuple[str, str, str]]]:
    """driver name -> the authorizations its requests need."""
    Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    client = KubeClient(f"http://127.0.0.1:{server.server_address[1]}", "t", None, "node-a", plain_http_loopback=True)
    out = {}
    try:
        for name, drive in DRIVERS.items():
            Recorder.seen = []
            drive(client)
            out[name] = {authorization(m, p) for m, p in Recorder.seen if p not in DISCOVERY}
    finally:
        server.shutdown()
        server.server_close()
    return out


def api_calling_functions() -> set[str]:
    """Functions and methods of kube.py that send a request (``_call``, ``_list``, ``_request``, ``_open``)."""
    tree = ast.parse(Path(kube.__file__).read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call):
                    fn = sub.func
                    name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                    if name in ("_call", "_open", "_request", "_list"):
                        found.add(node.name)
    return found


def granted(overlay: str) -> set[tuple[str, str, str]]:
    return granted_by(kustomize(OVERLAYS / overlay))


def granted_by(docs: list[dict]) -> set[tuple[str, str, str]]:
    roles = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
    }
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")
    subject = {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}
    out = set()
    for b in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if subject not in b["subjects"]:
            continue
        ref = b["roleRef"]
        ns = b["metadata"].get("namespace", "") if b["kind"] == "RoleBinding" else "*"
        role = roles[(ref["kind"], b["metadata"].get("namespace", "") if ref["kind"] == "Role" else "", ref["name"])]
        for rule in role["rules"]:
            assert rule["apiGroups"] == [""], rule
            out |= {(v, r, ns) for v in rule["verbs"] for r in rule["resources"]}
    return out


def test_every_api_calling_function_is_driven_here():
    assert api_calling_functions() == {ALIASES.get(name, name) for name in DRIVERS}


def test_the_known_gaps_are_still_real(needs):
    for name, gap in KNOWN_GAPS.items():
        assert gap <= needs[name], f"{name} no longer needs {gap - needs[name]}: remove it from KNOWN_GAPS"


def _required(needs) -> set[tuple[str, str, str]]:
    return {n for name, got in needs.items() for n in got - KNOWN_GAPS.get(name, set())}


def _node_events(g: set) -> set:
    return {n for n in g if n[2] == "default"}


def test_the_remediate_overlay_grants_exactly_what_the_client_calls(needs):
    assert granted("remediate") == {n for n in _required(needs) if n[:2] not in OPT_IN}


def test_the_observe_only_overlay_grants_the_same_minus_evicting(needs):
    required = {n for n in _required(needs) if n[:2] not in REMEDIATE_ONLY | OPT_IN}
    assert granted("observe-only") == required


CHART_CASES = {
    "remediate-values.yaml": lambda n: n[:2] not in OPT_IN,
    "observe-values.yaml": lambda n: n[:2] not in REMEDIATE_ONLY | OPT_IN,
    "full-values.yaml": lambda n: n[:2] != ("create", "pods/eviction"),  # pod_removal delete, NodeCondition, taint
    "taint-values.yaml": lambda n: n[:2] not in REMEDIATE_ONLY | OPT_IN - NODE_TAINT,  # observe + the taint
}


@pytest.mark.parametrize("values", sorted(CHART_CASES))
def test_the_chart_grants_exactly_what_the_client_calls(needs, values):
    """In the chart's namespaces (the test namespace stands for each of them)."""
    docs = helm_template([CHART / "ci" / values])
    namespaces = {d["metadata"]["namespace"] for d in docs if d["kind"] == "RoleBinding"} - {"default"}
    got = {(v, r, NS if ns in namespaces else ns) for v, r, ns in granted_by(docs)}
    assert got == {n for n in _required(needs) if CHART_CASES[values](n)}


def test_the_optional_node_taint_component_grants_exactly_what_tainting_calls(needs):
    docs = kustomize(ROOT / "deploy" / "k8s" / "optional" / "node-taint")
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "vllm-guardian", "namespace": "guardian"}]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    got = {(v, r, "*") for rule in role["rules"] for v in rule["verbs"] for r in rule["resources"]}
    assert got == needs["read_node"] | needs["set_node_taints"] == {(v, r, "*") for v, r in NODE_TAINT}


def test_the_optional_node_condition_component_grants_exactly_what_the_condition_calls(needs):
    docs = kustomize(ROOT / "deploy" / "k8s" / "optional" / "node-condition")
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "vllm-guardian", "namespace": "guardian"}]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    got = {(v, r, "*") for rule in role["rules"] for v in rule["verbs"] for r in rule["resources"]}
    assert got == needs["patch_node_condition"] == {("patch", "nodes/status", "*")}


def test_nothing_about_pods_is_granted_cluster_wide():
    for overlay in ("observe-only", "remediate"):
        g = granted(overlay)
        assert all(ns == NS for _, _, ns in g - _node_events(g)), overlay
        assert {r for _, r, _ in _node_events(g)} == {"events"}


@pytest.mark.parametrize(
    "method, path, expected",
    [
        ("GET", "/api/v1/namespaces/llm/pods?fieldSelector=x", ("list", "pods", "llm")),
        ("GET", "/api/v1/pods?fieldSelector=x", ("list", "pods", "*")),
        ("GET", "/api/v1/namespaces/llm/pods/p", ("get", "pods", "llm")),
        ("DELETE", "/api/v1/namespaces/llm/pods/p", ("delete", "pods", "llm")),
        ("GET", "/api/v1/namespaces/llm/pods/p/log?previous=true", ("get", "pods/log", "llm")),
        ("POST", "/api/v1/namespaces/llm/pods/p/eviction", ("create", "pods/eviction", "llm")),
        ("PATCH", "/api/v1/namespaces/llm/pods/p/status", ("patch", "pods/status", "llm")),
        ("POST", "/api/v1/namespaces/llm/events", ("create", "events", "llm")),
        ("PATCH", "/api/v1/namespaces/llm/events/e", ("patch", "events", "llm")),
        ("PATCH", "/api/v1/nodes/n/status", ("patch", "nodes/status", "*")),
        ("GET", "/api/v1/nodes/n", ("get", "nodes", "*")),
        ("PATCH", "/api/v1/nodes/n", ("patch", "nodes", "*")),
    ],
)
def test_requests_map_to_the_authorization_the_api_server_checks(method, path, expected):
    assert authorization(method, path) == expected
