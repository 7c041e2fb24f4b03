"""The group stage's pure parts: where a headless rank's leader is reached, and what its record says."""

from __future__ import annotations

import pytest

from vllm_guardian.groups import identity
from vllm_guardian.groups import record as rec
from vllm_guardian.groups.record import Member, NodeRecord
from vllm_guardian.groups.stage import leader_url, member_health, members
from vllm_guardian.model import Incident, Kind, ProcessInfo, ProcKey, Role, Severity, Status, Target, TargetRef
from vllm_guardian.state.tracker import TrackedTarget

FLAGS = ("--data-parallel-size", "2", "--data-parallel-size-local", "1", "--data-parallel-rpc-port", "13345")
_HEADLESS = identity.from_argv(
    (
        "vllm",
        "serve",
        "m",
        *FLAGS,
        "--data-parallel-address",
        "10.0.0.1",
        "--headless",
        "--data-parallel-start-rank",
        "1",
    )
)
assert _HEADLESS is not None
HEADLESS = _HEADLESS
G = "dp@10.0.0.1:13345"


def view(*records: NodeRecord) -> rec.GroupView:
    return rec.view(G, records)


def node_record(node: str, members: tuple[Member, ...], api_port: int | None) -> NodeRecord:
    return NodeRecord(G, "vllm-dp", node, 0.0, 2, "10.0.0.1", members, api_port=api_port)


LEAD = node_record("node-a", (Member(0, 10, "serving", None, leader=True),), 8000)


@pytest.mark.parametrize(
    ("records", "url"),
    [
        ((LEAD,), "http://10.0.0.1:8000"),
        ((node_record("node-a", LEAD.members, None),), None),
        ((node_record("node-b", (Member(1, 20, "serving", None),), 9999),), None),
        ((node_record("node-a", LEAD.members, 8000), node_record("node-c", (Member(1, 5, "x", None, True),), 1)), None),
    ],
    ids=["leader-names-its-port", "leader-names-none", "only-a-member-names-a-port", "two-leaders"],
)
def test_the_leader_url_host_is_the_ranks_own_address_never_the_records(records, url):
    assert leader_url(HEADLESS, view(*records)) == url


def test_no_view_no_url():
    assert leader_url(HEADLESS, None) is None


def target(*titles: str) -> Target:
    procs = tuple(
        ProcessInfo(ProcKey(100 + i, 1), 1 if i == 0 else 100, Role.ENGINE_CORE if i else Role.API_SERVER, (t,))
        for i, t in enumerate(titles)
    )
    return Target("rank1", ProcKey(100, 1), procs)


def incident(rank: int | None) -> Incident:
    sig = {"rank": rank} if rank is not None else {}
    return Incident(
        "inc-1", Kind.BUSY_LOOP, Severity.CRITICAL, "node-b", TargetRef("rank1", 100, 1), Status.FIRING, "s", 0.0, sig
    )


@pytest.mark.parametrize(
    ("alive", "ready", "incidents", "health", "inc"),
    [
        (True, True, (), "serving", None),
        (True, False, (), "starting", None),
        (False, True, (), "dead", None),
        (True, True, (incident(1),), "stalled", "inc-1"),
        (True, True, (incident(0),), "serving", None),
    ],
    ids=["serving", "starting", "dead", "its-incident", "another-ranks-incident"],
)
def test_a_member_says_its_engine_its_health_and_the_incident_naming_it(alive, ready, incidents, health, inc):
    t = target("python", "VLLM::EngineCore_DP1")
    tr = TrackedTarget(t, 0.0, ready=ready, api_alive=alive)
    (m,) = members(t, HEADLESS, tr, incidents)
    assert (m.rank, m.pid, m.health, m.incident, m.leader) == (1, 101, health, inc, False)
    assert member_health(tr, incidents[0] if inc else None) == health
