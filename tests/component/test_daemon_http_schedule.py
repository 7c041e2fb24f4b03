"""Each target's /health and /metrics job scrapes that target, even when several are due on the
same tick and the jobs run after the loop has moved on (as a thread pool runs them)."""

from __future__ import annotations

import logging
from typing import Any, Mapping, cast
from urllib.parse import urlsplit

from vllm_guardian.config.loader import parse_config
from vllm_guardian.host.http import HttpResponse
from vllm_guardian.state.async_runner import AsyncRunner, Done
from vllm_guardian.loop.runtime import build_daemon
from vllm_guardian.seams import Seams
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_control import FakeControl
from vllm_guardian.testing.fake_http import FakeHttp, ok
from vllm_guardian.testing.fake_proc import FakeProcTree
from vllm_guardian.testing.fake_runner import FakeRunner


class DeferredRunner:
    """Runs every job only when the loop next collects: after the tick that submitted it ended."""

    def __init__(self) -> None:
        self.pending: dict = {}

    def busy(self, key) -> bool:
        return key in self.pending

    def submit(self, key, fn, deadline: float, on_done=None) -> bool:
        if key in self.pending:
            return False
        self.pending[key] = (fn, on_done)
        return True

    def collect(self) -> list[Done]:
        jobs, self.pending = self.pending, {}
        return [Done(key, fn(), on_done=on_done) for key, (fn, on_done) in jobs.items()]

    def overruns(self, now: float) -> list:
        return []

    def in_flight(self) -> list:
        return list(self.pending)

    def wait_idle(self, timeout: float) -> None:
        pass

    def shutdown(self) -> None:
        pass


class RecordingHttp(FakeHttp):
    def __init__(self) -> None:
        super().__init__({("GET", "/health"): ok(), ("GET", "/metrics"): ok("# nothing\n")})
        self.ports: list[tuple[int | None, str]] = []

    def request(
        self, method: str, url: str, timeout: float, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> HttpResponse:
        self.ports.append((urlsplit(url).port, urlsplit(url).path))
        return super().request(method, url, timeout, body, headers)


def test_targets_due_on_the_same_tick_are_each_scraped_at_their_own_url(tmp_path):
    proc = FakeProcTree(tmp_path / "proc")
    for pid, port in ((100, 8000), (200, 8001), (300, 8002)):
        proc.add_process(pid, 1, ("python3", "-m", "vllm.entrypoints.openai.api_server", "--port", str(port)))
    http = RecordingHttp()
    cfg = parse_config({"node": "n1", "state_dir": str(tmp_path / "state"), "api": {"http": None}})
    clock = FakeClock()
    seams = Seams(clock, proc.procfs(), http, FakeRunner(), FakeControl(set()), [])
    d = build_daemon(cfg, seams, runner=cast(AsyncRunner, DeferredRunner()), log=logging.getLogger("test"))
    for _ in range(2):
        clock.advance(1.0)
        d.tick()
    health = sorted(port or 0 for port, path in http.ports if path == "/health")
    assert health == [8000, 8001, 8002]
