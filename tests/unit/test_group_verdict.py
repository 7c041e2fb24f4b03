"""Per-rank verdicts: a headless rank judged by its own /proc finding and the leader's engine="k" counters;
one group verdict naming the rank that stopped first."""

from __future__ import annotations

import pytest

from vllm_guardian.groups.verdict import ENGINE_STALL, EngineProgress, RankEvidence, RankState, judge
from vllm_guardian.series import metrics as m

G = "dp@10.0.0.1:13345"
NOW = 1000.0


def busy(it: float, waiting: float = 1.0) -> dict[str, float]:
    return {m.ITERATIONS: it, m.REQ_WAITING: waiting, m.REQ_RUNNING: 0.0}


def test_progress_records_when_an_engines_counters_last_advanced():
    p = EngineProgress()
    p.update({"0": busy(1), "1": busy(5)}, 10.0)
    p.update({"0": busy(2), "1": busy(5)}, 11.0)
    p.update({"0": busy(3), "1": busy(5)}, 12.0)
    assert p.rank(0) == RankState(last_progress=12.0, first_seen=10.0, pending=True)
    assert p.rank(1) == RankState(last_progress=None, first_seen=10.0, pending=True)
    assert p.rank(7) is None


def test_an_idle_engine_is_not_pending():
    p = EngineProgress()
    p.update({"1": busy(5, waiting=0.0)}, 10.0)
    assert p.rank(1) is not None and not p.rank(1).pending  # type: ignore[union-attr]


def ev(rank, node, *, own=None, last=None, first_seen=900.0, pending=True, counters=True):
    state = RankState(last_progress=last, first_seen=first_seen, pending=pending) if counters else None
    return RankEvidence(rank=rank, node=node, pid=100 + rank, own_finding=own, counters=state)


@pytest.mark.parametrize(
    ("ranks", "kind", "first", "stalled", "confirmed"),
    [
        ([ev(0, "node-a", last=999.0), ev(1, "node-b", own="busy_loop", last=980.0)], "busy_loop", 1, (1,), True),
        ([ev(0, "node-a", last=999.0), ev(1, "node-b", last=980.0)], ENGINE_STALL, 1, (1,), True),
        (
            [ev(0, "node-a", last=984.0), ev(1, "node-b", last=975.0), ev(2, "node-b", last=983.0)],
            ENGINE_STALL,
            1,
            (0, 1, 2),
            True,
        ),  # fmt: skip
        ([ev(0, "node-a", last=999.0), ev(1, "node-b", first_seen=970.0)], ENGINE_STALL, 1, (1,), True),
        ([ev(0, "node-a", last=999.0), ev(1, "node-b", own="busy_loop", counters=False)], "busy_loop", 1, (1,), False),
    ],
    ids=[
        "headless-busy-loop-confirmed-by-leader-counters",
        "headless-engine-stall",
        "spreading-stall-names-first",
        "never-progressed-since-first-seen",
        "own-finding-without-leader-counters-is-evidence-only",
    ],  # fmt: skip
)
def test_one_verdict_per_group_naming_the_first_stopped_rank(ranks, kind, first, stalled, confirmed):
    v = judge(G, ranks, now=NOW, stall_after=10.0)
    assert v is not None
    assert (v.kind, v.first.rank, v.stalled, v.confirmed) == (kind, first, stalled, confirmed)
    assert f"rank {first} on {v.first.node} (pid {100 + first})" in v.summary and G in v.summary


@pytest.mark.parametrize(
    "ranks",
    [
        [ev(0, "node-a", last=999.0), ev(1, "node-b", last=995.0)],
        [ev(0, "node-a", last=999.0), ev(1, "node-b", last=900.0, pending=False)],
        [ev(0, "node-a", last=999.0), ev(1, "node-b", own="busy_loop", last=998.0)],
        [],
    ],
    ids=["all-progressing", "idle-rank-is-not-stalled", "own-finding-contradicted-by-counters", "no-ranks"],
)
def test_no_verdict_while_every_rank_with_work_progresses(ranks):
    assert judge(G, ranks, now=NOW, stall_after=10.0) is None


def test_a_spreading_stall_says_which_ranks_wait_on_the_first():
    v = judge(G, [ev(0, "node-a", last=984.0), ev(1, "node-b", last=975.0)], now=NOW, stall_after=10.0)
    assert v is not None and v.summary.endswith("ranks 0 wait on it")
