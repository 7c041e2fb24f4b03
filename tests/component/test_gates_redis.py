"""The gates' Redis side on a real Redis: fingerprints across nodes, the reports listener,
decisions on the control channel."""

from __future__ import annotations

import json
import logging
import time

import pytest

from vllm_guardian.gates.exchange import FingerprintExchange, key_for
from vllm_guardian.gates.listener import ReportsListener
from vllm_guardian.gates.shared import GatesShared
from vllm_guardian.model import Incident, Kind, Severity, Status, TargetRef, Transition
from vllm_guardian.sinks.gate_decisions import GateDecisions
from vllm_guardian.testing.redis_server import RedisServer

LOG = logging.getLogger("test")


@pytest.fixture(scope="module")
def redis_server():
    with RedisServer() as r:
        yield r


@pytest.fixture
def client(redis_server):
    c = redis_server.client()
    c.flushall()
    return c


def wait(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_peers_come_from_other_nodes_only_and_fresh(client):
    now = [1000.0]
    a = FingerprintExchange(client, "node-a", lambda: now[0])
    b = FingerprintExchange(client, "node-b", lambda: now[0])
    c = FingerprintExchange(client, "node-c", lambda: now[0] - 500)  # its entry is old
    c.share("m", "v", "t1", {"p": "old"}, 600, 180)
    b.share("m", "v", "t1", {"p": "fp-b"}, 600, 180)
    a.share("m", "v", "t2", {"p": "fp-a2"}, 600, 180)
    peers, note = a.share("m", "v", "t1", {"p": "fp-a"}, 600, 180)
    assert note is None and peers == [{"p": "fp-b"}]  # not node-a's own, not node-c's stale one
    assert client.ttl(key_for("m", "v")) > 0


def test_another_model_or_version_is_another_conversation(client):
    a = FingerprintExchange(client, "node-a", lambda: 1.0)
    FingerprintExchange(client, "node-b", lambda: 1.0).share("m", "v2", "t", {"p": "x"}, 60, 60)
    assert a.share("m", "v1", "t", {"p": "y"}, 60, 60)[0] == []


def test_a_broken_entry_does_not_vote(client):
    client.hset(key_for("m", "v"), "node-z/t", "{not json")
    assert FingerprintExchange(client, "node-a", lambda: 1.0).share("m", "v", "t", {"p": "y"}, 60, 60)[0] == []


def test_redis_down_is_a_note_not_an_exception():
    import redis

    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2)
    peers, note = FingerprintExchange(dead, "n", lambda: 1.0).share("m", "v", "t", {"p": "y"}, 60, 60)
    assert peers == [] and note is not None and note.startswith("L4 across nodes unavailable")


def test_the_listener_feeds_reports_into_the_ledger(client):
    shared = GatesShared("node-a", 60.0, LOG)
    shared.known_targets = frozenset({"t"})
    listener = ReportsListener(
        client, "vllm_health_alert", shared.accept_report, time.monotonic, time.time, LOG
    ).start()
    try:
        assert listener.subscribed.wait(10)
        client.publish(
            "vllm_health_alert",
            json.dumps(
                {
                    "instance_id": "node-a/t",
                    "request_id": "r1",
                    "timestamp": time.time(),
                    "check_level": 3,
                    "type": "nan_logprobs",
                    "details": {"output": "?"},
                }
            ),
        )
        client.publish("vllm_health_alert", b"\xff garbage")
        assert wait(lambda: shared.report_counts["accepted"] == 1 and shared.report_counts["malformed"] == 1)
        (rep,) = shared.view("t").reports
        assert rep.failure.level == "L3" and rep.source == "r1"
    finally:
        listener.stop()


def test_decisions_are_published_for_output_corruption_only(client):
    pubsub = client.pubsub()
    pubsub.subscribe("vllm_control")
    pubsub.get_message(timeout=1)
    d = GateDecisions(client, "vllm_control", "node-a", lambda: "remediate", lambda: 5.0, LOG)
    ref = TargetRef("t", 1, 1)
    oc = Incident(
        "01",
        Kind.OUTPUT_CORRUPTION,
        Severity.CRITICAL,
        "node-a",
        ref,
        Status.FIRING,
        "garbage",
        1.0,
        {"condition": "B", "level": "L3"},
    )
    d(Transition(Incident("00", Kind.BUSY_LOOP, Severity.CRITICAL, "node-a", ref, Status.FIRING, "x", 1.0), None))
    d(Transition(oc, None))
    d(Transition(oc.resolve(2.0, "ok"), Status.FIRING))
    got: list[dict] = []
    end = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < end:
        m = pubsub.get_message(timeout=0.5)
        if m and m["type"] == "message":
            got.append(json.loads(m["data"]))
    d.close()
    assert [(m["decision"], m["condition"], m["instance_id"]) for m in got] == [
        ("drain_and_restart", "B", "node-a/t"),
        ("resolved", "B", "node-a/t"),
    ]
