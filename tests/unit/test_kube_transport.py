"""Where a Kubernetes credential may be sent (vllm_guardian/host/kubeconfig.py, ``transport_problem``):
over https always; over plain http only to a loopback address and only when the config opts in
(``kubernetes.plain_http_loopback``, a local test server); never over another scheme. A server
without credentials (``kubectl proxy``) may be plain http. The refusal names the server, never a
credential or a URL's user-info."""

from __future__ import annotations

import pytest

from vllm_guardian.host.kubeconfig import server_origin, transport_problem

# (server, credentials sent?, plain_http_loopback, allowed?)
CASES = [
    ("https://k8s.example:6443", True, False, True),
    ("https://10.0.0.1:6443", True, True, True),
    ("http://10.0.0.1:8080", True, False, False),
    ("http://10.0.0.1:8080", True, True, False),  # the opt-in covers loopback addresses only
    ("http://k8s.example:8080", True, True, False),
    ("http://127.0.0.1:8080", True, False, False),  # loopback, but not opted in
    ("http://127.0.0.1:8080", True, True, True),
    ("http://127.9.9.9:8080", True, True, True),
    ("http://[::1]:8080", True, True, True),
    ("http://localhost:8080", True, True, True),
    ("HTTP://127.0.0.1:8080", True, True, True),
    ("http://10.0.0.1:8080", False, False, True),  # nothing secret is sent (kubectl proxy)
    ("file:///etc/kubernetes/admin.conf", False, False, False),
    ("ftp://10.0.0.1/", False, False, False),
    ("", False, False, False),
]


@pytest.mark.parametrize("server, credentials, opt_in, allowed", CASES)
def test_a_credential_travels_over_https_or_to_an_opted_in_loopback_server_only(server, credentials, opt_in, allowed):
    assert (transport_problem(server, credentials, opt_in) is None) is allowed


def test_the_refusal_says_what_to_do_and_names_the_server_without_its_user_info():
    problem = transport_problem("http://admin:hunter2-pw@10.0.0.1:8080/k8s", True)
    assert problem is not None
    assert "http://10.0.0.1:8080" in problem and "plain_http_loopback" in problem and "https" in problem
    assert "hunter2" not in problem and "admin" not in problem


@pytest.mark.parametrize(
    "server, origin",
    [
        ("https://user:pw@k8s.example:6443/prefix", "https://k8s.example:6443"),
        ("http://[::1]:8080", "http://[::1]:8080"),
        ("https://k8s.example", "https://k8s.example"),
        ("https://k8s.example:99999", "https://k8s.example:?"),
    ],
)
def test_a_server_is_named_by_its_origin(server, origin):
    assert server_origin(server) == origin
