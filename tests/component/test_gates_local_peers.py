"""L4 on one node, against real simulated vLLM servers: who may outvote whom.

Autodiscovery follows any process that owns its listening socket and answers like vLLM, so
anyone on the node can add two servers of the same model id and ``/version`` that agree on
other answers. They once were a majority on every shadow prompt: the configured healthy
server was the suspect of an *own* condition C, and the guardian would have drained, stopped
and restarted it. Now they never vote on a configured server, and what only they make is
external evidence: an alert at most, never an action.
"""

from __future__ import annotations

import pytest

from vllm_guardian.remediation.external import external_hold
from vllm_guardian.sim.control import SimServer
from tests.support.gates_world import World

ROUNDS = 4  # one more than l4_rounds (3): enough for condition C


@pytest.fixture(scope="module")
def healthy():
    with SimServer(startup_delay=0.2).start() as s:
        s.wait_ready(30)
        yield s


@pytest.fixture(scope="module")
def impostors():
    """Two servers of the same model id and version agreeing on other (wrong) answers."""
    with SimServer(startup_delay=0.2).start() as a, SimServer(startup_delay=0.2).start() as b:
        for s in (a, b):
            s.wait_ready(30)
            s.set_fault("wrong_answers")
        yield a, b


def _world(healthy, impostors, tmp_path, source: str) -> World:
    peers = {f"vllm-{s.port}": (s.url, "autodiscover") for s in impostors}
    # no diagnostics (regexes the impostors would fail on their own): only the shadow prompts
    # and the built-in checks, expected to equal each server's own first answers
    return World(healthy.url, tmp_path, source=source, peers=peers, diagnostics=())


def test_two_autodiscovered_servers_never_outvote_a_configured_one(healthy, impostors, tmp_path):
    w = _world(healthy, impostors, tmp_path, source="config")
    assert healthy.models()["data"][0]["id"] == impostors[0].models()["data"][0]["id"]
    for _ in range(ROUNDS):
        assert w.round().failures == ()
    assert w.finding() is None  # no condition, own or external: nothing to act on
    assert w.status()["agreement"] == "agree (0 peer(s))"  # they did not vote; its baseline did
    for s in impostors:  # the impostors agree with each other and are not the suspects either
        assert w.status(f"vllm-{s.port}")["failures"] == []


def test_what_only_autodiscovered_servers_make_is_an_alert_never_an_action(healthy, impostors, tmp_path):
    w = _world(healthy, impostors, tmp_path, source="autodiscover")
    for _ in range(ROUNDS):
        w.round()
    f = w.finding()
    assert f is not None and f.signals["condition"] == "C"
    assert f.signals["own_conditions"] == [] and f.signals["external"] == ["local_peers"]
    assert {x["source"] for r in f.signals["failing_rounds"] for x in r["failures"]} == {"local_peers"}
    for trusted in (False, True):  # with trust keys or without: nothing signs a local server's answer
        hold = external_hold(f.signals, trusted)
        assert hold is not None and "alert only, never a restart" in hold
