"""The whole pipeline assembled by the production wiring on fake seams: a fake /proc tree (an API
server, its resource tracker and one EngineCore), a scripted vLLM HTTP server whose counters the
test moves, a fake clock. ``step`` ticks the daemon one second at a time."""

from __future__ import annotations

import json
import logging
from pathlib import Path


from vllm_guardian.config.loader import parse_config
from vllm_guardian.host.http import HttpClient, HttpResponse
from vllm_guardian.loop.runtime import build_daemon
from vllm_guardian.seams import Seams
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_control import FakeControl
from vllm_guardian.testing.fake_http import FakeHttp, ok
from vllm_guardian.testing.fake_proc import FakeProcTree
from vllm_guardian.testing.fake_runner import FakeRunner


API, ENGINE, TRACKER = 100, 110, 105


class VllmPage:
    """A /metrics page whose counters the test moves (or freezes)."""

    def __init__(self) -> None:
        self.iterations = 0
        self.running = 0

    def __call__(self, _body) -> HttpResponse:
        return ok(
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="m"}} {self.running}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{engine="0",model_name="m"} 0\n'
            "# TYPE vllm:iteration_tokens_total histogram\n"
            f'vllm:iteration_tokens_total_count{{engine="0",model_name="m"}} {self.iterations}\n'
            f'vllm:iteration_tokens_total_sum{{engine="0",model_name="m"}} {self.iterations}\n'
        )


class World:
    def __init__(
        self,
        tmp_path: Path,
        config: dict | None = None,
        accel_backends=(),
        clock=None,
        on_update=(),
        *,
        port: int = 8000,
        http: HttpClient | None = None,
    ) -> None:
        """``port`` and ``http``: the API server's port and the HTTP seam (default: the scripted
        server, ``self.http``; a real client reaches a real server on ``port``)."""
        self.on_update = tuple(on_update)
        self.proc = FakeProcTree(tmp_path / "proc")
        self.proc.add_process(API, 1, ("python3", "-m", "vllm.entrypoints.openai.api_server", "--port", str(port)))
        self.proc.add_process(TRACKER, API, ("python3", "-c", "from multiprocessing.resource_tracker import main"))
        self.proc.add_process(ENGINE, API, ("VLLM::EngineCore",), threads=[(111, "ZMQbg/IO/0")])
        self.page = VllmPage()
        self.http = FakeHttp(
            {
                ("GET", "/health"): ok(),
                ("GET", "/metrics"): self.page,
                ("GET", "/v1/models"): ok(json.dumps({"data": [{"id": "m"}]})),
                ("POST", "/v1/completions"): ok(json.dumps({"choices": [{"text": "x"}]})),
            }
        )
        self.clock = clock or FakeClock()
        self.cfg = parse_config(
            {"node": "n1", "state_dir": str(tmp_path / "state"), "api": {"http": None}, **(config or {})}
        )
        self.log = logging.getLogger("test-daemon")
        self.cmd = FakeRunner()  # py-spy and friends never run against the real machine's pids here
        # nothing is ever restarted here (autodiscovered targets): no process is alive to the control
        self.seams = Seams(
            self.clock, self.proc.procfs(), http or self.http, self.cmd, FakeControl(set()), list(accel_backends)
        )
        self.d = self.new_daemon()
        self.engine_ticks = 0

    def new_daemon(self):
        return build_daemon(self.cfg, self.seams, log=self.log, on_update=self.on_update)

    def step(self, seconds: int = 1, *, spin: bool = False, progress: bool = False) -> list:
        transitions = []
        for _ in range(seconds):
            self.clock.advance(1.0)
            if spin:  # the engine's main thread burns one full CPU second per second, never blocks
                self.engine_ticks += 100
                self.proc.set_thread(ENGINE, ENGINE, utime=self.engine_ticks, state="R", syscall="running")
            if progress:
                self.page.iterations += 10
            transitions += self.d.tick()
            self.d.runner.wait_idle(5)
        return transitions

    def target(self) -> dict:
        return self.d.status().to_dict()["targets"][0]
