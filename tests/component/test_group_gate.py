"""One actor per group, through a real Redis: a group member's restart needs the group lease and a fleet slot."""

from __future__ import annotations

import pytest

from vllm_guardian.loop.group_gate import GroupGate
from vllm_guardian.remediation.lease import FleetLease
from vllm_guardian.sinks.group_lease import GroupLease
from vllm_guardian.testing.redis_server import RedisServer

G = "dp@127.0.0.1:13345"
GROUPS = {"leader": G, "rank1": G}


@pytest.fixture
def client():
    with RedisServer() as s:
        yield s.client()


def gate(client, node: str, fleet_slots: int = 2) -> GroupGate:
    fleet = FleetLease(client, node, fleet_slots, 60, "deny")
    return GroupGate(fleet, GroupLease(client, node), GROUPS.get, 60)


def test_two_nodes_acting_on_one_group_exactly_one_gets_to_act(client):
    a, b = gate(client, "node-a"), gate(client, "node-b")
    got_b = b.acquire("rank1")
    got_a = a.acquire("leader")
    assert got_b.granted and "group lease of " + G in got_b.reason
    assert not got_a.granted and got_a.reason == f"group {G} is being acted on by node-b (group lease)"


def test_once_the_actor_is_done_the_other_node_may_act(client):
    a, b = gate(client, "node-a"), gate(client, "node-b")
    got = b.acquire("rank1")
    assert b.release("rank1", got.slot, got.token)
    assert a.acquire("leader").granted and b.holding() == {}


def test_a_restart_refused_a_fleet_slot_gives_the_group_lease_back(client):
    FleetLease(client, "node-z", 1, 60, "deny").acquire("elsewhere")  # the only fleet slot is taken
    b = gate(client, "node-b", fleet_slots=1)
    assert not b.acquire("rank1").granted
    assert GroupLease(client, "node-a").holder(G) is None and b.holding() == {}


def test_a_target_in_no_group_needs_only_its_fleet_slot(client):
    a, b = gate(client, "node-a"), gate(client, "node-b")
    assert b.acquire("rank1").granted
    assert a.acquire("solo").granted  # not a group member: the group lease is not asked for


def test_the_holder_renews_both_leases(client):
    b = gate(client, "node-b")
    got = b.acquire("rank1")
    assert b.renew("rank1", got.slot, got.token)


def test_a_restart_the_lease_holder_asked_for_takes_neither_lease_and_forgets_the_ask_when_done(client):
    a, b = gate(client, "node-a", fleet_slots=1), gate(client, "node-b", fleet_slots=1)
    holder = b.acquire("rank1")  # node-b acts: the group lease and the one fleet slot
    a.delegate("leader", G)  # node-b asked node-a (signed, believed) for the plan's leader step
    step = a.acquire("leader")
    assert step.granted and step.slot is None and "asked by the holder of the group lease" in step.reason
    a.release("leader", step.slot, step.token)
    assert not a.acquire("leader").granted  # no standing permission: the next restart needs the lease again
    assert b.release("rank1", holder.slot, holder.token)
