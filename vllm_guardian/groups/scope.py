"""Which of a group member's findings are this node's to raise, and what they say of the group (pure).

In a group spread over nodes, the leader's ``/metrics`` carries every rank's counters
(``engine="k"``), and both the leader's node and a headless rank's node read that page (the headless
one at the leader's address, found in the group record). Each node judges only the ranks it hosts:

- a finding that names a data-parallel rank (``dp_rank``) is kept only on the node that hosts that
  rank, and gains ``group``, ``node`` and ``rank``: the one group incident names where it is;
- a finding about the whole server (no rank) is the leader's: a headless rank's node keeps only the
  kinds about its own processes (their memory), never the leader's page as a whole;
- a deployment whose ranks are all on this node (single-node data parallel) is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from vllm_guardian.groups.identity import GroupIdentity
from vllm_guardian.model import Finding, Kind

OWN_PROCESS_KINDS = frozenset({Kind.HOST_MEMORY_LEAK, Kind.ACCEL_MEMORY_LEAK})


def spread(identity: GroupIdentity | None) -> bool:
    """Does the group have ranks on other nodes (so each node judges only its own)?"""
    if identity is None or not identity.group:
        return False
    return not identity.leader or identity.size is None or len(identity.ranks) < identity.size


def scope(
    identity: GroupIdentity | None, node: str, findings: Mapping[Kind, Finding | None]
) -> dict[Kind, Finding | None]:
    """``findings`` as this node raises them for a member of ``identity``'s group."""
    if identity is None or not spread(identity):
        return dict(findings)
    out: dict[Kind, Finding | None] = {}
    for kind, f in findings.items():
        if f is None:
            out[kind] = None
            continue
        rank = f.signals.get("dp_rank")
        if isinstance(rank, int) and not isinstance(rank, bool):
            mine = rank in identity.ranks
        else:
            mine = identity.leader or kind in OWN_PROCESS_KINDS
            rank = identity.rank if mine else None
        if not mine:
            out[kind] = None
            continue
        signals = {**f.signals, "group": identity.group, "node": node}
        if rank is not None:
            signals["rank"] = rank
        out[kind] = replace(f, signals=signals)
    return out
