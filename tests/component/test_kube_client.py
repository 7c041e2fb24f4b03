"""The Kubernetes client against the fake API server (vllm_guardian/testing/fake_kube_api.py),
which authenticates every request against the token current at that moment: a rotated token is
picked up by every call, log reads included; lists are read page by page and capped; a readiness
condition is patched by type; an eviction a PodDisruptionBudget refuses says so; a kubeconfig (a
guardian run by systemd on a node) reaches the same server."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_guardian.errors import BackendUnavailable, ProbeFailed
from vllm_guardian.host.kube import EvictionBlocked, KubeClient, PodRef, list_node_pods
from vllm_guardian.host.kube_http import EvictionUnsupported
from vllm_guardian.host.kubeconfig import discover, parse_kubeconfig
from vllm_guardian.testing.fake_kube_api import FakeKubeApi

NODE = "gpu-node-17"
UID = "3f8e2a1c-7b4d-4e9a-9c1f-2d6b8e0a5f71"
POD = PodRef("llm", "vllm-llama-0", UID)
GATE = "vllm-guardian.io/serving"


@pytest.fixture
def token(tmp_path):
    path = tmp_path / "token"
    path.write_text("first\n")
    return path


@pytest.fixture
def api(token):
    with FakeKubeApi(token=lambda: token.read_text().strip()) as fake:
        fake.state.add_pod("llm", "vllm-llama-0", UID, NODE)
        fake.state.logs[("llm", "vllm-llama-0")] = "RuntimeError: CUDA error\n"
        yield fake


@pytest.fixture
def client(api, token):
    return KubeClient(api.url, None, None, NODE, token_file=str(token), plain_http_loopback=True)


def test_every_call_is_authenticated_with_the_token_current_at_that_moment(api, client, token):
    """Projected service-account tokens rotate: each call, the log read included, reads it again."""
    calls = [
        lambda: client.find_pod(UID, "llm"),
        lambda: client.read_log("llm", "vllm-llama-0", "vllm"),
        lambda: client.patch_pod_condition(POD, {"type": GATE, "status": "True"}),
        lambda: client.create_event("llm", {"metadata": {"name": "x.1"}, "reason": "BusyLoop"}),
        lambda: client.patch_event("llm", "x.1", {"count": 2}),
    ]
    for i, call in enumerate(calls):
        token.write_text(f"rotated-{i}\n")
        call()
    assert [s.authenticated for s in api.state.seen] == [True] * len(calls)


def test_a_log_read_is_authenticated_in_cluster(api, client):
    """Defect D8: the log read sent the constructor's token, None in a pod, and got 401."""
    assert client.token is None
    assert "CUDA error" in client.read_log("llm", "vllm-llama-0", "vllm")
    assert api.state.seen[-1].authenticated


def test_a_wrong_token_is_refused_with_the_api_servers_answer(api):
    with pytest.raises(ProbeFailed, match="HTTP 401"):
        KubeClient(api.url, "stale", None, NODE, plain_http_loopback=True).find_pod(UID, "llm")


def test_lists_are_read_page_by_page(api, client):
    for i in range(7):
        api.state.add_pod("llm", f"other-{i}", f"00000000-0000-0000-0000-00000000000{i}", NODE)
    client.page_size = 3
    assert len(list_node_pods(client, "llm")) == 8
    pages = [s for s in api.state.seen if s.path.endswith("/pods")]
    assert [s.query.get("continue") for s in pages] == [None, "3", "6"]
    assert all(s.query["limit"] == "3" for s in pages)


def test_a_list_beyond_the_cap_is_refused_not_truncated(api, client):
    for i in range(5):
        api.state.add_pod("llm", f"other-{i}", f"00000000-0000-0000-0000-00000000000{i}", NODE)
    client.page_size, client.max_items = 2, 4
    with pytest.raises(ProbeFailed, match="more than 4 items"):
        list_node_pods(client, "llm")


def test_an_oversized_answer_is_refused(api, client):
    client.max_bytes = 100
    with pytest.raises(ProbeFailed, match="larger than 100 bytes"):
        client.find_pod(UID, "llm")


def test_the_readiness_condition_is_patched_by_type_and_only_on_that_pod(api, client):
    client.patch_pod_condition(POD, {"type": GATE, "status": "False", "reason": "Draining"})
    client.patch_pod_condition(POD, {"type": GATE, "status": "True", "reason": "Serving"})
    assert api.state.condition("llm", "vllm-llama-0", GATE) == {"type": GATE, "status": "True", "reason": "Serving"}
    assert api.state.seen[-1].content_type == "application/strategic-merge-patch+json"
    with pytest.raises(ProbeFailed, match="422"):
        client.patch_pod_condition(PodRef("llm", "vllm-llama-0", "another-uid"), {"type": GATE, "status": "True"})


def test_an_eviction_a_disruption_budget_refuses_says_so_then_succeeds(api, client):
    api.state.pdb_blocks = 1
    with pytest.raises(EvictionBlocked, match="disruption budget") as e:
        client.evict_pod(POD, 30)
    assert e.value.code == 429
    client.evict_pod(POD, 30)
    assert ("llm", "vllm-llama-0") not in api.state.pods
    body = api.state.seen[-1].body
    assert (body["apiVersion"], body["kind"]) == ("policy/v1", "Eviction")
    assert body["deleteOptions"] == {"gracePeriodSeconds": 30, "preconditions": {"uid": UID}}


