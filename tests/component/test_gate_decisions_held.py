"""The decision published on the gates' control channel (``vllm_control``) is what the guardian
decided, on a real Redis: ``drain_and_restart`` only when a restart sequence runs for the incident;
``alert_only`` with ``hold`` and ``hold_reason`` whenever a safety gate holds it (dry run,
maintenance, an autodiscovered target, a spent budget, a node-wide anomaly).

Each case opens an ``output_corruption`` incident on the remediation world (a configured target,
fake clock and kernel), lets the real remediator decide in remediate mode, and hands that decision
to the publisher as the responder does each tick. A dry-run guardian once published
``drain_and_restart`` for incidents it never acted on, and so did one whose restart was escalated."""

from __future__ import annotations

import json
import logging
import time

import pytest

from vllm_guardian.config.schema_fields import Mode
from vllm_guardian.gates.trust import KeyRing, Keys, check
from vllm_guardian.model import Kind
from vllm_guardian.sinks.gate_decisions import GateDecisions
from vllm_guardian.testing.redis_server import RedisServer
from tests.support.remediation_world import World

KEYS = Keys({"gw": b"0123456789abcdef0123"}, "gw")


@pytest.fixture(scope="module")
def redis_server():
    with RedisServer() as r:
        yield r


@pytest.fixture
def published(redis_server):
    """(a client, ``read``): ``read(d)`` closes the publisher ``d`` (its queue drained), then returns
    every message it put on ``vllm_control``, up to an end mark published after them."""
    client = redis_server.client()
    pubsub = client.pubsub()
    pubsub.subscribe("vllm_control")
    pubsub.get_message(timeout=1)

    def read(d: GateDecisions) -> list[dict]:
        d.close()
        client.publish("vllm_control", '"end"')
        got: list[dict] = []
        end = time.monotonic() + 10
        while time.monotonic() < end:
            m = pubsub.get_message(timeout=0.5)
            if m and m["type"] == "message":
                if (data := json.loads(m["data"])) == "end":
                    return got
                got.append(data)
        raise AssertionError(f"no end mark; got {got}")

    yield client, read
    pubsub.close()


def _dry_run(w: World) -> dict:
    return {}


def _maintenance(w: World) -> dict:
    w.rem.maintenance.turn_on(w.clock.wall(), 3600)
    return {}


def _autodiscovered(w: World) -> dict:
    w.rem = w.new_remediator(targets={})  # no restart config for it: never restarted
    return {}


def _budget(w: World) -> dict:
    for i in range(3):
        w.ledger.record("llm", w.clock.wall() - 60 * (i + 1))
    return {}


def _anomaly(w: World) -> dict:
    return {"tripped": 3, "total": 3}  # every target of the node tripped at once


@pytest.mark.parametrize(
    "policy, setup, reason, words",
    [
        ({"dry_run": True}, _dry_run, "dry_run", "would have drained"),
        (None, _maintenance, "maintenance", "maintenance mode is on"),
        (None, _autodiscovered, "no_config", "autodiscovered target"),
        ({"budget": {"max_restarts": 3, "period": 3600}}, _budget, "budget", "restart budget exhausted"),
        (None, _anomaly, "anomaly", "node-wide anomaly"),
    ],
    ids=["dry-run", "maintenance", "autodiscovered", "budget", "anomaly"],
)
def test_a_held_remediation_is_published_alert_only_with_its_reason(tmp_path, published, policy, setup, reason, words):
    client, read = published
    w = World(tmp_path, policy=policy)
    extra = {"tripped": 1, "total": 1} | setup(w)
    d = GateDecisions(client, "vllm_control", "n1", w.clock.wall, logging.getLogger("t"), keys=KeyRing.fixed(KEYS))
    inc = w.open(Kind.OUTPUT_CORRUPTION)
    for _ in range(3):  # three ticks, one message
        considered = w.rem.consider(inc, w.tracker.targets["llm"], w.clock.monotonic(), mode=Mode.REMEDIATE, **extra)
        d.decided(inc, considered.hold)
        w.step()
    (msg,) = read(d)
    assert (msg["decision"], msg["hold_reason"]) == ("alert_only", reason)
    assert words in msg["hold"] and check(msg, KEYS) is None
    assert w.control.signals == [] and not w.rem.active("llm")  # and indeed nothing was done


def test_a_restart_the_guardian_begins_is_published_drain_and_restart_once(tmp_path, published):
    client, read = published
    w = World(tmp_path)
    d = GateDecisions(client, "vllm_control", "n1", w.clock.wall, logging.getLogger("t"))
    inc = w.open(Kind.OUTPUT_CORRUPTION)
    for _ in range(3):  # started, then "in progress" for its own sequence: the same decision
        considered = w.rem.consider(
            inc, w.tracker.targets["llm"], w.clock.monotonic(), mode=Mode.REMEDIATE, tripped=1, total=1
        )
        d.decided(inc, considered.hold)
        w.step()
    got = read(d)
    assert [m["decision"] for m in got] == ["drain_and_restart"] and "hold" not in got[0]
    assert w.rem.active("llm")
