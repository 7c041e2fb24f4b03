"""The group exchange through a real Redis: the node opening a group incident is its one actor while
it is open, asks every node (signed) for its ranks' stacks, and gives the group lease back when done."""

from __future__ import annotations

import logging

import pytest

from vllm_guardian.gates import trust
from vllm_guardian.gates.trust import KeyRing
from vllm_guardian.host.runner import CommandResult
from vllm_guardian.loop.group_requests import REQ_PREFIX, GroupExchange
from vllm_guardian.model import Action, Incident, Kind, Severity, Status, TargetRef
from vllm_guardian.sinks.group_lease import GroupLease
from vllm_guardian.testing.redis_server import RedisServer
from tests.support.wait import poll

G = "dp@127.0.0.1:13345"
KEYS = KeyRing.fixed(trust.Keys(secrets={"k1": b"s" * 32}, signer="k1"))


class NoPySpy:
    """A command runner for which py-spy is never there (the capture answers with the failure)."""

    def run(self, argv, timeout, **kw) -> CommandResult:
        return CommandResult(tuple(argv), 1, b"", b"Error: no such process", 0.0)


@pytest.fixture
def client():
    with RedisServer() as s:
        yield s.client()


def exchange(client, node: str, tmp_path, actions: list, acting=lambda g: False) -> GroupExchange:
    return GroupExchange(
        node, client, KEYS, GroupLease(client, node), 60, NoPySpy(), "/nonexistent/py-spy",
        str(tmp_path / node), lambda inc, a: actions.append((inc, a)), logging.getLogger("t"), acting=acting,
    )  # fmt: skip


def incident(id_: str) -> Incident:
    return Incident(
        id_,
        Kind.BUSY_LOOP,
        Severity.CRITICAL,
        "node-b",
        TargetRef("rank1", 1, 1),
        Status.FIRING,
        "s",
        0.0,
        {"group": G},
    )


def test_the_node_with_the_incident_asks_and_gives_the_lease_back_once_it_resolves(client, tmp_path):
    acts: list[tuple[str, Action]] = []
    b = exchange(client, "node-b", tmp_path, acts)
    b.step(1000.0, {G: ((1, 4242),)}, [incident("inc-1")])
    assert GroupLease(client, "x").holder(G) == "node-b"
    assert list(client.hkeys(REQ_PREFIX + G)) == ["inc-1:capture"]
    # the capture (py-spy missing here) runs off the caller's thread, answers, and is linked
    assert poll(lambda: linked(b, acts), 10)
    assert [(i, a.name, a.status) for i, a in acts] == [("inc-1", "group_stacks", "failed")]
    b.step(1002.0, {G: ((1, 4242),)}, [])
    assert GroupLease(client, "x").holder(G) is None


def linked(b: GroupExchange, acts: list) -> list | None:
    b.step(1001.0, {G: ((1, 4242),)}, [incident("inc-1")])
    return acts or None


def test_a_second_node_with_an_incident_on_the_same_group_only_answers(client, tmp_path):
    a = exchange(client, "node-a", tmp_path, [])
    b = exchange(client, "node-b", tmp_path, [])
    b.step(1000.0, {G: ((1, 4242),)}, [incident("inc-1")])
    a.step(1000.5, {G: ((0, 4141),)}, [incident("inc-2")])
    assert GroupLease(client, "x").holder(G) == "node-b"
    assert a.asked == {"inc-2": None} and "inc-1" in a.captured  # it captured its ranks on node-b's request


def test_the_lease_stays_while_a_restart_sequence_of_the_node_holds_it(client, tmp_path):
    b = exchange(client, "node-b", tmp_path, [], acting=lambda g: True)
    b.step(1000.0, {G: ((1, 4242),)}, [incident("inc-1")])
    b.step(1001.0, {G: ((1, 4242),)}, [])
    assert GroupLease(client, "x").holder(G) == "node-b"
