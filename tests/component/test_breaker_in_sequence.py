"""The percentage breaker as the restart sequence asks it (docs/policy.md, Breaker): four guardians
on one real Redis, each with a target of the same model faulting at once — half go on to drain, the
rest wait in the lease phase, and exactly one of them pages with what is held."""

from __future__ import annotations

import pytest

from tests.support.remediation_world import World
from vllm_guardian.testing.redis_server import RedisServer

BREAKER = {
    "breaker": {"enabled": True, "scope": "model", "max_fraction": 0.5, "window": 300},
    "fleet": {"max_concurrent_restarts": 8},
}


@pytest.fixture(scope="module")
def redis_server():
    with RedisServer() as r:
        yield r


def fleet(tmp_path, client, n=4):
    worlds = []
    for i in range(n):
        w = World(tmp_path / f"node-{i}", policy=BREAKER)
        w.rem = w.new_remediator(fleet_client=client, node=f"node-{i}")
        worlds.append(w)
    return worlds


def test_four_guardians_one_model_all_faulting_half_drain_the_rest_are_held_one_pages(tmp_path, redis_server):
    client = redis_server.client()
    client.flushall()
    worlds = fleet(tmp_path, client)
    for w in worlds:
        w.step()  # each registers its target under model:m
    incidents = [w.open() for w in worlds]
    for w, inc in zip(worlds, incidents, strict=True):
        assert w.consider(inc) == "started"
    for _ in range(3):
        for w in worlds:
            w.step()
    draining = [w for w in worlds if w.rem.sequences["llm"].phase.value != "lease"]
    held = [w for w in worlds if w.rem.sequences["llm"].phase.value == "lease"]
    assert len(draining) == 2 and len(held) == 2
    pages = [
        (w, a)
        for w, inc in zip(worlds, incidents, strict=True)
        for a in w.incident(inc.id).actions
        if a.name == "breaker"
    ]
    escalated = [(w, a) for w, a in pages if a.status == "escalated"]
    assert len(escalated) == 1, pages
    paging, action = escalated[0]
    assert paging in held
    assert f"{paging.rem.settings.node}/llm" in action.detail.split("held: ", 1)[1]
    assert [a.status for w, a in pages if w is not paging] == ["held"] * (len(held) - 1)
    assert sum(len(w.rem.take_escalated()) for w in worlds) == 1  # its alert goes out again, once


def test_with_redis_down_the_fail_safe_holds_the_restart(tmp_path):
    (w,) = fleet(tmp_path, None, n=1)
    inc = w.open()
    w.consider(inc)
    w.step(1, n=3)
    assert w.rem.sequences["llm"].phase.value == "lease" and w.control.signals == []
    assert ("breaker", "held") in w.actions(inc)
