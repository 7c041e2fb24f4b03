"""Live: a multi-node data-parallel group (the simulator's leader + headless rank 1) watched by two real
``guardian run`` processes, ``node-a`` (the leader's tree) and ``node-b`` (the headless tree), on one
Redis with shared trust keys.

Each guardian publishes its signed group record; node-b finds the leader's API port in node-a's
record and reads the leader's ``/metrics`` for its rank. A hang in the headless rank is one incident,
on node-b, naming group, node, rank and process; node-a opens none, and both guardians' status shows
rank 1 on node-b with that incident. Onset → incident times are printed for docs/measured.md; the
deadlines are failure bounds, not performance claims.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import pytest

from vllm_guardian.sim.control import LoadGenerator
from vllm_guardian.testing.redis_server import RedisServer
from tests.support.guardian_process import GuardianProcess
from tests.support.sim_group import SimGroup
from tests.support.wait import poll

pytestmark = pytest.mark.live

KEY_ENV = "GUARDIAN_GROUP_TEST_KEY"
OTHERS_WINDOW_S = 8.0


@pytest.fixture
def redis_server():
    with RedisServer() as r:
        yield r


@pytest.fixture
def sim_group(tmp_path):
    g = SimGroup.start(startup_delay=1.0, log_dir=tmp_path)
    try:
        g.wait_ready(60)
        yield g
    finally:
        g.stop()
        assert g.leftovers() == ()


def guardian(tmp_path, node: str, target: dict, redis_url: str, *args: str) -> GuardianProcess:
    d = tmp_path / node
    d.mkdir()
    extra = {
        "node": node,
        "targets": [target],
        "alerts": {"redis_url": redis_url},
        "gates": {"trust": {"key_env": KEY_ENV}},
        "groups": {"interval": 1.0},
    }
    return GuardianProcess(d, 0, name=target["name"], extra=extra).start(*args)


@pytest.fixture
def guardians(tmp_path, sim_group, redis_server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "group-test-secret-0123456789")
    rpc = sim_group.rpc_port
    leader = {"name": "leader", "match": {"port": sim_group.leader.port}}
    headless = {"name": "rank1", "match": {"cmdline_regex": f"--data-parallel-rpc-port {rpc} --headless"}}
    a = guardian(tmp_path, "node-a", leader, redis_server.url, "--dry-run")
    b = guardian(tmp_path, "node-b", headless, redis_server.url, "--dry-run")
    try:
        assert a.wait_ready(30, name="leader"), a.log_text()
        assert b.wait_ready(30, name="rank1"), b.log_text()  # ready: it reached its leader through the record
        yield a, b
    finally:
        assert a.stop() == 0, a.log_text()
        assert b.stop() == 0, b.log_text()


def group_of(g: GuardianProcess) -> dict | None:
    st = g.status()
    return st["groups"][0] if st and st.get("groups") else None


def test_each_node_publishes_its_ranks_and_both_see_the_whole_group(guardians, sim_group):
    a, b = guardians
    for g in (a, b):
        grp = poll(partial(whole_group, g), 15)
        assert grp is not None, g.log_text()
        assert grp["group"] == f"dp@127.0.0.1:{sim_group.rpc_port}" and grp["leader_node"] == "node-a"
        by_rank = {r["rank"]: r for r in grp["ranks"]}
        assert (by_rank[0]["node"], by_rank[0]["leader"]) == ("node-a", True)
        assert (by_rank[1]["node"], by_rank[1]["pid"]) == ("node-b", sim_group.member.rank_pid(1))
    assert b.require_target("rank1")["api_url"] == sim_group.leader.url


def whole_group(g: GuardianProcess) -> dict | None:
    grp = group_of(g)
    return grp if grp is not None and len(grp["ranks"]) == 2 else None


HANGS = {
    "the headless rank spinning": ("busy_loop", "busy_loop"),
    "the headless rank stalled": ("stall", "engine_stall"),
}


@pytest.mark.parametrize("fault, kind", HANGS.values(), ids=HANGS.keys())
def test_a_hang_in_the_headless_rank_is_one_group_incident_naming_node_b_rank_1(guardians, sim_group, fault, kind):
    a, b = guardians
    leader = sim_group.leader
    with LoadGenerator(leader.url, leader.model, clients=4, max_duration=120, request_timeout=90) as load:
        time.sleep(3)
        leader.set_fault(fault, rank=1)
        onset = time.time()
        inc = b.wait_incident(kind, timeout=60)
        time.sleep(OTHERS_WINDOW_S if inc else 0)
        seen_on_a = group_of(a)
        load.stop(timeout=1)
    assert inc is not None, b.log_text()
    sig = inc["signals"]
    group = f"dp@127.0.0.1:{sim_group.rpc_port}"
    assert (sig["group"], sig["node"], sig["rank"]) == (group, "node-b", 1)
    assert (sig["pid"], sig["process_title"]) == (sim_group.member.rank_pid(1), "VLLM::EngineCore_DP1")
    assert [i["kind"] for i in b.incidents()] == [kind]
    assert a.incidents() == []  # the leader's node opens no stall of its own
    assert seen_on_a is not None, a.log_text()
    rank1 = next(r for r in seen_on_a["ranks"] if r["rank"] == 1)
    assert (rank1["node"], rank1["health"], rank1["incident"]) == ("node-b", "stalled", inc["id"])
    linked = poll(partial(stacks_linked, b, inc["id"]), 30)
    assert linked is not None and sorted(linked) == ["node-a", "node-b"], b.log_text()
    for node, act in linked.items():  # each node's stacks of its own rank, in the file it named
        rank = 0 if node == "node-a" else 1
        assert act["status"] == "ok" and f"rank {rank} " in act["detail"], act
        assert "Thread" in Path(act["detail"].split(" ")[-1]).read_text()
    print(f"\ngroup DP=2 {fault} in headless rank 1: onset->{kind} on node-b {inc['opened_at'] - onset:.1f}s")


def stacks_linked(g: GuardianProcess, incident: str) -> dict | None:
    """node -> the ``group_stacks`` action linked on the incident, once both nodes answered."""
    inc = next((i for i in g.incidents() if i["id"] == incident), None)
    acts = {a["detail"].split(":")[0]: a for a in (inc or {}).get("actions", []) if a["name"] == "group_stacks"}
    return acts if len(acts) == 2 else None
