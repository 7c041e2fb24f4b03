"""The Kubernetes client's credentials against a real local API server (the fake of
vllm_guardian/testing/fake_kube_api.py, over a real socket): a token is stripped like an API key
(a token pasted from a Secret file ends in a newline) and one holding a control character is
refused naming where it came from; no error text ever quotes a token; a token is never sent over
plain http unless the server is on a loopback address and the config opts in."""

from __future__ import annotations

import pytest

from vllm_guardian.errors import BackendUnavailable, GuardianError, ProbeFailed
from vllm_guardian.host.kube import KubeClient
from vllm_guardian.testing.fake_kube_api import FakeKubeApi

NODE = "gpu-node-17"
UID = "3f8e2a1c-7b4d-4e9a-9c1f-2d6b8e0a5f71"
TOKEN = "kube-Tok3n-q8Zr2Lw9"

KUBECONFIG = """\
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
    user: {user}
"""


@pytest.fixture
def api():
    with FakeKubeApi(token=lambda: TOKEN) as fake:
        fake.state.add_pod("llm", "vllm-llama-0", UID, NODE)
        yield fake


def kubeconfig(tmp_path, url: str, user: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.format(url=url, user=user))
    return str(path)


def client_from(path: str, opt_in: bool = True) -> KubeClient:
    return KubeClient.from_environment({"NODE_NAME": NODE}, kubeconfig=path, plain_http_loopback=opt_in)


def message_of(call, error: type[GuardianError] = GuardianError) -> str:
    with pytest.raises(error) as e:
        call()
    return str(e.value)


def test_an_inline_token_ending_in_a_newline_is_stripped_and_authenticates(api, tmp_path):
    """Defect E8: the newline went into the header; http.client refused it quoting the token."""
    client = client_from(kubeconfig(tmp_path, api.url, '{token: "' + TOKEN + '\\n"}'))
    assert client.find_pod(UID, "llm").name == "vllm-llama-0"
    assert api.state.seen[-1].authenticated


@pytest.mark.parametrize(
    "user",
    [
        '{token: "kube-Tok3n\\nq8Zr2Lw9"}',  # a newline inside: no header can carry it
        '{token: "kube-Tok3n\\rq8Zr2Lw9"}',
        '{token: "kube-Tok3n\\u0000q8Zr2Lw9"}',
    ],
)
def test_an_inline_token_holding_a_control_character_is_refused_naming_its_source(api, tmp_path, user):
    path = kubeconfig(tmp_path, api.url, user)
    text = message_of(lambda: client_from(path), BackendUnavailable)
    assert "control character" in text and path in text and "'guardian'" in text
    assert "Tok3n" not in text and "q8Zr2Lw9" not in text
    assert api.state.seen == []  # nothing was sent


def test_a_token_file_holding_a_control_character_fails_the_call_naming_the_file(api, tmp_path):
    token = tmp_path / "token"
    token.write_text(f"{TOKEN}\n")
    client = client_from(kubeconfig(tmp_path, api.url, "{tokenFile: token}"))
    assert client.find_pod(UID, "llm").uid == UID  # a trailing newline is fine
    token.write_text("kube-Tok3n\nq8Zr2Lw9\n")  # rotated to something no header can carry
    text = message_of(lambda: client.find_pod(UID, "llm"), ProbeFailed)
    assert str(token) in text and "control character" in text
    assert "Tok3n" not in text and "q8Zr2Lw9" not in text
    assert len(api.state.seen) == 1


def test_a_request_that_cannot_be_sent_is_reported_by_type_never_quoting_its_headers(api, tmp_path):
    """Whatever slips past the checks: http.client's ValueError quotes the header value."""
    client = client_from(kubeconfig(tmp_path, api.url, "{token: " + TOKEN + "}"))
    client.token = "kube-Tok3n\nq8Zr2Lw9"  # past the constructor's check, as a later bug might let it
    text = message_of(lambda: client.find_pod(UID, "llm"))
    assert "ValueError" in text and "values not shown" in text
    assert "Tok3n" not in text and "q8Zr2Lw9" not in text


@pytest.mark.parametrize("wrong", ["stale-Tok3n-x1\\n", "stale-Tok3n-x1"])
def test_a_refused_token_is_not_in_the_error(api, tmp_path, wrong):
    client = client_from(kubeconfig(tmp_path, api.url, '{token: "' + wrong + '"}'))
    text = message_of(lambda: client.find_pod(UID, "llm"))
    assert "HTTP 401" in text and "stale-Tok3n" not in text


def test_a_kubeconfig_that_is_not_yaml_is_refused_by_position_never_quoting_its_lines(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text('users:\n  - name: guardian\n    user: {token: "kube-Tok3n-q8Zr2Lw9\n')
    text = message_of(lambda: client_from(str(path)))
    assert str(path) in text and "line" in text
    assert "Tok3n" not in text


def test_a_token_for_a_plain_http_server_is_refused_without_the_opt_in(api, tmp_path):
    """Defect E9: the bearer token went over http:// without a word."""
    path = kubeconfig(tmp_path, api.url, "{token: " + TOKEN + "}")
    text = message_of(lambda: client_from(path, opt_in=False), BackendUnavailable)
    assert "plain http" in text and "plain_http_loopback" in text and api.url in text
    assert TOKEN not in text
    assert api.state.seen == []


def test_the_opt_in_does_not_cover_a_server_off_this_host(tmp_path):
    path = kubeconfig(tmp_path, "http://192.0.2.10:8080", "{token: " + TOKEN + "}")
    with pytest.raises(BackendUnavailable, match="loopback addresses only"):
        client_from(path, opt_in=True)


def test_a_client_built_by_hand_refuses_a_token_over_plain_http_too(api):
    with pytest.raises(BackendUnavailable, match="plain http"):
        KubeClient(api.url, TOKEN, None, NODE)
    with pytest.raises(BackendUnavailable, match="plain http"):
        KubeClient(api.url, None, None, NODE, token_file="/var/run/secrets/kubernetes.io/serviceaccount/token")
