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
import logging

import pytest

from tests.support.real_kube import RealKube, grant
from vllm_guardian.config.loader import parse_config
from vllm_guardian.host.http import HttpError
from vllm_guardian.host.kube import KubeClient
from vllm_guardian.loop.runtime import build_daemon
from vllm_guardian.model import ProcKey
from vllm_guardian.seams import Seams
from vllm_guardian.surface.kube_publisher import KubePublisher
from vllm_guardian.surface.readiness import CONDITION_TYPE
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_control import FakeControl
from vllm_guardian.testing.fake_http import FakeHttp, ok
from vllm_guardian.testing.fake_proc import FakeProcTree
from vllm_guardian.testing.fake_runner import FakeRunner

NODE = "gpu-node-17"
NS, NAME = "llm", "vllm-llama-0"


def cgroup(uid: str, container: str) -> str:
    """The cgroup a systemd-driven kubelet puts a container in (cgroup v2, the unified line)."""
    pod = f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
    return f"0::/kubepods.slice/kubepods-burstable.slice/{pod}/cri-containerd-{container}.scope\n"


class Node:
    """One node of the real cluster: the guardian's daemon, the vLLM pod's fake processes."""

    def __init__(self, kube: RealKube, tmp_path, token: str) -> None:
        self.kube = kube
        self.proc = FakeProcTree(tmp_path / "proc")
        self.control = FakeControl()
        self.pids: list[ProcKey] = []
        self.iterations = 0
        self.token_file = tmp_path / "token"
        self.token_file.write_text(token + "\n")
        self.http = FakeHttp(
            {
                ("GET", "/health"): ok(),
                ("GET", "/metrics"): lambda _body: ok(self._metrics()),
                ("GET", "/v1/models"): ok(json.dumps({"data": [{"id": "m"}]})),
                ("POST", "/v1/completions"): ok(json.dumps({"choices": [{"text": "x"}]})),
            }
        )
        self.clock = FakeClock()
        cfg = parse_config(
            {
                "node": NODE,
                "state_dir": str(tmp_path / "state"),
                "api": {"http": None},
                "targets": [
                    {
                        "name": "llama",
                        "match": {"cmdline_regex": "api_server --port 8000"},
                        "restart": {"mode": "kubernetes", "namespace": NS, "ready_timeout": 600},
                        "drain": {"timeout": 5},
                    }
                ],
            }
        )
        seams = Seams(self.clock, self.proc.procfs(), self.http, FakeRunner(), self.control, [])
        client = KubeClient(kube.url, None, kube.ca_file, NODE, token_file=str(self.token_file))
        self.d = build_daemon(cfg, seams, log=logging.getLogger("test-k8s-real"), kube=client)
        self.publisher = KubePublisher(
            cfg, client, seams.proc, self.control.alive, wall=self.clock.wall, monotonic=self.clock.monotonic
        )
        self.gates: list[tuple[str, str, str]] = []  # (pod uid, status, reason) as the server stored them
        self.uid = ""

    def _metrics(self) -> str:
        return (
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="m"} 0\n'
            "# TYPE vllm:iteration_tokens_total histogram\n"
            f'vllm:iteration_tokens_total_count{{engine="0",model_name="m"}} {self.iterations}\n'
        )

    def start_pod(self, api_pid: int) -> str:
        """The controller creates the pod and the kubelet runs it: its processes in its cgroup."""
        container = f"{api_pid:064x}"
        self.uid = self.kube.add_pod(NS, NAME, NODE, container_id=container)["metadata"]["uid"]
        argv = ("python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000")
        api = self.proc.add_process(api_pid, 1, argv)
        engine = self.proc.add_process(api_pid + 10, api_pid, ("VLLM::EngineCore",), threads=[(api_pid + 11, "ZMQbg")])
        for pid in (api_pid, api_pid + 10):
            self.proc.set_cgroup(pid, cgroup(self.uid, container))
        self.pids = [api, engine]
        self.control.live |= {api, engine}
        self.spin_ticks = 0
        return self.uid

    def kubelet(self) -> None:
        """A pod marked for deletion: its containers stop, and the kubelet confirms the deletion."""
        pod = self.kube.pod(NS, NAME)
        if self.pids and (pod is None or pod["metadata"].get("deletionTimestamp")):
            for key in self.pids:
                self.control.live.discard(key)
                self.proc.remove(key.pid)
            self.pids = []
            if pod is not None:
                gone = self.kube.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{NAME}", {"gracePeriodSeconds": 0})
                assert gone.code == 200, gone

    def observe_gate(self) -> None:
        pod = self.kube.pod(NS, NAME)
        if pod is None:
            return
        for c in pod["status"].get("conditions") or []:
            if c["type"] == CONDITION_TYPE:
                seen = (pod["metadata"]["uid"], c["status"], c.get("reason", ""))
                if not self.gates or self.gates[-1] != seen:
                    self.gates.append(seen)

    def step(self, n: int = 1, *, spin: bool = False) -> None:
        for _ in range(n):
            self.clock.advance(1.0)
            if spin and self.pids:
                self.spin_ticks += 100
                engine = self.pids[1].pid
                self.proc.set_thread(engine, engine, utime=self.spin_ticks, state="R", syscall="running")
            self.d.tick()
            self.d.runner.wait_idle(20)
            self.kubelet()
            self.publisher.observe(self.d.status())
            assert self.publisher.drain(20)
            self.observe_gate()

    def until(self, predicate, limit: int, **kw) -> None:
        for _ in range(limit):
            if predicate():
                return
            self.step(**kw)
        assert predicate(), self.gates

    def close(self) -> None:
        self.publisher.close()
        self.d.runner.shutdown()


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