@pytest.mark.parametrize(
    ("served", "sent"),
    [
        (("policy/v1", "policy/v1beta1"), "policy/v1"),
        (("policy/v1",), "policy/v1"),
        (("policy/v1beta1",), "policy/v1beta1"),  # 1.20 and 1.21
    ],
    ids=["both-served-newest-wins", "v1-only", "v1beta1-only-like-1.20"],
)
def test_an_eviction_speaks_the_version_the_server_serves_asked_once(api, client, served, sent):
    api.state.policy_versions = served
    client.evict_pod(POD, 30)
    api.state.add_pod("llm", "vllm-llama-1", "uid-1", NODE)
    client.evict_pod(PodRef("llm", "vllm-llama-1", "uid-1"), 30)
    evictions = [s.body["apiVersion"] for s in api.state.seen if s.path.endswith("/eviction")]
    assert evictions == [sent, sent]
    assert [s.path for s in api.state.seen].count("/apis/policy") == 1
    assert not api.state.pods


def test_a_server_serving_no_eviction_api_is_one_clear_refusal_and_nothing_is_sent(api, client):
    api.state.policy_versions = ()
    with pytest.raises(EvictionUnsupported, match="serves no Eviction API"):
        client.evict_pod(POD, 30)
    assert not any(s.path.endswith("/eviction") for s in api.state.seen)
    assert ("llm", "vllm-llama-0") in api.state.pods


def test_the_log_read_is_negotiated_the_way_kubectl_does_it(api, client):
    """A real API server answers ``Accept: text/plain`` alone with 406 on pods/log (the fake too);
    the client sends what kubectl sends and gets the text."""
    assert "CUDA error" in client.read_log("llm", "vllm-llama-0", "vllm")
    assert api.state.seen[-1].accept == "application/json, */*"


def test_an_eviction_of_a_recreated_pod_is_refused_by_its_uid(api, client):
    with pytest.raises(ProbeFailed, match="409"):
        client.evict_pod(PodRef("llm", "vllm-llama-0", "the-old-pods-uid"), 30)
    assert ("llm", "vllm-llama-0") in api.state.pods


KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: node
contexts:
  - name: node
    context: {{cluster: local, user: guardian}}
clusters:
  - name: local
    cluster: {{server: "{url}"}}
users:
  - name: guardian
    user: {{tokenFile: token}}
"""


def test_a_kubeconfig_with_a_token_file_reaches_the_api_server(api, token, tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.format(url=api.url))
    client = KubeClient.from_environment({"NODE_NAME": NODE}, kubeconfig=str(path), plain_http_loopback=True)
    token.write_text("rotated\n")
    assert client.find_pod(UID, "llm") == POD
    assert api.state.seen[-1].authenticated


def test_kubeconfig_from_the_environment_variable(api, tmp_path, monkeypatch):
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.format(url=api.url))
    access = discover({"KUBECONFIG": str(path)})
    assert (access.server, access.token_file) == (api.url, str(tmp_path / "token"))


@pytest.mark.parametrize(
    "user, message",
    [
        ("{exec: {command: aws}}", "exec/auth-provider plugin"),
        ("{auth-provider: {name: gcp}}", "exec/auth-provider plugin"),
    ],
)
def test_credential_plugins_are_refused_clearly(user, message, tmp_path):
    text = KUBECONFIG.format(url="https://k8s:6443").replace("{tokenFile: token}", user)
    with pytest.raises(BackendUnavailable, match=message):
        parse_kubeconfig(text, str(tmp_path / "kubeconfig"))


def test_inline_certificate_data_is_written_to_a_private_directory(tmp_path):
    text = (
        KUBECONFIG.format(url="https://k8s:6443")
        .replace('{server: "https://k8s:6443"}', '{server: "https://k8s:6443", certificate-authority-data: "Q0E="}')
        .replace("{tokenFile: token}", '{client-certificate-data: "Q0VSVA==", client-key-data: "S0VZ"}')
    )
    access = parse_kubeconfig(text, str(tmp_path / "kubeconfig"), private_dir=tmp_path)
    assert [Path(str(f)).read_bytes() for f in (access.ca_file, access.client_cert, access.client_key)] == [
        b"CA",
        b"CERT",
        b"KEY",
    ]


def test_neither_in_a_pod_nor_a_kubeconfig_says_what_is_missing():
    with pytest.raises(BackendUnavailable, match="KUBECONFIG"):
        discover({})


@pytest.mark.parametrize(
    "answer",
    [{"versions": "policy/v1"}, {"versions": [["policy/v1"]]}, {"versions": [{"groupVersion": "policy/v9"}]}, {}],
    ids=["a-string", "a-list-of-lists", "an-unknown-version", "no-versions"],
)
def test_a_discovery_document_not_as_kubernetes_sends_it_evicts_nothing(answer):
    """Hostile or broken: whatever answers /apis/policy cannot make the client guess a body."""
    import io
    import json

    sent = []

    def opener(req, timeout):
        sent.append(req.full_url)
        return io.BytesIO(json.dumps(answer).encode())

    c = KubeClient("https://k8s", "tok", None, NODE, opener=opener)
    with pytest.raises(EvictionUnsupported):
        c.evict_pod(POD, 30)
    assert sent == ["https://k8s/apis/policy"]
