"""The group action in the order each deployment kind needs; each step carried out by the node that hosts it."""

from __future__ import annotations

import pytest

from vllm_guardian.groups.identity import DP, LWS, RAY
from vllm_guardian.groups.plan import DELETE_POD, RESTART, START, STOP, plan
from vllm_guardian.groups.record import Member


def rank(r: int, node: str, leader: bool = False) -> tuple[int, tuple[str, Member]]:
    return r, (node, Member(r, 100 + r, "serving", None, leader=leader))


GROUP = dict([rank(0, "node-a", leader=True), rank(1, "node-b"), rank(2, "node-c"), rank(3, "node-b")])


@pytest.mark.parametrize(
    ("kind", "steps"),
    [
        (
            DP,
            [
                ("node-b", (1, 3), STOP),
                ("node-c", (2,), STOP),
                ("node-a", (0,), RESTART),
                ("node-b", (1, 3), START),
                ("node-c", (2,), START),
            ],
        ),  # fmt: skip
        (RAY, [("node-a", (0,), RESTART)]),
        (LWS, [("node-a", (0,), DELETE_POD)]),
    ],
    ids=["vllm-dp-headless-stopped-first-started-after-leader", "ray-restarts-the-api-server", "lws-recreates"],
)
def test_the_plan_follows_the_deployment_kind(kind, steps):
    got = plan(kind, GROUP)
    assert [(s.node, s.ranks, s.action) for s in got] == steps
    assert [s.index for s in got] == list(range(len(steps)))


@pytest.mark.parametrize(
    ("kind", "ranks"),
    [(DP, dict([rank(1, "node-b")])), ("unknown-kind", GROUP)],
    ids=["no-known-leader", "unknown-kind"],
)
def test_no_plan_when_the_group_is_not_understood(kind, ranks):
    assert plan(kind, ranks) == ()
