"""A server started with --api-key, through the whole pipeline: the canary authenticates (so a hang
is still confirmed), a refused key is a loud once-per-episode line and a probe_failure, and the key
shows up in none of the guardian's outputs (log, status, incidents, evidence)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from vllm_guardian.config.loader import parse_config
from vllm_guardian.host.api_keys import ApiKeys, BearerHttpClient
from vllm_guardian.host.http import HttpError
from vllm_guardian.model import Kind
from vllm_guardian.loop.runtime import build_daemon
from vllm_guardian.seams import Seams
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_control import FakeControl
from vllm_guardian.testing.fake_http import FakeHttp, ok
from vllm_guardian.testing.fake_proc import FakeProcTree
from vllm_guardian.testing.fake_runner import FakeRunner

API, ENGINE = 100, 110
SECRET = "sk-live-4f1d9a7c2b"
COMPLETION = ok(json.dumps({"choices": [{"text": "x"}]}))


class KeyedServer:
    """Answers like vLLM with --api-key: /v1/* needs the bearer token, /health and /metrics are open."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.hung = False

    def guarded(self, answer):
        def route(_body, headers):
            if headers.get("Authorization") != f"Bearer {self.key}":
                return ok('{"error": "Unauthorized"}', status=401)
            if self.hung:
                raise HttpError("timeout", "no answer within 5s")
            return answer

        return route


class World:
    def __init__(self, tmp_path: Path, server_key: str, argv_key: str | None = SECRET) -> None:
        self.proc = FakeProcTree(tmp_path / "proc")
        argv: tuple[str, ...] = ("python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000")
        if argv_key:
            argv += ("--api-key", argv_key)
        self.proc.add_process(API, 1, argv)
        self.proc.add_process(ENGINE, API, ("VLLM::EngineCore",))
        self.server = KeyedServer(server_key)
        self.http = FakeHttp(
            {
                ("GET", "/health"): ok(),
                ("GET", "/metrics"): ok(
                    '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 0\n'
                ),
                ("GET", "/v1/models"): self.server.guarded(ok(json.dumps({"data": [{"id": "m"}]}))),
                ("POST", "/v1/completions"): self.server.guarded(COMPLETION),
            }
        )
        self.clock = FakeClock()
        self.state = tmp_path / "state"
        self.cfg = parse_config({"node": "n1", "state_dir": str(self.state), "api": {"http": None}})
        self.log = logging.getLogger("test-api-key")
        procfs = self.proc.procfs()
        keys = ApiKeys(self.cfg, procfs, environ={})
        seams = Seams(self.clock, procfs, BearerHttpClient(self.http, keys), FakeRunner(), FakeControl(set()))
        self.d = build_daemon(self.cfg, seams, log=self.log)  # the production wiring: keys follow discovery
        self.engine_ticks = 0

    def step(self, seconds: int = 1, *, spin: bool = False) -> list:
        out = []
        for _ in range(seconds):
            self.clock.advance(1.0)
            if spin:
                self.engine_ticks += 100
                self.proc.set_thread(ENGINE, ENGINE, utime=self.engine_ticks, state="R", syscall="running")
            out += self.d.tick()
            self.d.runner.wait_idle(5)
        return out

    def outputs(self, caplog) -> str:
        """Everything the guardian wrote: its log, its status, its state dir (incidents, evidence)."""
        files = "".join(p.read_text(errors="replace") for p in self.state.rglob("*") if p.is_file())
        return caplog.text + json.dumps(self.d.status().to_dict()) + files


@pytest.fixture
def make_world(tmp_path):
    worlds = []

    def make(**kw) -> World:
        worlds.append(World(tmp_path, **kw))
        return worlds[-1]

    yield make
    for w in worlds:
        w.d.runner.shutdown()


def test_the_canary_sends_the_key_from_the_servers_command_line_and_the_target_gets_ready(make_world):
    w = make_world(server_key=SECRET)
    w.step(4)
    target = w.d.status().to_dict()["targets"][0]
    assert target["ready"]
    assert all(
        h.get("Authorization") is None
        for (m, path, *_), h in zip(w.http.requests, w.http.headers, strict=True)
        if not path.startswith("/v1")
    )  # /health and /metrics never carry it


def test_the_status_says_where_each_key_came_from_never_the_key(make_world):
    w = make_world(server_key=SECRET)
    w.step(4)
    snapshot = w.d.status()
    assert snapshot.api_keys == {"vllm-8000": "--api-key of pid 100"}
    assert snapshot.to_dict()["api_keys"] == {"vllm-8000": "--api-key of pid 100"}


def test_a_hang_behind_an_api_key_is_still_confirmed_as_a_busy_loop(make_world, caplog):
    caplog.set_level(logging.DEBUG)
    w = make_world(server_key=SECRET)
    w.step(4)
    w.server.hung = True
    opened = []
    for _ in range(25):
        opened += [t.incident.kind for t in w.step(spin=True) if t.previous is None]
        if opened:
            break
    assert opened == [Kind.BUSY_LOOP]
    w.step(2)  # evidence is written off the loop
    assert SECRET not in w.outputs(caplog)


def test_a_refused_key_is_one_loud_line_and_a_probe_failure_never_silence(make_world, caplog):
    caplog.set_level(logging.DEBUG)
    w = make_world(server_key="the-servers-real-key")  # the guardian sends SECRET: refused
    opened = [t.incident for t in w.step(10) if t.previous is None]
    assert [i.kind for i in opened] == [Kind.PROBE_FAILURE]
    assert opened[0].signals["probe"] == "auth"
    lines = [r.getMessage() for r in caplog.records if ":auth:" in r.getMessage()]
    assert len(lines) == 1 and "HTTP 401" in lines[0] and "--api-key of pid 100" in lines[0]
    assert "HTTP 401" in w.d.status().to_dict()["targets"][0]["errors"]["vllm-8000:auth"]
    assert SECRET not in w.outputs(caplog)


def test_the_key_fixed_closes_the_episode_and_the_target_gets_ready(make_world):
    w = make_world(server_key="other")
    w.step(4)
    w.server.key = SECRET
    w.step(8)
    target = w.d.status().to_dict()["targets"][0]
    assert target["ready"] and "vllm-8000:auth" not in target["errors"]


def test_a_server_with_a_key_and_none_found_says_how_to_configure_one(make_world, caplog):
    w = make_world(server_key=SECRET, argv_key=None)
    w.step(4)
    err = w.d.status().to_dict()["targets"][0]["errors"]["vllm-8000:auth"]
    assert "no API key found" in err and "api_key_env or api_key_file" in err
