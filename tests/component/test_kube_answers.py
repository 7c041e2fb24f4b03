"""What the Kubernetes API server answers is hostile until bounded (vllm_guardian/host/kube.py,
kube_http.py), against a real socket that answers anything (tests/support/hostile_kube_api.py):
an answer dripped a byte at a time is cut at the call's deadline; a redirect is never followed
(the token stays where it was sent); a list that never stops paging, JSON nested too deep, an item
that is not an API object, a status line that is not HTTP are each a ``ProbeFailed``, never another
exception; a Status message cannot forge a log line; a pod log is read to its byte limit only.
Over TLS the same deadline holds."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from vllm_guardian.errors import ProbeFailed
from vllm_guardian.host.kube import ApiError, KubeClient, list_node_pods
from tests.support.hostile_kube_api import HostileKubeApi, drip, echo_token, pod_list, raw, reply

NODE = "gpu-node-17"
TOKEN = "kube-Tok3n-q8Zr2Lw9"
OK_POD = {"metadata": {"namespace": "llm", "name": "p", "uid": "u"}, "spec": {}, "status": {"phase": "Running"}}


def client(url: str, **kw) -> KubeClient:
    return KubeClient(url, TOKEN, kw.pop("ca", None), NODE, timeout=1.0, plain_http_loopback=True, **kw)


def failure(call) -> str:
    with pytest.raises(ProbeFailed) as e:
        call()
    return str(e.value)


@pytest.mark.parametrize(
    "answer",
    [
        drip(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"),
        drip(b"HTTP/1.1 200 OK\r\nX-Slow: "),  # the headers never end
        drip(b""),  # nor does the status line start
    ],
    ids=["body", "headers", "status line"],
)
def test_an_answer_dripped_a_byte_at_a_time_is_cut_at_the_calls_deadline(answer):
    with HostileKubeApi([answer]) as api:
        text = failure(lambda: list_node_pods(client(api.url), "llm"))
    assert "deadline" in text or "timed out" in text


def test_a_redirect_is_not_followed_and_the_token_goes_nowhere_else():
    with HostileKubeApi([pod_list([OK_POD])]) as elsewhere:
        redirect = reply(307, "", headers={"Location": elsewhere.url + "/api/v1/pods"})
        with HostileKubeApi([redirect]) as api, pytest.raises(ApiError) as e:
            list_node_pods(client(api.url), "llm")
        assert e.value.code == 307
        assert elsewhere.seen == []


@pytest.mark.parametrize(
    "answer, says",
    [
        (pod_list([OK_POD], more="again"), "pages do not end"),
        (reply(200, "[" * 100_000 + "]" * 100_000), "not JSON (RecursionError)"),
        (reply(200, "<html>maintenance</html>"), "not JSON"),
        (reply(200, [OK_POD]), "expected a JSON object"),
        (pod_list(["a pod"]), "item 0 is not an API object"),
        (pod_list([{"metadata": "llm/p", "spec": {}}]), "item 0 is not an API object"),
        (reply(200, {"items": {"a": 1}}), "items is not a list"),
        (raw(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"), "BadStatusLine: the answer is not HTTP"),
        (raw(b"HTTP/1.1 200 OK\r\n" + b"X: " + b"a" * 70_000 + b"\r\n\r\n"), "LineTooLong: the answer is not HTTP"),
    ],
    ids=[
        "endless pages",
        "deep JSON",
        "HTML",
        "a list",
        "a string item",
        "string metadata",
        "items map",
        "not HTTP",
        "huge header",
    ],
)
def test_an_answer_that_is_not_what_kubernetes_sends_is_a_probe_failure(answer, says):
    with HostileKubeApi([answer]) as api:
        text = failure(lambda: list_node_pods(client(api.url), "llm"))
    assert says in text


def test_a_status_message_can_neither_forge_a_log_line_nor_show_the_token_unescaped():
    with HostileKubeApi([echo_token(500)]) as api:
        text = failure(lambda: client(api.url).read_node(NODE))
    assert "HTTP 500" in text and "\n" not in text and "\x1b" not in text
    assert "\\x1b[2J\\x0aFORGED" in text


def test_a_pod_log_is_read_to_its_byte_limit_only_and_binary_is_replaced():
    body = b"\x00\xff\xfe" + b"A" * 1_000_000
    with HostileKubeApi([reply(200, body, ctype="text/plain")]) as api:
        text = client(api.url).read_log("llm", "p", "vllm", limit_bytes=4096)
    assert len(text.encode()) <= 3 * 4096 and text.startswith("\x00\ufffd\ufffd")


@pytest.fixture
def tls(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl to make a certificate")
    cert, key = tmp_path / "api.crt", tmp_path / "api.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(cert), str(key)


def test_over_tls_the_token_is_sent_and_a_dripped_answer_is_still_cut(tls):
    cert, _ = tls
    with HostileKubeApi([pod_list([OK_POD]), drip(b"HTTP/1.1 200 OK\r\nContent-Length: 9999\r\n\r\n")], tls=tls) as api:
        kube = client(api.url, ca=cert)
        assert [p["metadata"]["name"] for p in list_node_pods(kube, "llm")] == ["p"]
        assert api.seen[0].headers["authorization"] == f"Bearer {TOKEN}"
        text = failure(lambda: list_node_pods(kube, "llm"))
        assert "deadline" in text or "timed out" in text
