"""Trust on a real Redis: a signed report captured and replayed after the guardian restarts is not
accepted again; the drain the guardian announces on ``guardian:control`` is signed, and a forged,
altered or replayed control message is dropped, counted and logged once (never acted on)."""

from __future__ import annotations

import json
import logging
import os
import time

import pytest

from tests.support.daemon_world import World
from tests.support.wait import poll
from vllm_guardian.config.loader import parse_config
from vllm_guardian.gates.control import ControlChannel
from vllm_guardian.gates.listener import ReportsListener
from vllm_guardian.gates.trust import KeyRing, Keys, check, sign
from vllm_guardian.loop.assemble import gates_shared
from vllm_guardian.loop.runtime import build_daemon
from vllm_guardian.sinks.redis_conn import RedisConnection
from vllm_guardian.testing.redis_server import RedisServer

LOG = logging.getLogger("test.trust")
SECRET = "trust-secret-0123456789"


@pytest.fixture(scope="module")
def redis_server():
    with RedisServer() as r:
        yield r


@pytest.fixture
def keys_file(tmp_path) -> str:
    path = tmp_path / "trust.keys"
    path.write_text(f"gw {SECRET}\n")
    os.chmod(path, 0o600)
    return str(path)


def listen(redis_server, channel: str, accept) -> ReportsListener:
    listener = ReportsListener(redis_server.client(), channel, accept, time.monotonic, time.time, LOG).start()
    assert listener.subscribed.wait(10)
    return listener


# ---------------------------------------------------------------- E6: a replay across a restart
def guardian_hears(redis_server, cfg, ring: KeyRing, message: str, *, started: float) -> dict[str, int]:
    """A guardian's report intake, as the assembler builds it, started at ``started``, listening on a
    real Redis while ``message`` is published: its outcomes and the reports its ledger keeps."""
    shared = gates_shared(cfg, ring, None, lambda: started, LOG)
    shared.known_targets = frozenset({"t"})
    listener = listen(redis_server, "vllm_health_alert", shared.accept_report)
    try:
        redis_server.client().publish("vllm_health_alert", message)
        assert poll(lambda: sum(shared.report_counts.values()) == 1, 10, every=0.05), shared.report_counts
    finally:
        listener.stop()
    return {k: n for k, n in shared.report_counts.items() if n} | {"reports": len(shared.view("t").reports)}


def test_a_signed_report_replayed_after_the_guardian_restarted_is_not_accepted_again(redis_server, keys_file):
    cfg = parse_config({"node": "node-a", "gates": {"enabled": True, "trust": {"keys_file": keys_file}}})
    ring = KeyRing(keys_file, None)
    report = {
        "instance_id": "node-a/t",
        "request_id": "gw-1",
        "timestamp": int(time.time()),
        "check_level": "L3",
        "type": "nan",
        "details": {},
    }
    captured = json.dumps(sign(report, ring.current))  # what a neighbour on the Redis saw go by
    before, after = (guardian_hears(redis_server, cfg, ring, captured, started=time.time() - ago) for ago in (600, 0))
    assert (before, after) == ({"accepted": 1, "reports": 1}, {"before_start": 1, "reports": 0})


# ---------------------------------------------------------------- E11: the control channel
def test_the_drain_announced_is_signed_and_forged_altered_or_replayed_copies_are_dropped_and_counted(
    tmp_path, redis_server, keys_file, caplog
):
    w = World(tmp_path, config={"gates": {"trust": {"keys_file": keys_file}}})  # gates off, keys on
    w.d.runner.shutdown()
    ring = KeyRing(keys_file, None)
    channel = ControlChannel("n1", ring, w.cfg.gates.trust, LOG, time.time, started=time.time())
    w.d = build_daemon(w.cfg, w.seams, redis=RedisConnection(redis_server.client()), keys=ring, control=channel)
    sub = redis_server.client().pubsub()
    sub.subscribe("guardian:control")
    listener = listen(redis_server, "guardian:control", channel.accept)
    try:
        w.step(4)
        name = w.target()["name"]
        assert w.d.control_request({"cmd": "drain", "target": name}) == f"{name}: drain started"
        w.step(2)
        drain = poll(lambda: _next_message(sub), 10, every=0.05)
        assert drain and drain["action"] == "drain" and check(drain, ring.current) is None  # a consumer verifies it
        unsigned = {k: v for k, v in drain.items() if k not in ("kid", "sig")} | {"action": "undrain", "id": "f" * 16}
        with caplog.at_level(logging.WARNING, LOG.name):
            for forged in (unsigned, unsigned | {"id": "e" * 16}, drain | {"action": "undrain"}, drain):
                redis_server.client().publish("guardian:control", json.dumps(forged))
            assert poll(lambda: sum((channel.status_section().control_messages or {}).values()) == 5, 10, every=0.05)
        counts = channel.status_section().control_messages or {}
        assert {k: n for k, n in counts.items() if n} == {
            "own": 1,
            "unsigned": 2,
            "bad_signature": 1,
            "replay": 1,
        }
        assert len([r for r in caplog.records if "control message unsigned" in r.getMessage()]) == 1
        assert w.target()["phase"] in ("draining", "drained")  # the forged undrain did nothing
    finally:
        listener.stop()
        sub.close()
        w.d.runner.shutdown()


def _next_message(sub) -> dict | None:
    m = sub.get_message(timeout=0.1)
    return json.loads(m["data"]) if m and m["type"] == "message" else None


def test_keys_in_the_message_are_the_ones_in_force(redis_server):
    """Signing reads the ring at each message: after a reload the new first key signs."""
    ring = KeyRing.fixed(Keys({"old": b"0123456789abcdef0123"}, "old"))
    channel = ControlChannel("n1", ring, parse_config({}).gates.trust, LOG, time.time, started=time.time())
    assert channel.stamp({"action": "drain", "target": "t", "node": "n1"})["kid"] == "old"
    ring.current = Keys({"new": b"fedcba9876543210fedc"}, "new")
    assert channel.stamp({"action": "drain", "target": "t", "node": "n1"})["kid"] == "new"
