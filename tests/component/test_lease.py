"""The fleet-wide restart cap on a real Redis: N slots, re-entrant, released only by its holder."""

import pytest

from vllm_guardian.remediation.lease import FleetLease
from vllm_guardian.testing.redis_server import RedisServer


@pytest.fixture(scope="module")
def redis_server():
    with RedisServer() as r:
        yield r


@pytest.fixture
def client(redis_server):
    c = redis_server.client()
    c.flushall()
    return c


def test_a_cap_of_one_lets_one_target_restart_at_a_time(client):
    a = FleetLease(client, "node-a", 1, 60, "deny")
    b = FleetLease(client, "node-b", 1, 60, "deny")
    first = a.acquire("llm")
    assert first.granted and first.slot == 0
    second = b.acquire("llm")
    assert not second.granted and "node-a/llm" in second.reason
    assert a.release("llm", first.slot)
    assert b.acquire("llm").granted


def test_taking_a_slot_we_hold_again_succeeds(client):
    a = FleetLease(client, "node-a", 1, 60, "deny")
    assert a.acquire("llm").granted
    again = a.acquire("llm")  # a guardian restarted mid-sequence keeps its lease
    assert again.granted and "already ours" in again.reason


def test_only_the_holder_can_release_a_slot(client):
    a = FleetLease(client, "node-a", 1, 60, "deny")
    b = FleetLease(client, "node-b", 1, 60, "deny")
    held = a.acquire("llm")
    assert not b.release("llm", held.slot)
    assert not b.acquire("llm").granted


def test_a_cap_of_two_admits_two(client):
    leases = [FleetLease(client, f"node-{i}", 2, 60, "deny") for i in range(3)]
    got = [lease.acquire("llm").granted for lease in leases]
    assert got == [True, True, False]


def test_the_ttl_frees_a_slot_whose_holder_died(client):
    a = FleetLease(client, "node-a", 1, 60, "deny")
    held = a.acquire("llm")
    assert client.ttl(f"guardian:lease:restart:{held.slot}") > 0


@pytest.mark.parametrize("when_down, granted", [("allow", True), ("deny", False)])
def test_when_redis_is_down_the_configured_fail_safe_decides(redis_server, when_down, granted):
    import redis

    dead = redis.Redis(host="127.0.0.1", port=1, socket_timeout=0.5, socket_connect_timeout=0.5)
    res = FleetLease(dead, "node-a", 1, 60, when_down).acquire("llm")
    assert res.granted is granted and "when_redis_down" in res.reason
