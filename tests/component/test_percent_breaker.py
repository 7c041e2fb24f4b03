"""The percentage breaker on a real Redis shared by several guardians (docs/policy.md, Breaker): at
most the configured share of one model's targets restart within the window, the rest are held, one
page lists what was held."""

from __future__ import annotations

import threading

import pytest

from vllm_guardian.policy.breaker import BreakerResult, PercentBreaker
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


def guardians(client, n=4, fraction=0.5, window=300.0):
    return [
        PercentBreaker(
            client, node=f"node-{i}", max_fraction=fraction, window=window, when_redis_down="deny", target_ttl=60.0
        )
        for i in range(n)
    ]


def test_four_guardians_eight_targets_all_faulting_restart_at_most_half_and_page_once(client):
    fleet = guardians(client)
    for g in fleet:
        g.register("model:llama", ["a", "b"], now=1000.0)
    results: dict[str, BreakerResult] = {}
    barrier = threading.Barrier(8)

    def trip(g, target):
        barrier.wait()
        results[f"{g.node}/{target}"] = g.admit("model:llama", target, now=1001.0)

    threads = [threading.Thread(target=trip, args=(g, t)) for g in fleet for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    granted = sorted(k for k, r in results.items() if r.granted)
    held = sorted(k for k, r in results.items() if not r.granted)
    pages = [r.page for r in results.values() if r.page]
    assert len(results) == 8 and len(granted) == 4 and len(held) == 4
    assert len(pages) == 1 and set(pages[0]) <= set(held)
    assert fleet[0].held("model:llama") == held


def test_a_restart_outside_the_window_no_longer_counts(client):
    a, b = guardians(client, n=2, window=60.0)
    a.register("m", ["x"], now=1000.0)
    b.register("m", ["y"], now=1000.0)
    assert a.admit("m", "x", now=1000.0).granted
    assert not b.admit("m", "y", now=1010.0).granted
    b.register("m", ["y"], now=1059.0)
    a.register("m", ["x"], now=1059.0)
    assert b.admit("m", "y", now=1061.0).granted


def test_a_member_already_admitted_is_admitted_again(client):
    (a,) = guardians(client, n=1)
    a.register("m", ["x", "y"], now=1000.0)
    assert a.admit("m", "x", now=1000.0).granted
    assert a.admit("m", "x", now=1005.0).granted  # a guardian restarted mid-sequence keeps its place
    assert not a.admit("m", "y", now=1005.0).granted


def test_scopes_are_counted_apart(client):
    (a,) = guardians(client, n=1)
    a.register("model:llama", ["x", "y"], now=1000.0)
    a.register("model:qwen", ["z", "w"], now=1000.0)
    assert a.admit("model:llama", "x", now=1000.0).granted
    assert a.admit("model:qwen", "z", now=1000.0).granted


def test_one_target_alone_may_always_restart_once(client):
    (a,) = guardians(client, n=1, fraction=0.1)
    assert a.admit("m", "only", now=1000.0).granted


def test_targets_not_seen_lately_do_not_count_in_the_whole(client):
    (a,) = guardians(client, n=1)
    a.register("m", ["x", "y", "z", "w"], now=1000.0)  # 4 live: 2 may restart
    a.register("m", ["x", "y"], now=1100.0)  # z, w gone (ttl 60 s): 2 live, 1 may restart
    assert a.admit("m", "x", now=1100.0).granted
    assert not a.admit("m", "y", now=1100.0).granted


@pytest.mark.parametrize(("when_down", "granted"), [("deny", False), ("allow", True)], ids=["deny", "allow"])
def test_redis_down_follows_the_fail_safe(when_down, granted):
    b = PercentBreaker(None, node="n", max_fraction=0.5, window=60.0, when_redis_down=when_down, target_ttl=60.0)
    assert b.admit("m", "x", now=0.0).granted is granted
