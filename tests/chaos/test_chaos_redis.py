"""Redis killed and restarted while alerts flow: every alert arrives, in order, exactly once.

The sink is the guardian's own (``AlertSink.from_config``), fed by a thread publishing at a
steady rate, while Redis is killed with SIGKILL and started again several times: an external
Redis (append-only, fsync always, so what it acknowledged survives its own crash) and the
embedded one (which the guardian must start again itself)."""

from __future__ import annotations

import threading
import time

from vllm_guardian.config.schema import AlertsConfig
from vllm_guardian.sinks.embedded_redis import EmbeddedRedis
from vllm_guardian.sinks.redis_sink import AlertSink
from vllm_guardian.sinks.redis_client import make_client
from vllm_guardian.testing.redis_server import RedisServer

from tests.support.redis_procs import kill_all, servers_for
from tests.support.wait import wait_for

N = 200
KILLS = 4


def publish_steadily(sink: AlertSink, n: int, every: float) -> threading.Thread:
    def run():
        for i in range(n):
            sink.publish({"id": f"A{i:05d}", "kind": "chaos", "n": i})
            time.sleep(every)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def delivered_ids(client) -> list[str]:
    return [fields["id"] for _, fields in client.xrange("guardian:alerts")]


def test_an_external_redis_killed_four_times_loses_no_alert(tmp_path):
    redis = RedisServer(durable=True).start()
    sink = AlertSink.from_config(AlertsConfig(redis_url=redis.url, timeout=1.0), str(tmp_path), "n1", backoff_max=0.5)
    try:
        writer = publish_steadily(sink, N, 0.02)
        for _ in range(KILLS):
            time.sleep(0.6)
            redis.kill()
            time.sleep(0.4)
            redis.start()
        writer.join()
        wait_for(lambda: sink.stats()["delivered_total"] >= N, timeout=30, what="every alert delivered")
        got = delivered_ids(redis.client())
        assert got == [f"A{i:05d}" for i in range(N)]
        assert len(sink.spool) == 0
    finally:
        sink.close()
        redis.stop()


def test_the_embedded_redis_killed_four_times_is_started_again_and_loses_no_alert(tmp_path):
    state = tmp_path / "state"
    sink = AlertSink.from_config(AlertsConfig(timeout=1.0), str(state), "n1", backoff_max=0.5)
    try:
        writer = publish_steadily(sink, N, 0.02)
        for _ in range(KILLS):
            time.sleep(0.7)
            kill_all(servers_for(state))
        writer.join()
        wait_for(lambda: sink.stats()["delivered_total"] >= N, timeout=30, what="every alert delivered")
        got = delivered_ids(make_client(EmbeddedRedis(str(state)).url))
        assert got == [f"A{i:05d}" for i in range(N)]
        assert len(servers_for(state)) == 1
    finally:
        sink.close()
        kill_all(servers_for(state))
