"""Each node raises only its own ranks' findings of a group spread over nodes, naming group, node and rank."""

from __future__ import annotations

import pytest

from vllm_guardian.groups import identity
from vllm_guardian.groups.scope import scope, spread
from vllm_guardian.model import Finding, Kind, Severity

DP: tuple[str, ...] = ("--data-parallel-size", "2", "--data-parallel-size-local", "1")
DP += ("--data-parallel-address", "10.0.0.1", "--data-parallel-rpc-port", "13345")
LEADER = identity.from_argv(("vllm", "serve", "m", *DP))
HEADLESS = identity.from_argv(("vllm", "serve", "m", *DP, "--headless", "--data-parallel-start-rank", "1"))
ONE_NODE = identity.from_argv(("vllm", "serve", "m", "--data-parallel-size", "2"))
G = "dp@10.0.0.1:13345"


def finding(kind: Kind, **signals) -> Finding:
    return Finding(kind, "t", Severity.CRITICAL, "s", signals)


@pytest.mark.parametrize(
    ("ident", "kind", "signals", "kept_rank"),
    [
        (HEADLESS, Kind.BUSY_LOOP, {"dp_rank": 1}, 1),
        (HEADLESS, Kind.ENGINE_STALL, {"dp_rank": 0}, None),
        (LEADER, Kind.ENGINE_STALL, {"dp_rank": 1}, None),
        (LEADER, Kind.BUSY_LOOP, {"dp_rank": 0}, 0),
        (LEADER, Kind.ENGINE_DEAD, {}, 0),
        (HEADLESS, Kind.ENGINE_DEAD, {}, None),
        (HEADLESS, Kind.ENGINE_STALL, {}, None),
        (HEADLESS, Kind.HOST_MEMORY_LEAK, {}, 1),
    ],
    ids=[
        "headless-own-rank",
        "headless-leaders-rank",
        "leader-headless-rank",
        "leader-own-rank",
        "leader-whole-server",
        "headless-whole-server-death",
        "headless-whole-server-stall",
        "headless-own-memory",
    ],  # fmt: skip
)
def test_a_finding_is_kept_only_on_the_node_hosting_its_rank(ident, kind, signals, kept_rank):
    got = scope(ident, "node-x", {kind: finding(kind, **signals)})[kind]
    if kept_rank is None:
        assert got is None
    else:
        assert got is not None and (got.signals["group"], got.signals["node"], got.signals["rank"]) == (
            G,
            "node-x",
            kept_rank,
        )


def test_a_group_on_one_node_is_left_as_it_is():
    f = {Kind.ENGINE_STALL: finding(Kind.ENGINE_STALL, dp_rank=1)}
    assert not spread(ONE_NODE) and scope(ONE_NODE, "n", f) == f
    assert scope(None, "n", f) == f


def test_a_quiet_detector_stays_quiet():
    assert scope(HEADLESS, "n", {Kind.BUSY_LOOP: None}) == {Kind.BUSY_LOOP: None}
