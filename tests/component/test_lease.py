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
    assert a.release("llm", first.slot, first.token)
    assert b.acquire("llm").granted


def test_taking_a_slot_we_hold_again_succeeds(client):
    a = FleetLease(client, "node-a", 1, 60, "deny")
    assert a.acquire("llm").granted
    first = a.acquire("llm")
    again = a.acquire("llm")  # a guardian restarted mid-sequence keeps its lease, and its token
    assert again.granted and "already ours" in again.reason and again.token == first.token


def test_only_the_holder_can_release_a_slot(client):
    a = FleetLease(client, "node-a", 1, 60, "deny")
    b = FleetLease(client, "node-b", 1, 60, "deny")
    held = a.acquire("llm")
    assert not b.release("llm", held.slot, held.token)
    assert not b.acquire("llm").granted


def test_a_cap_of_two_admits_two(client):
    leases = [FleetLease(client, f"node-{i}", 2, 60, "deny") for i in range(3)]
    got = [lease.acquire("llm").granted for lease in leases]
    assert got == [True, True, False]


def test_the_ttl_frees_a_slot_whose_holder_died(client):
    a = FleetLease(client, "node-a", 1, 60, "deny")
    held = a.acquire("llm")
    assert client.ttl(f"guardian:lease:{{restart}}:{held.slot}") > 0


@pytest.mark.parametrize("when_down, granted", [("allow", True), ("deny", False)])
def test_when_redis_is_down_the_configured_fail_safe_decides(redis_server, when_down, granted):
    import redis

    dead = redis.Redis(host="127.0.0.1", port=1, socket_timeout=0.5, socket_connect_timeout=0.5)
    res = FleetLease(dead, "node-a", 1, 60, when_down).acquire("llm")
    assert res.granted is granted and "when_redis_down" in res.reason


def test_every_grant_carries_a_larger_fence_token(client):
    a = FleetLease(client, "node-a", 1, 60, "deny")
    b = FleetLease(client, "node-b", 1, 60, "deny")
    first = a.acquire("llm")
    a.release("llm", first.slot, first.token)
    second = b.acquire("llm")
    assert second.token is not None and first.token is not None and second.token > first.token


def test_a_grant_lost_to_another_guardian_fails_the_check_and_renewal(client):
    a = FleetLease(client, "node-a", 1, 60, "deny")
    held = a.acquire("llm")
    assert a.check("llm", held.slot, held.token).granted
    client.delete(a.key(0))  # a failover to a replica that never saw the grant; or an expiry
    b = FleetLease(client, "node-b", 1, 60, "deny")
    assert b.acquire("llm").granted
    lost = a.check("llm", held.slot, held.token)
    assert not lost.granted and "lost" in lost.reason and "node-b/llm" in lost.reason
    assert not a.renew("llm", held.slot, held.token)
    assert not a.release("llm", held.slot, held.token)  # the new holder's slot is left alone


def test_a_stale_token_of_our_own_does_not_pass_the_check(client):
    a = FleetLease(client, "node-a", 1, 60, "deny")
    old = a.acquire("llm")
    a.release("llm", old.slot, old.token)
    new = a.acquire("llm")
    assert not a.check("llm", old.slot, old.token).granted
    assert a.check("llm", new.slot, new.token).granted


def test_a_grant_no_replica_acknowledges_is_given_back_and_not_acted_on(client):
    lonely = FleetLease(client, "node-a", 1, 60, "deny", replicas=1, replica_timeout=0.1)
    res = lonely.acquire("llm")
    assert not res.granted and "acknowledged by 0 of 1 replica" in res.reason and "not acting" in res.reason
    assert client.get(lonely.key(0)) is None  # the slot is free again for a guardian whose grant sticks
