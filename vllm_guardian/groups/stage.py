"""What a node says of its group members, and where a headless rank's leader is (pure).

Decides:

- a headless rank's target is reached at its leader: the URL's host is the rank's own
  ``--data-parallel-address`` (its argv, never a record), only the port comes from the leader
  node's signed record (``leader_url``); until a believed record names it, there is no URL;
- each member's health in the record (``members``): dead (its process gone), stalled (an open
  incident names it; the incident's id is published so every node shows it), starting (not yet
  ready), serving;
- the shape of the ``groups`` section of ``guardian status`` (``GroupStatus``).

The daemon's part that publishes and reads the records is ``loop/group_stage.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from vllm_guardian.detectors.hot_threads import rank_of
from vllm_guardian.groups import record as rec
from vllm_guardian.groups.identity import DP, GroupIdentity
from vllm_guardian.model import Incident, Role, Target
from vllm_guardian.state.tracker import TrackedTarget


@dataclass(frozen=True)
class GroupRankStatus:
    rank: int
    node: str
    pid: int
    health: str
    leader: bool
    incident: str | None = None


@dataclass(frozen=True)
class GroupStatus:
    group: str
    kind: str
    size: int | None
    targets: tuple[str, ...]  # this node's targets in the group
    local_ranks: tuple[int, ...]
    leader_node: str | None
    ranks: tuple[GroupRankStatus, ...]  # every rank the believed records name
    conflicts: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()  # "<node>: <reason>" of each record not believed
    problems: tuple[str, ...] = ()  # what this node could not read from its own members' argv


def leader_url(identity: GroupIdentity, view: rec.GroupView | None) -> str | None:
    """Where a headless rank's leader serves: its own argv's address, the leader's record's port."""
    if identity.kind != DP or identity.leader_address is None or view is None:
        return None
    port = view.leader_api_port()
    if port is None:
        return None
    host = f"[{identity.leader_address}]" if ":" in identity.leader_address else identity.leader_address
    return f"http://{host}:{port}"


def member_health(tr: TrackedTarget, incident: Incident | None) -> str:
    if not tr.api_alive:
        return "dead"
    if incident is not None:
        return "stalled"
    return "serving" if tr.ready else "starting"


def members(
    target: Target, identity: GroupIdentity, tr: TrackedTarget, incidents: Iterable[Incident]
) -> tuple[rec.Member, ...]:
    """This target's ranks as the record says them: each rank's engine process, health and incident."""
    engines = {
        rank_of(p.cmdline[0]).get("dp_rank"): p.pid
        for p in target.processes
        if p.role is Role.ENGINE_CORE and p.cmdline
    }
    mine = [i for i in incidents if i.target.name == target.name]
    out = []
    for r in identity.ranks:
        inc = next((i for i in mine if i.signals.get("rank") in (r, None)), None)
        out.append(
            rec.Member(
                rank=r,
                pid=engines.get(r) or target.key.pid,
                health=member_health(tr, inc),
                last_progress=None,
                leader=identity.leader and r == identity.rank,
                incident=inc.id if inc is not None else None,
            )
        )
    return tuple(out)
