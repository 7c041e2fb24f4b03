"""Fault 6: the embedded redis-server is restarted when it dies; alerts keep flowing, in order."""

from __future__ import annotations

import os
import signal

from vllm_guardian.config.schema import AlertsConfig
from vllm_guardian.sinks.embedded_redis import EmbeddedRedis
from vllm_guardian.sinks.redis_sink import AlertSink
from vllm_guardian.sinks.redis_client import make_client

from tests.support.redis_procs import kill_all, servers_for
from tests.support.wait import wait_for


def ev(n: int) -> dict:
    return {"id": f"E{n:04d}", "kind": "test", "n": n}


def test_a_killed_embedded_redis_is_started_again_and_every_alert_arrives_once_in_order(tmp_path):
    state = tmp_path / "state"
    sink = AlertSink.from_config(AlertsConfig(), str(state), "n1", backoff_max=0.2)
    try:
        for i in range(3):
            sink.publish(ev(i))
        wait_for(lambda: sink.stats()["delivered_total"] == 3, what="first delivery")
        (first,) = servers_for(state)
        os.kill(first, signal.SIGKILL)
        for i in range(3, 8):
            sink.publish(ev(i))
        wait_for(lambda: sink.stats()["delivered_total"] == 8, timeout=20, what="delivery after the restart")
        (second,) = servers_for(state)
        assert second != first
        client = make_client(EmbeddedRedis(str(state)).url)
        got = [fields["id"] for _, fields in client.xrange("guardian:alerts")]
        assert got == [f"E{i:04d}" for i in range(8)]
    finally:
        sink.close()
        kill_all(servers_for(state))
    assert servers_for(state) == []
