"""The group action, in the order the deployment kind needs (pure).

- vLLM data parallel across nodes: stop the headless ranks, then the leader; start the leader (its
  API server and DP coordinator listen at ``--data-parallel-rpc-port``), then the headless ranks,
  which connect to it. Restarting the leader alone leaves a spinning headless rank holding the group.
- Ray (``--distributed-executor-backend ray``): restart the API server; its Ray workers are its
  children through the Ray placement group and follow it. Ray's own nodes (raylet, GCS) are never
  touched.
- LeaderWorkerSet: the Kubernetes way. Delete the leader pod and let LWS recreate the group
  (``RecreateGroupOnPodRestart``); no node restarts a process of an LWS group itself.

Each step names the node that carries it out: a node acts on its own members only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vllm_guardian.groups.identity import CONFIGURED, DP, LWS, RAY
from vllm_guardian.groups.record import Member

STOP = "stop"
START = "start"
RESTART = "restart"
DELETE_POD = "delete_leader_pod"


@dataclass(frozen=True)
class Step:
    index: int
    node: str
    ranks: tuple[int, ...]
    action: str


def plan(kind: str, ranks: Mapping[int, tuple[str, Member]]) -> tuple[Step, ...]:
    """The ordered steps that restart the group ``ranks`` (rank -> (node, member)) describes."""
    leader = [(r, n) for r, (n, m) in ranks.items() if m.leader]
    if not leader:
        return ()  # no known leader: nothing is planned, the caller escalates
    lead_rank, lead_node = leader[0]
    by_node: dict[str, list[int]] = {}
    for r, (n, m) in sorted(ranks.items()):
        if not m.leader:
            by_node.setdefault(n, []).append(r)
    steps: list[tuple[str, tuple[int, ...], str]] = []
    if kind == LWS:
        steps.append((lead_node, (lead_rank,), DELETE_POD))
    elif kind == RAY:
        steps.append((lead_node, (lead_rank,), RESTART))
    elif kind in (DP, CONFIGURED):
        steps += [(n, tuple(rs), STOP) for n, rs in by_node.items()]
        steps.append((lead_node, (lead_rank,), RESTART))
        steps += [(n, tuple(rs), START) for n, rs in by_node.items()]
    else:
        return ()
    return tuple(Step(index=i, node=n, ranks=rs, action=a) for i, (n, rs, a) in enumerate(steps))
