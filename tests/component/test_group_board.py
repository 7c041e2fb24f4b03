"""Group records through a real Redis: two nodes publish, each reads the other; a forged record is ignored."""

from __future__ import annotations

import json
import time

import pytest

from vllm_guardian.gates import trust
from vllm_guardian.groups.record import STALE, Member, NodeRecord
from vllm_guardian.groups import record as rec
from vllm_guardian.sinks.group_record import GroupBoard, group_key
from vllm_guardian.testing.redis_server import RedisServer

KEYS = trust.Keys(secrets={"fleet": b"f" * 32}, signer="fleet")
G = "dp@127.0.0.1:13345"


@pytest.fixture
def client():
    with RedisServer() as s:
        yield s.client()


def node_record(node: str, rank: int, *, leader: bool, at: float, health: str = "serving") -> NodeRecord:
    return NodeRecord(
        group=G, kind="vllm-dp", node=node, time=at, size=2, leader_address="127.0.0.1",
        members=(Member(rank, 1000 + rank, health, at, leader=leader),),
    )  # fmt: skip


def test_each_node_sees_the_group_both_nodes_published(client):
    now = time.time()
    a, b = GroupBoard(client, KEYS), GroupBoard(client, KEYS)
    a.publish(node_record("node-a", 0, leader=True, at=now))
    b.publish(node_record("node-b", 1, leader=False, at=now, health="stalled"))
    v = b.read(G, now=now, max_age=30)
    leader = v.leader()
    assert leader is not None and leader[0] == "node-a" and leader[1].pid == 1000
    assert v.ranks[1][0] == "node-b" and v.ranks[1][1].health == "stalled"
    assert v.rejected == () and v.missing(2) == ()


def test_a_forged_record_in_redis_names_no_member_and_is_reported(client):
    now = time.time()
    GroupBoard(client, KEYS).publish(node_record("node-a", 0, leader=True, at=now))
    forged = rec.encode(
        node_record("node-x", 1, leader=True, at=now), trust.Keys(secrets={"evil": b"e" * 32}, signer="evil")
    )
    client.hset(group_key(G), "node-x", forged)
    client.hset(group_key(G), "node-y", json.dumps({"garbage": True}))
    v = GroupBoard(client, KEYS).read(G, now=now, max_age=30)
    assert v.leader() is not None and v.leader()[0] == "node-a"  # type: ignore[index]
    assert v.missing(2) == (1,)
    assert sorted(r.reason for r in v.rejected) == [trust.BAD_SIGNATURE, trust.UNSIGNED]


def test_a_node_that_stopped_publishing_goes_stale(client):
    now = time.time()
    GroupBoard(client, KEYS).publish(node_record("node-b", 1, leader=False, at=now - 120))
    v = GroupBoard(client, KEYS).read(G, now=now, max_age=30)
    assert v.ranks == {} and [r.reason for r in v.rejected] == [STALE]


def test_the_group_key_expires_when_no_node_refreshes_it(client):
    GroupBoard(client, KEYS, ttl=5).publish(node_record("node-a", 0, leader=True, at=time.time()))
    assert 0 < client.pttl(group_key(G)) <= 5000


def test_a_withdrawn_node_is_gone_from_the_group(client):
    now = time.time()
    board = GroupBoard(client, KEYS)
    board.publish(node_record("node-a", 0, leader=True, at=now))
    board.publish(node_record("node-b", 1, leader=False, at=now))
    board.withdraw(G, "node-b")
    assert board.read(G, now=now, max_age=30).missing(2) == (1,)
