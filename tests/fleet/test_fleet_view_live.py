"""Live: ``guardian fleet`` reads a real guardian's fleet store (a real Redis): the node and its
target, the open incident's kind while it fires, then the restart the guardian made, counted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from vllm_guardian.netaddr import free_port
from vllm_guardian.sim.control import SimServer
from vllm_guardian.testing.redis_server import RedisServer
from tests.support.guardian_process import GuardianProcess, config, sweep, trip
from tests.support.wait import poll

pytestmark = pytest.mark.live


def fleet(g: GuardianProcess, redis: RedisServer) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "vllm_guardian.cli.main", "fleet", "--json", "-c", str(g.config_path)]
        + ["--redis", redis.url],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    doc: dict = json.loads(out.stdout)
    return doc


def sim_row(doc: dict) -> dict | None:
    return next((t for n in doc["nodes"] for t in n["targets"] if (n["node"], t["name"]) == ("node-fv", "sim")), None)


def test_the_fleet_view_shows_a_real_guardians_incident_then_its_restart(tmp_path):
    port = free_port("127.0.0.1")
    sim = SimServer(port=port, startup_delay=1.0).start()
    try:
        sim.wait_ready(60)
        with RedisServer() as redis:
            extra = config(port, tmp_path)
            extra.update(node="node-fv", alerts={"redis_url": redis.url, "heartbeat_ttl": 3})
            g = GuardianProcess(tmp_path, port, extra=extra).start()
            try:
                assert g.wait_ready(30), g.log_text()
                assert poll(lambda: (row := sim_row(fleet(g, redis))) and row["phase"] == "serving", 30)
                trip(port, "busy_loop")
                firing = poll(lambda: (row := sim_row(fleet(g, redis))) and "busy_loop" in row["incidents"] and row, 90)
                assert firing, g.log_text()
                restarted = poll(lambda: (row := sim_row(fleet(g, redis))) and row["restarts"] >= 1 and row, 150)
                assert restarted, g.log_text()
                models = fleet(g, redis)["models"]
                assert sum(m["restarts"] for m in models) >= 1
            finally:
                g.stop()
    finally:
        sim.stop()
        sweep(port)
