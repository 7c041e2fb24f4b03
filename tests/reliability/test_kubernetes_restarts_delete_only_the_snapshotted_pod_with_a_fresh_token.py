"""Faults 1, 2 and 20 (Kubernetes mode): the pod to delete is the one the snapshotted API server
ran in, recorded when the sequence began, never whatever pod a reused pid belongs to later; pods
are listed per namespace with a node field selector (what per-namespace RBAC allows); the
projected service-account token is read again for every call (it rotates)."""

from __future__ import annotations

import io
import json

from vllm_guardian.host.kube import KubeClient
from vllm_guardian.testing.fake_control import FakeControl
from vllm_guardian.testing.fake_proc import FakeProcTree

from tests.support.remediation_world import API, ENGINE, World  # the remediation world of the unit tier

UID_A = "3f8e2a1c-7b4d-4e9a-9c1f-2d6b8e0a5f71"
UID_B = "99999999-7b4d-4e9a-9c1f-2d6b8e0a5f71"


class Api:
    """The opener seam of KubeClient: this node's pods, every request recorded."""

    def __init__(self, pods):
        self.pods = pods
        self.requests = []

    def __call__(self, req, timeout):
        self.requests.append(
            (
                req.get_method(),
                req.full_url,
                req.get_header("Authorization"),
                json.loads(req.data) if req.data else None,
            )
        )
        if req.full_url.endswith("/apis/policy"):  # the Eviction version, asked once
            return io.BytesIO(json.dumps({"kind": "APIGroup", "versions": [{"groupVersion": "policy/v1"}]}).encode())
        items = [
            {"metadata": {"namespace": ns, "name": name, "uid": uid}, "spec": {"nodeName": "gpu-node-17"}}
            for ns, name, uid in self.pods
        ]
        return io.BytesIO(json.dumps({"items": items}).encode())


def world(tmp_path, api):
    proc = FakeProcTree(tmp_path / "proc")
    proc.add_process(API.pid, 1, ("python3", "-m", "vllm.entrypoints.openai.api_server"), starttime=API.starttime)
    proc.write(f"{API.pid}/cgroup", f"0::/kubepods/burstable/pod{UID_A}/abc\n".encode())
    w = World(
        tmp_path / "state",
        restart={"mode": "kubernetes", "stop_timeout": 10, "namespace": "llm"},
        control=FakeControl({API, ENGINE}),
    )
    w.rem = w.new_remediator(
        kube=KubeClient("https://k8s", "tok", None, "gpu-node-17", opener=api), procfs=proc.procfs()
    )
    return w, proc


def deletes(api):
    """The pods removed (evicted, or deleted), by URL of the pod and the UID precondition."""
    return [
        (url.removesuffix("/eviction"), body["deleteOptions"]["preconditions"]["uid"])
        for method, url, _, body in api.requests
        if method == "POST" and url.endswith("/eviction")
    ] + [(url, body["preconditions"]["uid"]) for method, url, _, body in api.requests if method == "DELETE"]


def test_a_pid_reused_by_another_pods_process_never_gets_that_pod_deleted(tmp_path):
    api = Api([("llm", "vllm-llama-0", UID_A), ("llm", "vllm-OTHER-7", UID_B)])
    w, proc = world(tmp_path, api)
    assert w.consider(w.open()) == "started"
    # the engine dies; pid 100 is reused by a process of another pod
    proc.remove(API.pid)
    proc.add_process(API.pid, 1, ("python3", "other.py"), starttime=777)
    proc.write(f"{API.pid}/cgroup", f"0::/kubepods/burstable/pod{UID_B}/def\n".encode())
    w.step(1, n=7)
    assert all("vllm-OTHER-7" not in url for url, _ in deletes(api))
    assert deletes(api) == [("https://k8s/api/v1/namespaces/llm/pods/vllm-llama-0", UID_A)]


def test_pods_are_listed_in_the_targets_namespace_on_this_node_only(tmp_path):
    api = Api([("llm", "vllm-llama-0", UID_A)])
    w, _ = world(tmp_path, api)
    w.consider(w.open())
    w.step(1, n=7)
    gets = [url for method, url, _, _ in api.requests if method == "GET" and "/pods" in url]
    assert gets and all(
        u == "https://k8s/api/v1/namespaces/llm/pods?fieldSelector=spec.nodeName%3Dgpu-node-17&limit=500" for u in gets
    )


def test_the_service_account_token_is_read_again_for_every_call(tmp_path):
    token = tmp_path / "token"
    token.write_text("first\n")
    api = Api([("llm", "vllm-llama-0", UID_A)])
    kube = KubeClient("https://k8s", None, None, "gpu-node-17", opener=api, token_file=str(token))
    kube.find_pod(UID_A, namespace="llm")
    token.write_text("rotated\n")
    kube.find_pod(UID_A, namespace="llm")
    assert [auth for _, _, auth, _ in api.requests] == ["Bearer first", "Bearer rotated"]


def test_the_daemonset_passes_the_node_name_from_the_downward_api():
    import yaml
    from pathlib import Path

    docs = list(yaml.safe_load_all((Path(__file__).parents[2] / "deploy/k8s/base/daemonset.yaml").read_text()))
    ds = next(d for d in docs if d and d.get("kind") == "DaemonSet")
    env = ds["spec"]["template"]["spec"]["containers"][0]["env"]
    node = next(e for e in env if e["name"] == "NODE_NAME")
    assert node["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
