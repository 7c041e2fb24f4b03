"""The guardian's Kubernetes client against a real kube-apiserver (v1.20.2), authenticated as the
ServiceAccount the Helm chart creates, with exactly the chart's RBAC (never admin): the pod-log read
is negotiated (a real server answers ``Accept: text/plain`` alone with 406), least privilege holds
through the real authorizer, UID preconditions refuse a replaced pod, a rotated token file is read
again, and an eviction speaks the version the server serves (1.20: only ``policy/v1beta1``)."""

from __future__ import annotations

import itertools

import pytest

from tests.support.real_kube import RealKube, grant
from vllm_guardian.errors import ProbeFailed
from vllm_guardian.host.kube import KubeClient, PodRef, list_node_pods
from vllm_guardian.host.kube_http import ApiError

NODE = "gpu-node-17"
_serial = itertools.count()


@pytest.fixture(scope="module")
def accounts(kube):
    kube.add_node(NODE)  # the pod-log read looks up the pod's Node to reach its kubelet
    return {mode: grant(kube, mode, f"g-{mode}") for mode in ("observe", "remediate")}


@pytest.fixture(scope="module")
def tokens(accounts):
    return {mode: token for mode, (_, token) in accounts.items()}


@pytest.fixture
def pod(kube):
    name = f"vllm-llama-{next(_serial)}"
    stored = kube.add_pod("llm", name, NODE)
    return PodRef("llm", name, stored["metadata"]["uid"])


def client(kube: RealKube, token_file, token: str | None = None) -> KubeClient:
    if token is not None:
        token_file.write_text(token + "\n")
    return KubeClient(kube.url, None, kube.ca_file, NODE, token_file=str(token_file))


def test_a_log_read_with_text_plain_alone_is_refused_406_by_a_real_server(kube, pod):
    """The server's side of the defect: what the client used to send."""
    answer = kube.request("GET", f"/api/v1/namespaces/llm/pods/{pod.name}/log?previous=true", accept="text/plain")
    assert answer.code == 406


def test_the_clients_log_read_is_negotiated_and_ends_where_a_kubelet_would_answer(kube, tokens, pod, tmp_path):
    """No 406: the request passes negotiation and RBAC; with no kubelet behind this server it
    answers 500 (no address to proxy to), which the client reports as a failed read."""
    c = client(kube, tmp_path / "token", tokens["observe"])
    with pytest.raises(ApiError) as e:
        c.read_log("llm", pod.name, "vllm")
    assert e.value.code == 500, str(e.value)


def test_a_cluster_wide_pod_list_is_forbidden_and_the_granted_namespace_is_not(kube, tokens, pod, tmp_path):
    c = client(kube, tmp_path / "token", tokens["observe"])
    assert pod.uid in {p["metadata"]["uid"] for p in list_node_pods(c, "llm")}
    for path in ("/api/v1/pods", "/api/v1/namespaces/other/pods", "/api/v1/nodes", "/api/v1/namespaces/llm/secrets"):
        assert kube.request("GET", path, token=tokens["observe"]).code == 403, path


def test_observe_mode_cannot_evict_and_remediate_mode_evicts_with_the_version_the_server_serves(
    kube, tokens, pod, tmp_path
):
    observe = client(kube, tmp_path / "observe", tokens["observe"])
    with pytest.raises(ApiError) as e:
        observe.evict_pod(pod, 30)
    assert e.value.code == 403
    assert kube.pod("llm", pod.name) is not None
    remediate = client(kube, tmp_path / "remediate", tokens["remediate"])
    assert remediate.eviction_version() == "policy/v1beta1"  # 1.20 serves no policy/v1
    remediate.evict_pod(pod, 30)
    # no kubelet: the pod is marked for deletion, its grace period running
    assert (kube.pod("llm", pod.name) or {}).get("metadata", {}).get("deletionTimestamp")


def test_a_replaced_pod_is_never_touched_by_uid_precondition(kube, tokens, pod, tmp_path):
    c = client(kube, tmp_path / "token", tokens["remediate"])
    stale = PodRef(pod.namespace, pod.name, "00000000-0000-0000-0000-000000000000")
    with pytest.raises(ApiError) as patched:
        c.patch_pod_condition(stale, {"type": "vllm-guardian.io/serving", "status": "False", "reason": "Draining"})
    with pytest.raises(ApiError) as evicted:
        c.evict_pod(stale, 30)
    assert (patched.value.code, evicted.value.code) == (422, 409)  # what a real server answers each
    stored = kube.pod("llm", pod.name) or {}
    assert "deletionTimestamp" not in stored["metadata"]
    assert not [c for c in stored["status"].get("conditions", []) if c["type"] == "vllm-guardian.io/serving"]


def test_a_rotated_token_file_is_read_again_on_every_call(kube, accounts, tokens, pod, tmp_path):
    token_file = tmp_path / "token"
    c = client(kube, token_file, tokens["observe"])
    assert c.find_pod(pod.uid, "llm").name == pod.name
    token_file.write_text("a-token-the-server-never-issued\n")
    with pytest.raises(ProbeFailed, match="401"):
        c.find_pod(pod.uid, "llm")
    token_file.write_text(kube.token_for("guardian", accounts["observe"][0]) + "\n")  # the kubelet's rotation
    assert c.find_pod(pod.uid, "llm").name == pod.name
