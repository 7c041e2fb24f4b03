"""Group identity: which group, rank and leader a process's argv, environment and labels name."""

from __future__ import annotations

import pytest

from vllm_guardian.groups import identity
from vllm_guardian.groups.identity import CONFIGURED, DP, LWS, RAY

SERVE = ("python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m")
LEADER = (*SERVE, "--data-parallel-size", "2", "--data-parallel-size-local", "1",
          "--data-parallel-address", "10.0.0.1", "--data-parallel-rpc-port", "13345")  # fmt: skip
HEADLESS = ("python", "-c", "run_headless", "--headless", "--data-parallel-size", "2",
            "--data-parallel-size-local", "1", "--data-parallel-start-rank", "1",
            "--data-parallel-address", "10.0.0.1", "--data-parallel-rpc-port", "13345")  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "kind", "group", "size", "ranks", "leader"),
    [
        (LEADER, DP, "dp@10.0.0.1:13345", 2, (0,), True),
        (HEADLESS, DP, "dp@10.0.0.1:13345", 2, (1,), False),
        ((*SERVE, "--data-parallel-size=4"), DP, "dp@local", 4, (0, 1, 2, 3), True),
        ((*SERVE, "-dp", "2"), DP, "dp@local", 2, (0, 1), True),
        (
            (
                *SERVE,
                "--data-parallel-size",
                "4",
                "--data-parallel-size-local",
                "2",
                "--data-parallel-start-rank",
                "2",
                "--headless",
                "--data-parallel-address",
                "h0",
            ),
            DP,
            "dp@h0",
            4,
            (2, 3),
            False,
        ),  # fmt: skip
        ((*SERVE, "--distributed-executor-backend", "ray", "--tensor-parallel-size", "16"), RAY, "", None, (), True),
        (("ray::RayWorkerWrapper.execute_method",), RAY, "", None, (), False),
    ],
    ids=[
        "dp-leader",
        "dp-headless-rank1",
        "dp-single-node",
        "dp-short-flag",
        "dp-headless-two-ranks",
        "ray-api-server",
        "ray-worker-title",
    ],  # fmt: skip
)
def test_argv_names_the_group_rank_and_leader(argv, kind, group, size, ranks, leader):
    got = identity.from_argv(argv)
    assert got is not None
    assert (got.kind, got.group, got.size, got.ranks, got.leader) == (kind, group, size, ranks, leader)
    assert got.problems == ()


@pytest.mark.parametrize(
    "argv",
    [(), SERVE, (*SERVE, "--data-parallel-size", "1"), ("python", "train.py")],
    ids=["empty", "single-server", "dp-size-one", "not-vllm"],
)
def test_a_process_without_group_flags_is_in_no_group(argv):
    assert identity.from_argv(argv) is None


def test_the_leader_and_its_headless_rank_derive_the_same_group_name():
    leader, headless = identity.from_argv(LEADER), identity.from_argv(HEADLESS)
    assert leader is not None and headless is not None
    assert leader.group == headless.group
    assert headless.leader_address == "10.0.0.1"


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        ((*SERVE, "--data-parallel-size", "two", "--headless"), "is not a whole number"),
        ((*SERVE, "--data-parallel-size", "99999"), "outside 1..1024"),
        ((*SERVE, "--data-parallel-size", "2", "--data-parallel-rpc-port", "70000"), "outside 1..65535"),
        ((*SERVE, "--data-parallel-size", "2", "--data-parallel-address", "a b;rm"), "not a host name"),
        (
            (*SERVE, "--data-parallel-size", "2", "--data-parallel-start-rank", "1", "--data-parallel-size-local", "4"),
            "exceed --data-parallel-size 2",
        ),  # fmt: skip
    ],
    ids=["size-not-a-number", "size-too-large", "rpc-port-out-of-range", "hostile-address", "ranks-beyond-size"],
)
def test_a_malformed_flag_is_a_problem_named_never_an_exception(argv, problem):
    got = identity.from_argv(argv)
    assert got is not None
    assert any(problem in p for p in got.problems), got.problems


def test_ranks_beyond_the_size_are_clipped_to_the_size():
    argv = (*SERVE, "--data-parallel-size", "2", "--data-parallel-start-rank", "1", "--data-parallel-size-local", "4")
    got = identity.from_argv(argv)
    assert got is not None and got.ranks == (1,)


@pytest.mark.parametrize(
    ("environ", "labels", "group", "size", "ranks", "leader"),
    [
        (
            {"LWS_LEADER_ADDRESS": "vllm-0.vllm.ns", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0"},
            None,
            "lws@vllm-0.vllm.ns",
            2,
            (0,),
            True,
        ),  # fmt: skip
        (
            {"LWS_LEADER_ADDRESS": "vllm-0.vllm.ns", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"},
            None,
            "lws@vllm-0.vllm.ns",
            2,
            (1,),
            False,
        ),  # fmt: skip
        (
            {"LWS_LEADER_ADDRESS": "vllm-3.vllm.ns", "LWS_GROUP_SIZE": "4", "LWS_WORKER_INDEX": "2"},
            {identity.LWS_NAME: "vllm", identity.LWS_GROUP_INDEX: "3"},
            "lws/vllm/3",
            4,
            (2,),
            False,
        ),  # fmt: skip
        (
            {},
            {identity.LWS_NAME: "vllm", identity.LWS_GROUP_INDEX: "0", identity.LWS_WORKER_INDEX: "0"},
            "lws/vllm/0",
            None,
            (0,),
            True,
        ),  # fmt: skip
    ],
    ids=["env-leader", "env-worker", "labels-name-the-group", "labels-only"],
)
def test_leaderworkerset_environment_and_labels_name_the_group(environ, labels, group, size, ranks, leader):
    got = identity.from_lws(environ, labels)
    assert got is not None
    assert (got.kind, got.group, got.size, got.ranks, got.leader) == (LWS, group, size, ranks, leader)


def test_a_pod_without_lws_environment_or_labels_is_no_lws_group():
    assert identity.from_lws({"PATH": "/bin"}, {"app": "vllm"}) is None


def test_hostile_lws_values_become_problems_not_a_group_name():
    got = identity.from_lws(
        {"LWS_LEADER_ADDRESS": "$(reboot)", "LWS_GROUP_SIZE": "-1", "LWS_WORKER_INDEX": "x"},
        {identity.LWS_NAME: "a b"},
    )
    assert got is not None
    assert got.group == "" and got.ranks == () and not got.leader
    assert len(got.problems) == 4, got.problems


def test_dp_inside_lws_takes_the_group_from_lws_and_the_ranks_from_vllm():
    env = {"LWS_LEADER_ADDRESS": "vllm-0.vllm.ns", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}
    got = identity.identify(HEADLESS, env)
    assert got is not None
    assert (got.kind, got.group, got.ranks, got.leader) == (LWS, "lws@vllm-0.vllm.ns", (1,), False)


def test_without_lws_the_argv_decides():
    assert identity.identify(LEADER, {}) == identity.from_argv(LEADER)


def test_a_configured_group_leads_with_rank_zero():
    got = identity.configured(group="g1", rank=0, size=2)
    assert (got.kind, got.leader, got.rank) == (CONFIGURED, True, 0)
    assert not identity.configured(group="g1", rank=1, size=2).leader
