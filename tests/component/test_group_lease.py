"""The group lease through a real Redis: one holder at a time; only the holder renews or releases it."""

from __future__ import annotations

import pytest

from vllm_guardian.sinks.group_lease import GroupLease, lease_key
from vllm_guardian.testing.redis_server import RedisServer

G = "dp@127.0.0.1:13345"


@pytest.fixture
def client():
    with RedisServer() as s:
        yield s.client()


def test_exactly_one_of_two_nodes_gets_the_lease(client):
    a, b = GroupLease(client, "node-a"), GroupLease(client, "node-b")
    assert [a.acquire(G, 30), b.acquire(G, 30)] == [True, False]
    assert a.holder(G) == b.holder(G) == "node-a"


def test_the_holder_renews_and_the_other_node_still_cannot_take_it(client):
    a, b = GroupLease(client, "node-a"), GroupLease(client, "node-b")
    assert a.acquire(G, 30) and a.acquire(G, 30)
    assert not b.acquire(G, 30)


def test_a_released_lease_can_be_taken_by_the_other_node(client):
    a, b = GroupLease(client, "node-a"), GroupLease(client, "node-b")
    a.acquire(G, 30)
    assert a.release(G)
    assert b.acquire(G, 30) and a.holder(G) == "node-b"


def test_a_squatted_lease_cannot_be_renewed_or_released_by_the_node_that_lost_it(client):
    a = GroupLease(client, "node-a")
    a.acquire(G, 30)
    client.set(lease_key(G), "node-a forged-token")  # someone with Redis access overwrites it
    assert not a.renew(G, 30)
    assert not a.release(G)
    assert client.get(lease_key(G)) in (b"node-a forged-token", "node-a forged-token")


def test_a_lease_expires_if_its_holder_stops_renewing(client):
    a = GroupLease(client, "node-a")
    a.acquire(G, 0.2)
    assert 0 < client.pttl(lease_key(G)) <= 200


def test_each_grant_of_a_group_carries_a_larger_fence_token(client):
    a, b = GroupLease(client, "node-a"), GroupLease(client, "node-b")
    a.acquire(G, 30)
    first = a.fence(G)
    a.release(G)
    b.acquire(G, 30)
    second = b.fence(G)
    assert first is not None and second is not None and second > first
    assert a.fence(G) is None


def test_a_lease_lost_to_a_failover_fails_the_check_before_the_next_step(client):
    a, b = GroupLease(client, "node-a"), GroupLease(client, "node-b")
    a.acquire(G, 30)
    assert a.check(G)
    client.delete(lease_key(G))  # the new master never saw the grant
    assert b.acquire(G, 30)
    assert not a.check(G)


def test_a_grant_no_replica_acknowledges_is_given_back(client):
    a = GroupLease(client, "node-a", replicas=1, replica_timeout=0.1)
    assert not a.acquire(G, 30)
    assert client.get(lease_key(G)) is None and a.fence(G) is None
