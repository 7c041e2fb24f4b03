"""The simulator's recurring LRU busy loop (``--mm-lru-bug``, vLLM #43941) honours the catalog's
workaround: every start spins at the first request, unless ``--mm-processor-cache-gb 0`` — the
arguments the guardian adds from the catalog (docs/policy.md, Workarounds)."""

from __future__ import annotations

import pytest

from tests.support.wait import wait_for
from vllm_guardian.diagnosis.catalog_load import load_catalogs
from vllm_guardian.policy.workaround import with_args
from vllm_guardian.sim.control import SimServer, read_cmdline

pytestmark = pytest.mark.live


def engine_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@pytest.fixture
def make_server():
    servers: list[SimServer] = []

    def make(*extra: str) -> SimServer:
        server = SimServer(startup_delay=0.3, extra_args=extra).start()
        servers.append(server)
        server.wait_ready(20)
        return server

    yield make
    for server in servers:
        server.stop(timeout=2)
        assert server.leftovers() == ()


def catalog_workaround():
    sigs = {s.id: s for c in load_catalogs(()) for s in c.signatures}
    return sigs["vllm-mm-cache-lru-busy-loop"].workaround_apply


@pytest.mark.parametrize("start", [1, 2], ids=["first-start", "after-a-restart"])
def test_the_lru_bug_spins_the_engine_at_the_first_request_of_every_start(make_server, start):
    server = make_server("--mm-lru-bug")
    for _ in range(start - 1):  # a restart is a new server with the same command line
        server.stop(timeout=2)
        server = make_server("--mm-lru-bug")
    engine = server.engine_pid()
    ticks = engine_ticks(engine)
    with pytest.raises(TimeoutError):  # the request never finishes
        server.complete(timeout=3)
    assert engine_ticks(engine) >= ticks + 50  # the engine spun (at least 0.5 s of CPU in those 3 s)
    assert server.health() == 200


def test_with_the_catalogs_workaround_the_loop_does_not_come_back(make_server):
    command = ("--mm-lru-bug",)
    server = make_server(*with_args(command, catalog_workaround()))
    assert "--mm-processor-cache-gb" in read_cmdline(server.pid)
    answer = server.complete(timeout=10)
    assert answer["choices"][0]["text"]
    wait_for(lambda: server.complete(timeout=10)["choices"], what="a second answer", timeout=20)
