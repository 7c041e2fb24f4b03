"""Live: the group action on the simulator's multi-node group, two real ``guardian run`` (node-a: the
leader, node-b: the headless rank 1) in remediate mode on one Redis.

A busy loop in the headless rank: node-b opens the group incident, takes the group lease (the one
actor), asks every node for its ranks' stacks, and restarts its member in the group plan's order:
it stops the headless rank, asks node-a (signed, as the lease holder) to restart the leader, waits
for a new leader process, then starts the headless rank, which connects to it. The group serves
again (rank 1 answers through the leader) and no further action follows. The recovery time is
printed for docs/measured.md; the deadlines are failure bounds, not performance claims.
"""

from __future__ import annotations

import http.client
import json
import sys
import time

import psutil
import pytest

from vllm_guardian.sim.control import LoadGenerator, SimServer
from vllm_guardian.testing.redis_server import RedisServer
from tests.support.guardian_process import GuardianProcess
from tests.support.sim_group import SimGroup
from tests.support.wait import poll

pytestmark = pytest.mark.live

KEY_ENV = "GUARDIAN_GROUP_TEST_KEY"
QUIET_S = 10.0  # after recovery: no second action in this long


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
        for p in psutil.process_iter(["cmdline"]):  # what the guardians started in the group's name
            if f"--data-parallel-rpc-port {g.rpc_port}" in " ".join(p.info["cmdline"] or ()):
                for q in [*p.children(recursive=True), p]:
                    q.kill()


def guardian(tmp_path, node: str, target: dict, redis_url: str) -> GuardianProcess:
    d = tmp_path / node
    d.mkdir()
    extra = {
        "node": node,
        "targets": [target],
        "alerts": {"redis_url": redis_url},
        "gates": {"trust": {"key_env": KEY_ENV}},
        "groups": {"interval": 1.0, "order_timeout": 60.0},
    }
    return GuardianProcess(d, 0, name=target["name"], extra=extra).start()


def restart_by(server: SimServer, tmp_path, name: str) -> dict:
    return {
        "mode": "command",
        "command": [sys.executable, *server.argv[1:]],
        "stop_timeout": 5,
        "ready_timeout": 90,
        "log_file": str(tmp_path / f"{name}-restarted.log"),
    }


def restarts(g: GuardianProcess) -> list[dict]:
    """The restart sequences the node ran (one ``starting`` action each), over all its incidents."""
    return [a for i in g.incidents() for a in i.get("actions", []) if a["name"] == "starting"]


def verified(g: GuardianProcess) -> list[dict]:
    return [a for i in g.incidents() for a in i.get("actions", []) if a["name"] == "verifying" and a["status"] == "ok"]


def test_a_hung_headless_rank_restarts_the_group_in_plan_order_with_one_actor(
    tmp_path, sim_group, redis_server, monkeypatch
):
    monkeypatch.setenv(KEY_ENV, "group-test-secret-0123456789")
    leader, member = sim_group.leader, sim_group.member
    a_target = {
        "name": "leader",
        "match": {"port": leader.port},
        "restart": restart_by(leader, tmp_path, "leader"),
        "drain": {"timeout": 0},  # requests stuck on the hung rank never drain
    }
    b_target = {
        "name": "rank1",
        "match": {"cmdline_regex": f"--data-parallel-rpc-port {sim_group.rpc_port} --headless"},
        "restart": restart_by(member, tmp_path, "rank1"),
        "drain": {"timeout": 0},
    }
    a = guardian(tmp_path, "node-a", a_target, redis_server.url)
    b = guardian(tmp_path, "node-b", b_target, redis_server.url)
    try:
        assert a.wait_ready(30, name="leader"), a.log_text()
        assert b.wait_ready(30, name="rank1"), b.log_text()
        old_rank1 = member.rank_pid(1)
        with LoadGenerator(leader.url, leader.model, clients=2, max_duration=60, request_timeout=20) as load:
            time.sleep(2)
            leader.set_fault("busy_loop", rank=1)
            onset = time.time()
            inc = b.wait_incident("busy_loop", timeout=60)
            load.stop(timeout=1)
        assert inc is not None, b.log_text()
        served = poll(lambda: _rank1_answers(leader.port), 150, every=1.0)
        assert served, a.log_text() + b.log_text()
        recovered = time.time() - onset
        done = poll(lambda: verified(b) or None, 60)
        assert done, a.log_text() + b.log_text()
        log_a, log_b = a.log_text(), b.log_text()
        assert "asked by the group's lease holder" in log_a and "every node asked" in log_b
        assert "every node asked" not in log_a  # one actor: node-b holds the lease
        order = [
            x["name"] for x in b.incidents()[0]["actions"] if x["name"] in ("stopping", "group_order", "verifying")
        ]
        assert list(dict.fromkeys(order)) == ["stopping", "group_order", "verifying"], b.incidents()[0]["actions"]
        wait = next(x for x in b.incidents()[0]["actions"] if x["name"] == "group_order")
        assert wait["detail"] == "group plan: the leader on node-a restarts first (asked, signed)"
        new_rank1 = poll(lambda: _headless_rank1(sim_group.rpc_port), 10)
        assert new_rank1 not in (None, old_rank1)
        time.sleep(QUIET_S)  # no second action
        assert len(restarts(b)) == 1 and [i["status"] for i in b.incidents()] == ["resolved"]
        assert len(restarts(a)) <= 1 and all(i["status"] == "resolved" for i in a.incidents())
        print(f"\ngroup action: busy loop in headless rank 1 -> group serving again {recovered:.1f}s after onset")
    finally:
        a_rc, b_rc = a.stop(), b.stop()
        assert (a_rc, b_rc) == (0, 0), a.log_text() + b.log_text()


def _rank1_answers(port: int) -> bool | None:
    """A completion sent to rank 1 (vLLM's ``X-data-parallel-rank``) is answered through the leader."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        body = json.dumps({"model": "sim-model", "prompt": "back?", "max_tokens": 2})
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json", "X-data-parallel-rank": "1"})
        return conn.getresponse().status == 200 or None
    except OSError:
        return None
    finally:
        conn.close()


def _headless_rank1(rpc: int) -> int | None:
    for p in psutil.process_iter(["cmdline", "ppid"]):
        cmd = p.info["cmdline"] or []
        if cmd[:1] == ["VLLM::EngineCore_DP1"]:
            parent = psutil.Process(p.info["ppid"])
            if f"--data-parallel-rpc-port {rpc}" in " ".join(parent.cmdline()):
                return p.pid
    return None
