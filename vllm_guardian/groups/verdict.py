"""One verdict per group: which rank stopped first, on which node, in which process (pure).

A headless rank has no ``/metrics`` of its own. Its node judges it by two things together:

- its own /proc signals (``RankEvidence.own_finding``: what the node's detectors say of the rank's
  process, e.g. ``busy_loop``), and
- the leader's per-engine counters for that rank (vLLM's ``engine="<rank>"`` label on the leader's
  ``/metrics``): ``EngineProgress`` keeps, per rank, when its counters last advanced and whether work
  waits at it.

A rank is stalled when work waits at it and its counters have not advanced for ``stall_after``
seconds. ``judge`` makes one ``GroupVerdict`` of every stalled rank: a stall that spreads (the other
ranks soon wait on the one that stopped, in vLLM DP's collective steps) is one group incident naming
the rank whose counters stopped first, not one incident per rank. A rank whose own /proc finding is
not matched by the leader's counters (the leader unreachable, the counters unknown) is evidence only:
the verdict is not ``confirmed`` and nothing acts on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vllm_guardian.series import metrics as m

ENGINE_STALL = "engine_stall"
PROGRESS = (m.ITERATIONS, m.GEN_TOKENS, m.PROMPT_TOKENS, m.SUCCESS)
PENDING = (m.REQ_RUNNING, m.REQ_WAITING)


@dataclass(frozen=True)
class RankState:
    last_progress: float | None  # when the rank's counters last advanced (None: not seen advancing yet)
    first_seen: float
    pending: bool


class EngineProgress:
    """Per rank, from successive leader pages (``MetricsPage.engines``): when its counters last moved."""

    def __init__(self) -> None:
        self._last: dict[str, dict[str, float]] = {}
        self._state: dict[str, RankState] = {}

    def update(self, engines: Mapping[str, Mapping[str, float]], now: float) -> None:
        for label, values in engines.items():
            prev = self._last.get(label)
            state = self._state.get(label)
            pending = any(values.get(k, 0.0) > 0 for k in PENDING)
            moved = prev is not None and any(values.get(k, 0.0) > prev.get(k, 0.0) for k in PROGRESS)
            if state is None:
                state = RankState(last_progress=None, first_seen=now, pending=pending)
            state = RankState(
                last_progress=now if moved else state.last_progress, first_seen=state.first_seen, pending=pending
            )
            self._state[label] = state
            self._last[label] = dict(values)

    def rank(self, rank: int) -> RankState | None:
        return self._state.get(str(rank))


@dataclass(frozen=True)
class RankEvidence:
    rank: int
    node: str
    pid: int
    own_finding: str | None  # the node's own /proc verdict on the rank's process (None: nothing seen)
    counters: RankState | None  # the leader's per-engine counters for the rank (None: not read)


@dataclass(frozen=True)
class GroupVerdict:
    group: str
    kind: str  # the first rank's own finding when it has one, else engine_stall
    first: RankEvidence  # the rank that stopped first
    stalled: tuple[int, ...]  # every stalled rank, the first one included
    confirmed: bool  # the leader's counters agree (only a confirmed verdict may lead to an action)
    summary: str


def _stopped_at(ev: RankEvidence, now: float, stall_after: float) -> float | None:
    """When the rank stopped (its last progress, or first sight), if it is stalled now; else None."""
    c = ev.counters
    if c is None or not c.pending:
        return None
    since = c.last_progress if c.last_progress is not None else c.first_seen
    return since if now - since >= stall_after else None


def judge(group: str, ranks: Sequence[RankEvidence], *, now: float, stall_after: float) -> GroupVerdict | None:
    """The one verdict on ``group`` (None: every rank progresses or has nothing to do)."""
    stopped = [(at, ev) for ev in ranks if (at := _stopped_at(ev, now, stall_after)) is not None]
    if stopped:
        stopped.sort(key=lambda p: (p[0], p[1].own_finding is None, p[1].rank))
        first = stopped[0][1]
        confirmed = True
        rank_list = tuple(sorted(ev.rank for _, ev in stopped))
    else:
        unmatched = sorted((ev for ev in ranks if ev.own_finding and ev.counters is None), key=lambda e: e.rank)
        if not unmatched:
            return None
        first, confirmed, rank_list = unmatched[0], False, (unmatched[0].rank,)
    kind = first.own_finding or ENGINE_STALL
    others = [r for r in rank_list if r != first.rank]
    summary = (
        f"group {group}: rank {first.rank} on {first.node} (pid {first.pid}) {kind}"
        + (f"; ranks {', '.join(map(str, others))} wait on it" if others else "")
        + ("" if confirmed else "; the leader's counters for it were not read: evidence only")
    )
    return GroupVerdict(group=group, kind=kind, first=first, stalled=rank_list, confirmed=confirmed, summary=summary)
