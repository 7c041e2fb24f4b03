"""Live: alerts and the fleet through a real Redis shared by real ``guardian run`` processes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from functools import partial

import pytest

from vllm_guardian.testing.redis_server import RedisServer
from vllm_guardian.netaddr import free_port
from vllm_guardian.sim.control import SimServer
from tests.support.guardian_process import GuardianProcess
from tests.support.wait import poll
from tests.support.guardian_process import config, sweep, trip

pytestmark = pytest.mark.live


@pytest.fixture
def redis_server():
    with RedisServer() as r:
        yield r


def stream_events(client, stream="guardian:alerts"):
    return [json.loads(fields.get("event") or fields[b"event"]) for _, fields in client.xrange(stream)]


def test_a_restarted_busy_loop_alerts_firing_then_resolved_on_stream_and_channel(tmp_path, redis_server):
    port = free_port("127.0.0.1")
    client = redis_server.client()
    pubsub = client.pubsub()
    pubsub.subscribe("guardian:alerts")
    heard = []

    def listen():
        try:
            for msg in pubsub.listen():
                if msg["type"] == "message":
                    heard.append(json.loads(msg["data"]))
        except Exception:  # noqa: BLE001 - the subscription is closed at the end of the test
            return

    threading.Thread(target=listen, daemon=True).start()
    first = SimServer(port=port, startup_delay=1.0).start()
    first.wait_ready(60)
    extra = config(port, tmp_path)
    extra.update(node="node-a", alerts={"redis_url": redis_server.url})
    g = GuardianProcess(tmp_path, port, extra=extra).start()
    try:
        assert g.wait_ready(30), g.log_text()
        trip(port, "busy_loop")
        resolved = poll(
            lambda: next(
                (e for e in stream_events(client) if e["kind"] == "busy_loop" and e["status"] == "resolved"), None
            ),
            120,
        )
        assert resolved is not None, g.log_text()
        events = [e for e in stream_events(client) if e["kind"] == "busy_loop"]
        firing = events[0]
        assert firing["status"] == "firing" and firing["reason"] == "opened"
        for field in (
            "schema",
            "id",
            "fingerprint",
            "status",
            "kind",
            "severity",
            "node",
            "target",
            "summary",
            "signals",
            "evidence",
            "actions",
            "starts_at",
            "ends_at",
            "generator",
        ):
            assert field in firing, field
        assert firing["target"]["pid"] == first.pid and firing["node"] == "node-a"
        assert resolved["fingerprint"] == firing["fingerprint"] and resolved["ends_at"]
        assert {"stopping", "starting", "verifying"} <= {a["name"] for a in resolved["actions"]}
        assert any(e["evidence"]["dir"] for e in events)  # an update once the bundle was attached
        assert len({e["id"] for e in events}) == len(events)  # each event once in the stream
        assert poll(lambda: any(e["status"] == "resolved" for e in heard), 10)  # and live on the channel
    finally:
        pubsub.close()
        first.stop()
        assert g.stop() == 0
        sweep(port)


def test_the_fleet_view_shows_two_guardians_sharing_one_redis(tmp_path, redis_server):
    sims, guards = [], []
    try:
        for node in ("node-a", "node-b"):
            sim = SimServer(startup_delay=1.0).start()
            sims.append(sim)
            sim.wait_ready(60)
            d = tmp_path / node
            d.mkdir()
            g = GuardianProcess(d, sim.port, extra={"node": node, "alerts": {"redis_url": redis_server.url}})
            guards.append(g.start())
        for g in guards:
            assert g.wait_ready(30), g.log_text()
        cli = [
            sys.executable,
            "-m",
            "vllm_guardian.cli.main",
            "status",
            "--fleet",
            "--json",
            "--redis",
            redis_server.url,
            "-c",
            str(guards[0].config_path),
        ]

        def nodes():
            out = subprocess.run(cli, capture_output=True, text=True, timeout=20)
            return out.returncode == 0 and {row["node"] for row in json.loads(out.stdout)} >= {"node-a", "node-b"}

        assert poll(nodes, 20)
    finally:
        for sim in sims:
            sim.stop()
        for g in guards:
            assert g.stop() == 0


def test_two_guardians_with_a_fleet_cap_of_one_never_restart_at_the_same_time(tmp_path, redis_server):
    ports = [free_port("127.0.0.1"), free_port("127.0.0.1")]
    sims, guards = [], []
    try:
        for n, port in enumerate(ports):
            sim = SimServer(port=port, startup_delay=1.0).start()
            sims.append(sim)
            sim.wait_ready(60)
            d = tmp_path / f"g{n}"
            d.mkdir()
            extra = config(port, d, stop_timeout=3, policy={"fleet": {"max_concurrent_restarts": 1}})
            extra.update(node=f"node-{n}", alerts={"redis_url": redis_server.url})
            guards.append(GuardianProcess(d, port, extra=extra).start())
        for g in guards:
            assert g.wait_ready(30), g.log_text()
        for port in ports:
            trip(port, "busy_loop")

        def done(g):
            return next((i for i in g.incidents() if i["kind"] == "busy_loop" and i["status"] == "resolved"), None)

        incs = [poll(partial(done, g), 180) or {} for g in guards]
        assert all(incs), [g.log_text() for g in guards]

        def window(inc):  # from the lease being granted to the verified restart
            acts = inc["actions"]
            start = next(a["at"] for a in acts if a["name"] == "lease")
            end = next(a["at"] for a in acts if a["name"] == "verifying")
            return start, end

        (a0, a1), (b0, b1) = window(incs[0]), window(incs[1])
        assert a1 <= b0 or b1 <= a0, (window(incs[0]), window(incs[1]))
        waited = [a for inc in incs for a in inc["actions"] if a["name"] == "fleet_lease" and a["status"] == "waiting"]
        assert waited and "fleet cap 1 reached" in waited[0]["detail"], [inc["actions"] for inc in incs]
    finally:
        for sim in sims:
            sim.stop()
        for g in guards:
            assert g.stop() == 0
        for port in ports:
            sweep(port)
