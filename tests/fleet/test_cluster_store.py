"""The fleet store on a real Redis Cluster (three masters, ``redis-cli --cluster create``): every
multi-key script gets CROSSSLOT from the Cluster without the hash tags and works with them; the
alerts (stream, consumer group, once per id), the fleet lease, the group lease, the breaker, the
L4 fingerprints and the heartbeats all work through a ``redis+cluster://`` URL."""

from __future__ import annotations

import time

import pytest
import redis

from tests.support.redis_ha import ClusterSet
from vllm_guardian.gates.exchange import FingerprintExchange
from vllm_guardian.policy import breaker
from vllm_guardian.remediation import lease
from vllm_guardian.sinks import group_lease
from vllm_guardian.sinks.fleet import NodeHeartbeat, ensure_group, fleet_status, read_group
from vllm_guardian.sinks.redis_client import make_client
from vllm_guardian.sinks.redis_delivery import DELIVER_SCRIPT, RedisDelivery, delivered_key_of
from vllm_guardian.store.keys import slot

STREAM = "guardian:alerts"


@pytest.fixture(scope="module")
def cluster():
    with ClusterSet() as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    c = make_client(cluster.url, timeout=5.0)
    yield c
    c.close()


@pytest.fixture(autouse=True)
def empty(cluster):
    for node in cluster.nodes:
        node.client().flushall()


def _node_of(cluster: ClusterSet, key: str) -> redis.Redis:
    """A plain client of the master that serves ``key``'s slot (no client-side slot check)."""
    probe = cluster.nodes[0].client()
    for start, end, (host, port, *_rest) in [(s[0], s[1], s[2]) for s in probe.execute_command("CLUSTER SLOTS")]:
        if start <= slot(key) <= end:
            return redis.Redis(host=_s(host), port=int(port), decode_responses=True, socket_timeout=5)
    raise AssertionError(f"no node serves {key}")


