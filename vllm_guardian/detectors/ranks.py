"""The engines of a data-parallel server, each with its process: what per-rank judgements read.

Reads the per-engine series the HTTP probe writes (subject ``engine:<k>``, only when the
``/metrics`` page shows more than one engine: vLLM's ``engine="k"`` label) and the target's
process titles (``VLLM::EngineCore_DP<k>``, with its descendants). Decides nothing; busy_loop
and engine_stall judge each rank on its own counters with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_guardian.detectors.hot_threads import rank_of
from vllm_guardian.detectors.view import TargetView
from vllm_guardian import proctree
from vllm_guardian.model import ProcessInfo, Role, Target
from vllm_guardian.series import metrics as m

_PREFIX = m.engine_subject("")  # "engine:"


@dataclass(frozen=True)
class Rank:
    """One engine of a data-parallel server."""

    subject: str  # its series' subject, ``engine:<k>``
    rank: int  # k: vLLM's engine label, which is the engine's DP rank
    process: ProcessInfo | None  # ``VLLM::EngineCore_DP<k>`` when a title names the rank
    tree: frozenset[int]  # that process's pid and its descendants' (empty when not known)


def ranks(view: TargetView) -> list[Rank]:
    """The engines the server reports one by one, lowest rank first ([] for a single engine)."""
    name, series, target = view.state.target.name, view.series, view.state.target
    subjects = {s for metric in (m.ITERATIONS, m.REQ_RUNNING) for s in series.subjects(name, metric, _PREFIX)}
    out: list[Rank] = []
    for subject in subjects:
        label = subject.removeprefix(_PREFIX)
        if not label.isdigit():
            continue
        proc = _engine_process(target, int(label))
        out.append(Rank(subject, int(label), proc, _tree(target, proc.pid) if proc else frozenset()))
    return sorted(out, key=lambda r: r.rank)


def shared_pids(target: Target, of: list[Rank]) -> frozenset[int]:
    """The processes in no rank's tree (the API servers, the DP coordinator): serve every rank."""
    owned = frozenset().union(*(r.tree for r in of)) if of else frozenset()
    return frozenset(p.pid for p in target.processes) - owned


def _engine_process(target: Target, rank: int) -> ProcessInfo | None:
    for p in target.processes:
        if p.role is Role.ENGINE_CORE and p.cmdline and rank_of(p.cmdline[0]).get("dp_rank") == rank:
            return p
    return None


def _tree(target: Target, root: int) -> frozenset[int]:
    children = proctree.children_by_parent((p.pid, p.ppid) for p in target.processes)
    return frozenset(proctree.walk(root, children))
