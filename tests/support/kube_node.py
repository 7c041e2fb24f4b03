"""One Kubernetes node as the guardian's Kubernetes stories need it: the real daemon, tick by tick on a
fake /proc and clock with a scripted vLLM HTTP surface, its KubePublisher, and a vLLM pod's processes
(API server + engine) in the pod's cgroup. Which API server answers is the caller's: the fake one
(tests/component/test_kube_native.py) or a real kube-apiserver (tests/k8s_real); each subclass plays
the kubelet its own way (``kubelet``) and watches what the server stored (``observe``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

from vllm_guardian.config.loader import parse_config
from vllm_guardian.host.kube import KubeClient
from vllm_guardian.loop.runtime import build_daemon
from vllm_guardian.model import ProcKey
from vllm_guardian.seams import Seams
from vllm_guardian.surface.kube_publisher import KubePublisher
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_control import FakeControl
from vllm_guardian.testing.fake_http import FakeHttp, ok
from vllm_guardian.testing.fake_proc import FakeProcTree
from vllm_guardian.testing.fake_runner import FakeRunner

NODE = "gpu-node-17"


class KubeNode:
    """The guardian of ``NODE`` supervising target ``llama`` (restart.mode kubernetes in ``namespace``)."""

    def __init__(self, tmp_path: Path, client: KubeClient, namespace: str = "llm", **config: Any) -> None:
        self.proc = FakeProcTree(tmp_path / "proc")
        self.control = FakeControl()
        self.pids: list[ProcKey] = []
        self.iterations = 0
        self.spin_ticks = 0
        self.http = FakeHttp(
            {
                ("GET", "/health"): ok(),
                ("GET", "/metrics"): lambda _body: ok(self._metrics()),
                ("GET", "/v1/models"): ok(json.dumps({"data": [{"id": "m"}]})),
                ("POST", "/v1/completions"): ok(json.dumps({"choices": [{"text": "x"}]})),
            }
        )
        self.clock = FakeClock()
        self.cfg = parse_config(
            {
                "node": NODE,
                "state_dir": str(tmp_path / "state"),
                "api": {"http": None},
                "targets": [
                    {
                        "name": "llama",
                        "match": {"cmdline_regex": "api_server --port 8000"},
                        "restart": {"mode": "kubernetes", "namespace": namespace, "ready_timeout": 600},
                        "drain": {"timeout": 5},
                    }
                ],
                **config,
            }
        )
        seams = Seams(self.clock, self.proc.procfs(), self.http, FakeRunner(), self.control, [])
        self.d = build_daemon(self.cfg, seams, log=logging.getLogger("test-kube-node"), kube=client)
        self.publisher = KubePublisher(
            self.cfg, client, seams.proc, self.control.alive, wall=self.clock.wall, monotonic=self.clock.monotonic
        )

    def _metrics(self) -> str:
        return (
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="m"} 0\n'
            "# TYPE vllm:iteration_tokens_total histogram\n"
            f'vllm:iteration_tokens_total_count{{engine="0",model_name="m"}} {self.iterations}\n'
        )

    def run_processes(self, api_pid: int, cgroup: str) -> None:
        """The pod's containers run: its API server and engine, in the pod's cgroup."""
        argv = ("python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000")
        api = self.proc.add_process(api_pid, 1, argv)
        engine = self.proc.add_process(api_pid + 10, api_pid, ("VLLM::EngineCore",), threads=[(api_pid + 11, "ZMQbg")])
        for pid in (api_pid, api_pid + 10):
            self.proc.set_cgroup(pid, cgroup)
        self.pids = [api, engine]
        self.control.live |= {api, engine}
        self.spin_ticks = 0

    def stop_processes(self) -> None:
        for key in self.pids:
            self.control.live.discard(key)
            self.proc.remove(key.pid)
        self.pids = []

    def kubelet(self) -> None:
        """What the node's kubelet does after a tick (the subclass's)."""

    def observe(self) -> None:
        """What the test records of the server after a tick (the subclass's)."""

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
            self.observe()

    def until(self, predicate: Callable[[], bool], limit: int, **kw: Any) -> None:
        for _ in range(limit):
            if predicate():
                return
            self.step(**kw)
        assert predicate()

    def close(self) -> None:
        self.publisher.close()
        self.d.runner.shutdown()
