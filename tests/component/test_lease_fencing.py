"""The fleet lease is checked, with its fence token, before the stop: a restart whose grant was lost
(a failover of the fleet store, an expiry) stops nothing and says why. A real Redis, a fake kernel."""

from __future__ import annotations

import pytest

from tests.support.remediation_world import API, World
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


def test_a_lease_still_held_is_checked_before_the_stop_and_the_restart_goes_on(tmp_path, client):
    w = World(tmp_path)
    w.rem = w.new_remediator(lease=FleetLease(client, "n1", 1, 600, "deny"))
    inc = w.open()
    assert w.consider(inc) == "started"
    w.step(1, n=8)
    assert (API, 15) in w.control.signals
    assert ("fleet_lease", "ok") in w.actions(inc)
    assert w.rem.sequences["llm"].lease_token == 1


def test_a_lease_lost_before_the_stop_stops_nothing_and_escalates(tmp_path, client):
    w = World(tmp_path)
    lease = FleetLease(client, "n1", 1, 600, "deny")
    w.rem = w.new_remediator(lease=lease)
    inc = w.open()
    w.holding.add("llm")  # the evidence is still being captured: draining, not stopping yet
    w.consider(inc)
    w.step(1, n=2)  # the lease is granted (an off-loop job, picked up on the next tick); draining begins
    seq = w.rem.sequences["llm"]
    assert seq.phase.value == "draining" and seq.lease_token is not None
    client.delete(lease.key(0))  # the master failed over to a replica that never saw the grant
    assert FleetLease(client, "n2", 1, 600, "deny").acquire("other").granted  # and another guardian took it
    w.holding.clear()
    w.step(1, n=8)
    assert w.control.signals == []  # nothing stopped
    assert seq.outcome == "failed" and "not stopping" in seq.detail and "lost" in seq.detail
    assert "n2/other" in client.get(lease.key(0))  # the new holder's grant is left alone
