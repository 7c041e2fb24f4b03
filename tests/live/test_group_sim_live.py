"""Live: the simulator's multi-node data-parallel group (``sim.vllm.multi_node``).

A leader (API server + rank 0) and a headless rank 1 run as two process trees in their own sessions,
joined over the leader's ``--data-parallel-rpc-port``, as vLLM runs a secondary node ``--headless``.
"""

from __future__ import annotations

import os

import pytest

from vllm_guardian.sim.control import metric_value, read_cmdline
from tests.support.sim_group import SimGroup
from tests.support.wait import poll

pytestmark = pytest.mark.live


@pytest.fixture
def group(tmp_path):
    g = SimGroup.start(startup_delay=1.0, log_dir=tmp_path)
    try:
        g.wait_ready(60)
        yield g
    finally:
        g.stop()
        assert g.leftovers() == ()


def test_the_headless_rank_is_its_own_tree_with_no_http_api(group):
    rank1 = group.member.rank_pid(1)
    assert read_cmdline(rank1).startswith("VLLM::EngineCore_DP1")
    assert group.leader.rank_pid(1) is None and group.leader.rank_pid(0) is not None
    assert os.getsid(group.member.pid) != os.getsid(group.leader.pid)
    assert group.member.health(timeout=1.0) is None  # nothing listens at the headless node's --port
    assert group.leader.state()["engines"][1]["pid"] == rank1


def test_the_leader_metrics_carry_every_rank_the_headless_one_too(group):
    for _ in range(4):
        group.leader.complete("spread me", max_tokens=2)
    page = group.leader.metrics_text()
    done = [metric_value(page, "vllm:request_success_total", engine=str(k), finished_reason="length") for k in (0, 1)]
    assert all(d and d >= 1 for d in done), done


def test_a_fault_for_rank_1_reaches_the_headless_node(group):
    group.leader.set_fault("busy_loop", rank=1)
    faults = poll(lambda: (f := [e["stats"]["faults"] for e in group.leader.state()["engines"]])[1] and f, 5)
    assert faults == [[], ["busy_loop"]]
    assert group.leader.complete("rank 0 serves", max_tokens=2, timeout=10)["choices"]


def test_the_headless_node_exits_when_its_leader_goes(group):
    group.leader.stop()
    assert group.member.wait(timeout=15) == 0
