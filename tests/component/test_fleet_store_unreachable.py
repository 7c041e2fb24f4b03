"""A Sentinel or Cluster fleet store that is absent or lies: the guardian's alert sink starts anyway,
spools, says why in its status and writes nothing to an impostor (delivery once a real store answers:
tests/fleet). Real processes, no fakes: nothing listening, or a plain Redis answering where a
sentinel or a Cluster node should."""

from __future__ import annotations

import pytest

from tests.support.wait import wait_for
from vllm_guardian.config.schema import AlertsConfig
from vllm_guardian.netaddr import free_port
from vllm_guardian.sinks.redis_sink import AlertSink
from vllm_guardian.testing.redis_server import RedisServer


@pytest.fixture
def plain_redis():
    with RedisServer() as s:
        yield s


def _urls(plain_port: int) -> dict[str, str]:
    nobody = free_port()
    return {
        "no sentinel listening": f"redis+sentinel://127.0.0.1:{nobody}/mymaster",
        "a plain Redis posing as a sentinel": f"redis+sentinel://127.0.0.1:{plain_port}/mymaster",
        "no Cluster node listening": f"redis+cluster://127.0.0.1:{nobody}",
        "a plain Redis posing as a Cluster node": f"redis+cluster://127.0.0.1:{plain_port}",
    }


@pytest.mark.parametrize(
    "case",
    [
        "no sentinel listening",
        "a plain Redis posing as a sentinel",
        "no Cluster node listening",
        "a plain Redis posing as a Cluster node",
    ],
)
def test_an_absent_or_false_ha_store_spools_and_says_why(tmp_path, plain_redis, case):
    url = _urls(plain_redis.port)[case]
    sink = AlertSink.from_config(
        AlertsConfig(redis_url=url, timeout=0.5), tmp_path, "gpu-1", backoff_initial=0.05, backoff_max=0.2
    )
    try:
        sink.publish({"id": "ev-1", "node": "gpu-1"})
        wait_for(lambda: sink.stats()["last_error"], what="the flusher's first failure")
        stats = sink.stats()
        assert stats["spooled"] == 1 and not stats["redis_up"] and stats["delivered_total"] == 0
        assert len(stats["last_error"]) < 400  # one readable line for the log and the status, not a client's repr
        assert sink._thread is not None and sink._thread.is_alive()
        assert plain_redis.client().exists("guardian:alerts") == 0  # nothing written to the impostor
    finally:
        sink.close()
