"""restart.mode kubernetes against a local fake API server that checks the exact requests."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from vllm_guardian.errors import ProbeFailed
from vllm_guardian.host.kube import KubeClient, PodRef, pod_uid_from_cgroup

UID = "3f8e2a1c-7b4d-4e9a-9c1f-2d6b8e0a5f71"
PODS = {
    "items": [
        {"metadata": {"namespace": "llm", "name": "vllm-llama-0", "uid": UID}},
        {"metadata": {"namespace": "llm", "name": "other", "uid": "00000000-0000-0000-0000-000000000000"}},
    ]
}


class FakeApi(BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *a):  # keep test output quiet
        pass

    def _reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.seen.append(("GET", self.path, self.headers.get("Authorization"), None))
        self._reply(200, PODS)

    def do_DELETE(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(("DELETE", self.path, self.headers.get("Authorization"), body))
        if self.path.endswith("/missing"):
            self._reply(404, {"kind": "Status", "reason": "NotFound"})
        else:
            self._reply(200, {"kind": "Pod"})


@pytest.fixture
def api():
    FakeApi.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize(
    "cgroup",
    [
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
        "cri-containerd-4f1c.scope\n",
        f"12:memory:/kubepods/burstable/pod{UID}/4f1c0e9a\n11:cpu:/kubepods/burstable/pod{UID}/4f1c0e9a\n",
    ],
)
def test_the_pod_uid_is_read_from_cgroup_v1_and_v2(cgroup):
    assert pod_uid_from_cgroup(cgroup) == UID


def test_a_process_outside_kubernetes_has_no_pod_uid():
    assert pod_uid_from_cgroup("0::/system.slice/vllm@llama.service\n") is None


def test_the_pod_is_found_among_this_nodes_pods_and_deleted_with_a_uid_precondition(api):
    kube = KubeClient(api, "tok3n", None, "gpu-node-17", plain_http_loopback=True)
    pod = kube.find_pod(UID)
    assert pod == PodRef("llm", "vllm-llama-0", UID)
    kube.delete_pod(pod, grace_seconds=30)
    get, delete = FakeApi.seen
    assert get[:3] == ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-17&limit=500", "Bearer tok3n")
    assert delete[:3] == ("DELETE", "/api/v1/namespaces/llm/pods/vllm-llama-0", "Bearer tok3n")
    assert delete[3]["gracePeriodSeconds"] == 30 and delete[3]["preconditions"] == {"uid": UID}


def test_an_unknown_uid_is_an_error_naming_it(api):
    with pytest.raises(ProbeFailed, match="no pod with uid 1234"):
        KubeClient(api, None, None, "n").find_pod("1234")


def test_an_api_error_is_a_probe_failure_with_the_status(api):
    with pytest.raises(ProbeFailed, match="HTTP 404"):
        KubeClient(api, None, None, "n").delete_pod(PodRef("llm", "missing", UID), 5)
