"""The guardian's whole Kubernetes story against a real kube-apiserver, as the chart's remediate
ServiceAccount: a vLLM pod's readiness gate goes True while it serves, False through a busy loop's
incident and drain, its pod is evicted (``policy/v1beta1``: what 1.20 serves), and the gate goes
True on the recreated pod (a new UID) once the restart is verified; the Events carry the documented
reasons on the right pod.

The daemon is the real one, tick by tick on a fake /proc and clock with a scripted vLLM HTTP surface
(as tests/component/test_kube_native.py, whose fake API server this replaces for what a real one can
show). The test plays the kubelet and the pod's controller, which this server has not: it binds the
pod to the node and patches its status, puts the pod's processes in the pod's cgroup, ends them once
the server marked the pod for deletion (and confirms the deletion, as a kubelet does), then creates
the replacement.
"""

from __future__ import annotations

import json

import pytest

from tests.support.kube_node import NODE, KubeNode
from tests.support.real_kube import RealKube, grant
from vllm_guardian.host.http import HttpError
from vllm_guardian.host.kube import KubeClient
from vllm_guardian.surface.readiness import CONDITION_TYPE
from vllm_guardian.testing.fake_http import ok

NS, NAME = "llm", "vllm-llama-0"


def cgroup(uid: str, container: str) -> str:
    """The cgroup a systemd-driven kubelet puts a container in (cgroup v2, the unified line)."""
    pod = f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
    return f"0::/kubepods.slice/kubepods-burstable.slice/{pod}/cri-containerd-{container}.scope\n"


class Node(KubeNode):
    """The node, against the real server: the test is its kubelet and the pod's controller."""

    def __init__(self, kube: RealKube, tmp_path, token: str) -> None:
        token_file = tmp_path / "token"
        token_file.write_text(token + "\n")
        super().__init__(tmp_path, KubeClient(kube.url, None, kube.ca_file, NODE, token_file=str(token_file)), NS)
        self.kube = kube
        self.gates: list[tuple[str, str, str]] = []  # (pod uid, status, reason) as the server stored them

    def start_pod(self, api_pid: int) -> str:
        """The controller creates the pod and the kubelet runs it: its processes in its cgroup."""
        container = f"{api_pid:064x}"
        uid = str(self.kube.add_pod(NS, NAME, NODE, container_id=container)["metadata"]["uid"])
        self.run_processes(api_pid, cgroup(uid, container))
        return uid

    def kubelet(self) -> None:
        """A pod marked for deletion: its containers stop, and the kubelet confirms the deletion."""
        pod = self.kube.pod(NS, NAME)
        if self.pids and (pod is None or pod["metadata"].get("deletionTimestamp")):
            self.stop_processes()
            if pod is not None:
                gone = self.kube.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{NAME}", {"gracePeriodSeconds": 0})
                assert gone.code == 200, gone

    def observe(self) -> None:
        pod = self.kube.pod(NS, NAME)
        if pod is None:
            return
        for c in pod["status"].get("conditions") or []:
            if c["type"] == CONDITION_TYPE:
                seen = (pod["metadata"]["uid"], c["status"], c.get("reason", ""))
                if not self.gates or self.gates[-1] != seen:
                    self.gates.append(seen)


@pytest.fixture
def node(kube, tmp_path):
    _, token = grant(kube, "remediate", "g-story")
    kube.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{NAME}", {"gracePeriodSeconds": 0})
    n = Node(kube, tmp_path, token)
    yield n
    n.close()


def test_the_gate_follows_an_incident_through_eviction_to_the_verified_recreated_pod(kube, node):
    uid_a = node.start_pod(100)
    node.until(lambda: node.gates[-1:] == [(uid_a, "True", "Serving")], 15)
    node.http.route("POST", "/v1/completions", HttpError("timeout", "no answer within 5s"))
    node.until(lambda: not node.pids, 60, spin=True)  # busy loop -> incident -> drain -> eviction -> pod gone
    assert kube.pod(NS, NAME) is None
    node.http.route("POST", "/v1/completions", ok(json.dumps({"choices": [{"text": "x"}]})))
    uid_b = node.start_pod(200)
    assert uid_b != uid_a
    node.until(lambda: node.gates[-1:] == [(uid_b, "True", "Serving")], 60)
    out_of_rotation = [r for uid, st, r in node.gates if uid == uid_a and st == "False"]
    assert out_of_rotation and set(out_of_rotation) <= {"Warming", "IncidentOpen", "Draining"}
    assert "Draining" in out_of_rotation or "IncidentOpen" in out_of_rotation
    events = kube.events(NS)
    reasons = {(e["involvedObject"]["uid"], e["reason"]) for e in events}
    assert {(uid_a, "BusyLoop"), (uid_a, "Draining"), (uid_a, "Restarting"), (uid_b, "Restarted")} <= reasons
    busy = next(e for e in events if e["reason"] == "BusyLoop")
    assert busy["type"] == "Warning" and busy["source"]["host"] == NODE and "incident" in busy["message"]