def _s(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# (script, untagged keys as they were named before, the tagged keys of today, args)
SCRIPTS = {
    "alert delivery": (
        DELIVER_SCRIPT,
        ["guardian:delivered:gpu-1", STREAM],
        [delivered_key_of(STREAM, "gpu-1"), STREAM],
        ["ev-1", "{}", 100, "", 1, 10],
    ),
    "fleet lease": (
        lease._ACQUIRE,
        ["guardian:lease:restart:0", "guardian:lease:restart:1", "guardian:lease:restart:fence"],
        [f"{lease.PREFIX}0", f"{lease.PREFIX}1", lease.PREFIX + lease.FENCE],
        ["gpu-1/llm", 60000],
    ),
    "breaker": (
        breaker._ADMIT,
        ["guardian:breaker:m:restarts", "guardian:breaker:m:targets", "guardian:breaker:m:held"],
        [breaker.scope_prefix("m") + s for s in ("restarts", "targets", "held")],
        [1000, 300, "gpu-1/llm", 0.5, 60],
    ),
    "group lease": (
        group_lease._ACQUIRE,
        ["guardian:group-lease:dp", "guardian:group-lease:dp:fence"],
        [group_lease.lease_key("dp"), group_lease.fence_key("dp")],
        ["gpu-1", "nonce", 60000],
    ),
}


@pytest.mark.parametrize("case", SCRIPTS.values(), ids=list(SCRIPTS))
def test_a_script_over_untagged_keys_gets_crossslot_and_over_tagged_keys_runs(cluster, case):
    script, untagged, tagged, args = case
    assert len({slot(k) for k in untagged}) > 1  # the old names really lie in several slots
    with pytest.raises(redis.exceptions.ClusterCrossSlotError):  # the server's CROSSSLOT reply
        _node_of(cluster, untagged[0]).eval(script, len(untagged), *untagged, *args)
    assert len({slot(k) for k in tagged}) == 1
    _node_of(cluster, tagged[0]).eval(script, len(tagged), *tagged, *args)  # no error: one slot


def test_redis_py_refuses_the_untagged_keys_before_sending_them(client):
    with pytest.raises(redis.exceptions.RedisClusterException, match="must map to the same key slot"):
        client.eval(lease._ACQUIRE, 2, "guardian:lease:restart:0", "guardian:lease:restart:fence", "n/t", 1000)


def test_alerts_reach_the_stream_once_each_and_a_consumer_group_reads_them_in_order(client):
    stream = "cluster-test:alerts"
    delivery = RedisDelivery(client, node="gpu-1", stream=stream, channel="cluster-test:alerts", maxlen=1000)
    events = [{"id": f"ev-{i}", "time": 1_700_000_000 + i, "node": "gpu-1"} for i in range(50)]
    assert all(delivery.deliver(ev) for ev in events)
    assert not any(delivery.deliver(ev) for ev in events[:10])  # re-sent after a crash: skipped by id
    ensure_group(client, stream, "pager")
    got = read_group(client, stream, "pager", "c1", count=200)
    assert [ev["id"] for _eid, ev in got] == [ev["id"] for ev in events]


def test_the_fleet_lease_caps_restarts_across_nodes_on_the_cluster(client):
    a = lease.FleetLease(client, "gpu-a", 1, 60, "deny")
    b = lease.FleetLease(client, "gpu-b", 1, 60, "deny")
    got = a.acquire("llm")
    assert got.granted and got.token is not None
    refused = b.acquire("llm")
    assert not refused.granted and "gpu-a/llm" in refused.reason
    assert a.check("llm", got.slot, got.token).granted
    assert a.release("llm", got.slot, got.token)
    second = b.acquire("llm")
    assert second.granted and second.token is not None and second.token > got.token
    b.release("llm", second.slot, second.token)


def test_a_lease_on_a_cluster_without_replicas_is_refused_when_replicas_must_acknowledge_it(client):
    res = lease.FleetLease(client, "gpu-a", 1, 60, "deny", replicas=1, replica_timeout=0.2).acquire("llm")
    assert not res.granted and "acknowledged by 0 of 1" in res.reason


def test_the_group_lease_and_the_breaker_work_on_the_cluster(client):
    a, b = group_lease.GroupLease(client, "gpu-a"), group_lease.GroupLease(client, "gpu-b")
    assert [a.acquire("dp-cluster", 30), b.acquire("dp-cluster", 30)] == [True, False]
    assert a.check("dp-cluster") and a.release("dp-cluster")
    br = breaker.PercentBreaker(
        client, node="gpu-a", max_fraction=0.5, window=300, when_redis_down="deny", target_ttl=60
    )
    assert br.register("model-x", ["t1", "t2"], 1000.0)
    assert br.admit("model-x", "t1", 1000.0).granted
    assert not br.admit("model-x", "t2", 1000.0).granted


def test_l4_fingerprints_from_several_nodes_are_shared_through_the_cluster(client):
    fps = {"p1": "abc", "p2": "def"}
    for node in ("gpu-a", "gpu-b", "gpu-c"):
        FingerprintExchange(client, node, lambda: 1000.0).share("m", "0.32", "llm", fps, 600, 600)
    votes, note = FingerprintExchange(client, "gpu-d", lambda: 1000.0).share("m", "0.32", "llm", fps, 600, 600)
    assert note is None or "partial" not in note
    assert votes == [fps, fps, fps]  # one vote per other node


def test_heartbeats_spread_over_the_masters_are_all_listed(client, cluster):
    hb = NodeHeartbeat(client)
    names = [f"node-{i:02d}" for i in range(30)]
    for n in names:
        hb.write(n, {"version": "1"}, 60)
    masters_holding = {_node_of(cluster, f"guardian:node:{n}").connection_pool.connection_kwargs["port"] for n in names}
    assert len(masters_holding) > 1  # the SCAN has to visit every master
    assert [r["node"] for r in fleet_status(client)] == names


def test_the_report_listener_hears_raw_bytes_through_the_cluster(client):
    import logging

    from vllm_guardian.gates.listener import ReportsListener

    heard: list[bytes | str] = []

    def accept(m: bytes | str, _mono: float, _wall: float) -> str:
        heard.append(m)
        return "ok"

    listener = ReportsListener(
        client,
        "cluster-test:reports",
        accept,
        time.monotonic,
        time.time,
        logging.getLogger("test"),
    ).start()
    try:
        assert listener.subscribed.wait(10)
        deadline = time.monotonic() + 10
        while not heard and time.monotonic() < deadline:
            client.publish("cluster-test:reports", b"\xff not utf-8")
            time.sleep(0.2)
    finally:
        listener.stop()
    assert heard and heard[0] == b"\xff not utf-8"  # bytes, as the intake wants them: counted malformed there


def test_the_cli_reads_the_stream_and_the_fleet_through_a_cluster_url(client, cluster):
    import json
    import subprocess
    import sys

    RedisDelivery(client, node="gpu-1", stream=STREAM, channel=None, maxlen=100).deliver(
        {"id": "ev-cli", "node": "gpu-1", "kind": "busy_loop"}
    )
    NodeHeartbeat(client).write("gpu-1", {"version": "1", "targets": []}, 60)
    cli = [sys.executable, "-m", "vllm_guardian.cli.main"]
    tail = subprocess.run(
        [*cli, "alerts", "tail", "--redis", cluster.url, "--json"], capture_output=True, text=True, timeout=60
    )
    assert tail.returncode == 0, tail.stderr
    assert [json.loads(line)["event"]["id"] for line in tail.stdout.splitlines()] == ["ev-cli"]
    fleet = subprocess.run(
        [*cli, "status", "--fleet", "--redis", cluster.url, "--json"], capture_output=True, text=True, timeout=60
    )
    assert fleet.returncode == 0, fleet.stderr
    assert "gpu-1" in fleet.stdout
