"""The group record: what one node says about its members of a group, signed with the trust keys (pure).

Each node's guardian publishes, per group it hosts members of, one record: the group, the node, the
time, and per member its rank, pid, health and the time of its last progress. A guardian that hosts a
headless rank finds its leader in the records of the other nodes (``leader_of``).

A record read back from the fleet store is outside input: anyone who can write that Redis key can
write one. ``decode`` accepts only a record signed with one of the trust keys (``gates.trust``), for
the group and node it is filed under, not from the future and not older than ``max_age``, with at most
``MAX_MEMBERS`` members whose ranks fit the group's size. Anything else is a ``Rejected`` with the
reason, counted by the caller, and never makes a guardian act. Without trust keys nothing is accepted.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_guardian.gates import trust

SCHEMA = 1
MAX_MEMBERS = 256  # members one node may say it hosts in one group
MAX_RECORD_BYTES = 64 * 1024  # a longer record is refused unread
CLOCK_SKEW = 30.0  # seconds a record's time may run ahead of the reader's clock
HEALTHS = ("serving", "starting", "suspect", "stalled", "dead", "unknown")
_NAME = re.compile(r"^[A-Za-z0-9_.:/@\[\]-]{1,160}$")

UNTRUSTED = "untrusted"  # no trust keys: no record is believed
MALFORMED = "malformed"
MISFILED = "misfiled"  # signed, but for another group or node than the key it is under
STALE = "stale"
FUTURE = "future"


@dataclass(frozen=True)
class Member:
    """One rank a node hosts: its process, its health and when it last made progress (wall clock)."""

    rank: int
    pid: int
    health: str
    last_progress: float | None
    leader: bool = False  # the rank whose process serves the API
    incident: str | None = None  # the open incident naming this rank, on its node (shown on every node)


@dataclass(frozen=True)
class NodeRecord:
    group: str
    kind: str
    node: str
    time: float
    size: int | None
    leader_address: str | None
    members: tuple[Member, ...]
    api_port: int | None = None  # the leader's API port (its node's record only): where its /metrics is


@dataclass(frozen=True)
class Rejected:
    node: str
    reason: str
    detail: str


def encode(record: NodeRecord, keys: trust.Keys) -> str:
    """The record as signed JSON (the value stored in the fleet store)."""
    body: dict[str, Any] = {
        "v": SCHEMA,
        "group": record.group,
        "kind": record.kind,
        "node": record.node,
        "time": record.time,
        "size": record.size,
        "leader_address": record.leader_address,
        "api_port": record.api_port,
        "members": [
            {
                "rank": m.rank,
                "pid": m.pid,
                "health": m.health,
                "last_progress": m.last_progress,
                "leader": m.leader,
                "incident": m.incident,
            }
            for m in record.members
        ],
    }
    return json.dumps(trust.sign(body, keys), sort_keys=True, separators=(",", ":"))


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _int(value: Any, low: int, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return None
    return value


def _member(raw: Any, size: int | None) -> Member | str:
    if not isinstance(raw, dict):
        return "a member is not an object"
    top = (size - 1) if size is not None else 1023
    rank = _int(raw.get("rank"), 0, top)
    pid = _int(raw.get("pid"), 1, 2**22)
    health = raw.get("health")
    progress = raw.get("last_progress")
    leader = raw.get("leader", False)
    if rank is None:
        return f"rank {str(raw.get('rank'))[:16]!r} is not in 0..{top}"
    if pid is None:
        return f"pid {str(raw.get('pid'))[:16]!r} is not a process id"
    if health not in HEALTHS:
        return f"health {str(health)[:16]!r} is not one of {', '.join(HEALTHS)}"
    if progress is not None and _num(progress) is None:
        return "last_progress is not a finite number"
    if not isinstance(leader, bool):
        return "leader is not true/false"
    incident = raw.get("incident")
    if incident is not None and (not isinstance(incident, str) or not _NAME.match(incident)):
        return "incident is not an incident id"
    return Member(rank=rank, pid=pid, health=health, last_progress=_num(progress), leader=leader, incident=incident)


def decode(
    raw: str | bytes,
    keys: trust.Keys,
    *,
    group: str,
    node: str,
    now: float,
    max_age: float,
) -> NodeRecord | Rejected:
    """The record filed under (``group``, ``node``), or why it is not believed. Never raises."""
    if not keys.enabled:
        return Rejected(node, UNTRUSTED, "no trust keys: group records are not believed")
    if len(raw) > MAX_RECORD_BYTES:
        return Rejected(node, MALFORMED, f"record of {len(raw)} bytes is over {MAX_RECORD_BYTES}")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        return Rejected(node, MALFORMED, f"not JSON: {e}"[:120])
    if not isinstance(doc, dict):
        return Rejected(node, MALFORMED, "not a JSON object")
    bad = trust.check(doc, keys)
    if bad is not None:
        return Rejected(node, bad[0], bad[1])
    if doc.get("v") != SCHEMA:
        return Rejected(node, MALFORMED, f"schema {str(doc.get('v'))[:8]!r} is not {SCHEMA}")
    if doc.get("group") != group or doc.get("node") != node:
        return Rejected(node, MISFILED, f"signed for {str(doc.get('group'))[:64]!r} on {str(doc.get('node'))[:64]!r}")
    when = _num(doc.get("time"))
    if when is None:
        return Rejected(node, MALFORMED, "time is not a finite number")
    if when > now + CLOCK_SKEW:
        return Rejected(node, FUTURE, f"time is {when - now:.0f} s ahead")
    if now - when > max_age:
        return Rejected(node, STALE, f"{now - when:.0f} s old (max {max_age:.0f} s)")
    size = doc.get("size")
    if size is not None and _int(size, 1, 1024) is None:
        return Rejected(node, MALFORMED, "size is not in 1..1024")
    kind, address = doc.get("kind"), doc.get("leader_address")
    if not isinstance(kind, str) or not _NAME.match(kind):
        return Rejected(node, MALFORMED, "kind is not a name")
    if address is not None and (not isinstance(address, str) or not _NAME.match(address)):
        return Rejected(node, MALFORMED, "leader_address is not a host name or address")
    api_port = doc.get("api_port")
    if api_port is not None and _int(api_port, 1, 65535) is None:
        return Rejected(node, MALFORMED, "api_port is not in 1..65535")
    raw_members = doc.get("members")
    if not isinstance(raw_members, list) or len(raw_members) > MAX_MEMBERS:
        return Rejected(node, MALFORMED, f"members is not a list of at most {MAX_MEMBERS}")
    members: list[Member] = []
    for m in raw_members:
        got = _member(m, size)
        if isinstance(got, str):
            return Rejected(node, MALFORMED, got)
        members.append(got)
    if len({m.rank for m in members}) != len(members):
        return Rejected(node, MALFORMED, "a rank is named twice")
    return NodeRecord(
        group=group,
        kind=kind,
        node=node,
        time=when,
        size=size,
        leader_address=address,
        members=tuple(members),
        api_port=api_port,
    )


@dataclass(frozen=True)
class GroupView:
    """A group as the believed records show it: every rank's node and member, and what conflicts."""

    group: str
    ranks: Mapping[int, tuple[str, Member]]
    conflicts: tuple[str, ...]
    rejected: tuple[Rejected, ...]
    api_ports: Mapping[str, int] = field(default_factory=dict)  # node -> the API port its record names

    def leader(self) -> tuple[str, Member] | None:
        """The node and member that serves the API; None when no node or more than one says so."""
        leaders = [(n, m) for n, m in self.ranks.values() if m.leader]
        return leaders[0] if len(leaders) == 1 else None

    def leader_api_port(self) -> int | None:
        """The API port the leader's node names (None: no leader, or its record names none)."""
        lead = self.leader()
        return self.api_ports.get(lead[0]) if lead is not None else None

    def missing(self, size: int) -> tuple[int, ...]:
        """Ranks of a group of ``size`` that no believed record names."""
        return tuple(r for r in range(size) if r not in self.ranks)


def view(group: str, read: Iterable[NodeRecord | Rejected]) -> GroupView:
    """Join the records of every node: a rank two nodes both claim is a conflict and belongs to neither."""
    ranks: dict[int, tuple[str, Member]] = {}
    claimed: dict[int, list[str]] = {}
    rejected: list[Rejected] = []
    ports: dict[str, int] = {}
    for item in read:
        if isinstance(item, Rejected):
            rejected.append(item)
            continue
        if item.api_port is not None:
            ports[item.node] = item.api_port
        for m in item.members:
            claimed.setdefault(m.rank, []).append(item.node)
            ranks[m.rank] = (item.node, m)
    conflicts = []
    for rank, nodes in sorted(claimed.items()):
        if len(nodes) > 1:
            conflicts.append(f"rank {rank} claimed by {', '.join(sorted(nodes))}")
            ranks.pop(rank, None)
    if sum(1 for _, m in ranks.values() if m.leader) > 1:
        conflicts.append("more than one node says it hosts the leader")
    return GroupView(
        group=group,
        ranks=dict(sorted(ranks.items())),
        conflicts=tuple(conflicts),
        rejected=tuple(rejected),
        api_ports=ports,
    )
