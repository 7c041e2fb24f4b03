"""The gates' Redis side on a real Redis: fingerprints across nodes, the reports listener,
decisions on the control channel."""

from __future__ import annotations

import json
import logging
import time

import pytest

from vllm_guardian.config.schema import TrustConfig
from vllm_guardian.gates.exchange import MAX_ENTRY, MAX_SCAN, PAGE, FingerprintExchange, key_for
from vllm_guardian.gates.listener import ReportsListener
from vllm_guardian.gates.shared import GatesShared
from vllm_guardian.gates.trust import KeyRing, Keys, check
from vllm_guardian.model import Incident, Kind, Severity, Status, TargetRef, Transition
from vllm_guardian.remediation.decide import Refusal
from vllm_guardian.sinks.gate_decisions import GateDecisions
from vllm_guardian.testing.redis_server import RedisServer
from tests.support.wait import poll

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
        assert poll(
            lambda: shared.report_counts["accepted"] == 1 and shared.report_counts["malformed"] == 1, 10.0, every=0.05
        )
        (rep,) = shared.view("t").reports
        assert rep.failure.level == "L3" and rep.source == "r1"
    finally:
        listener.stop()


def _oc(iid: str, signals: dict) -> Incident:
    ref = TargetRef("t", 1, 1)
    return Incident(iid, Kind.OUTPUT_CORRUPTION, Severity.CRITICAL, "node-a", ref, Status.FIRING, "x", 1.0, signals)


def _published(client, pubsub, d: GateDecisions) -> list[dict]:
    """Every message ``d`` published: it is closed (its queue drained), then an end mark follows."""
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


@pytest.fixture
def control(client):
    pubsub = client.pubsub()
    pubsub.subscribe("vllm_control")
    pubsub.get_message(timeout=1)
    yield pubsub
    pubsub.close()


def test_decisions_are_published_for_output_corruption_only(client, control):
    d = GateDecisions(client, "vllm_control", "node-a", lambda: 5.0, LOG)
    ref = TargetRef("t", 1, 1)
    busy = Incident("00", Kind.BUSY_LOOP, Severity.CRITICAL, "node-a", ref, Status.FIRING, "x", 1.0)
    oc = _oc("01", {"condition": "B", "level": "L3"})
    d.decided(busy, None)
    d(Transition(busy, None))
    d.decided(oc, None)
    d(Transition(oc.resolve(2.0, "ok"), Status.FIRING))
    got = _published(client, control, d)
    assert [(m["decision"], m["condition"], m["instance_id"]) for m in got] == [
        ("drain_and_restart", "B", "node-a/t"),
        ("resolved", "B", "node-a/t"),
    ]


def test_a_decision_goes_out_when_it_first_comes_and_when_it_changes_never_each_tick(client, control):
    d = GateDecisions(client, "vllm_control", "node-a", lambda: 5.0, LOG)
    oc = _oc("01", {"condition": "A", "level": "L1"})
    for left in (30, 29, 28):  # the backoff's words change each tick, its reason does not
        d.decided(oc, Refusal(f"backoff: {left}s left of 60s after the last restart", "backoff", "deferred"))
    d.decided(oc, None)
    d.decided(oc, None)
    got = _published(client, control, d)
    assert [(m["decision"], m.get("hold_reason")) for m in got] == [
        ("alert_only", "backoff"),
        ("drain_and_restart", None),
    ]


# ---------------------------------------------------------------- hostile publishers (issue: trust)
def _valid(i: int) -> str:
    return json.dumps(
        {
            "instance_id": "node-a/t",
            "request_id": f"ok-{i}",
            "timestamp": time.time(),
            "check_level": "L1",
            "type": "repeated_chars",
            "details": {"output": "!!!!!!!!!!!!"},
        }
    )


def test_the_listener_survives_deep_json_keeps_its_subscription_and_counts_every_valid_report(client):
    """A 2 KB ``[[[…]]]`` once raised RecursionError out of the parser: the listener took it for a
    Redis outage, dropped the subscription and lost 20 of the 30 valid reports sent meanwhile."""
    shared = GatesShared("node-a", 60.0, LOG, TrustConfig(reports_per_minute=1000))
    shared.known_targets = frozenset({"t"})
    listener = ReportsListener(
        client, "vllm_health_alert", shared.accept_report, time.monotonic, time.time, LOG
    ).start()
    try:
        assert listener.subscribed.wait(10)
        for i in range(15):
            client.publish("vllm_health_alert", _valid(i))
        client.publish("vllm_health_alert", "[" * 2048)
        client.publish("vllm_health_alert", '{"a":' * 100_000)
        for i in range(15, 30):
            client.publish("vllm_health_alert", _valid(i))
        assert poll(lambda: shared.report_counts["accepted"] == 30, 10.0, every=0.05), shared.report_counts
        assert shared.report_counts["malformed"] == 2
        assert listener.subscribed.is_set() and client.pubsub_numsub("vllm_health_alert")[0][1] == 1
    finally:
        listener.stop()


KEYS = Keys({"k": b"0123456789abcdef0123"}, "k")
RING = KeyRing.fixed(KEYS)


def _forge(client, node: str, fps: dict, t: float, **extra) -> None:
    entry = {"node": node, "target": "t", "fps": fps, "t": t, **extra}
    client.hset(key_for("m", "v"), f"{node}/t", json.dumps(entry))


def test_forged_fingerprints_never_vote_and_are_not_kept_alive(client):
    """Two forged entries stamped in the future once outvoted a healthy instance every round."""
    now = 1000.0
    honest = [FingerprintExchange(client, n, lambda: now, RING, 30.0, 2) for n in ("node-b", "node-c")]
    for ex in honest:
        ex.share("m", "v", "t", {"p": "good"}, 600, 180)
    _forge(client, "evil-1", {"p": "bad"}, now + 10_000)  # from the future
    _forge(client, "evil-2", {"p": "bad"}, now)  # unsigned
    _forge(client, "evil-3", {"p": "bad"}, now, kid="k", sig="0" * 64)  # badly signed
    stolen = json.loads(client.hget(key_for("m", "v"), "node-b/t"))
    client.hset(key_for("m", "v"), "evil-4/t", json.dumps(stolen))  # a real signature under another name
    a = FingerprintExchange(client, "node-a", lambda: now, RING, 30.0, 2)
    peers, note = a.share("m", "v", "t", {"p": "good"}, 600, 180)
    assert note is None and peers == [{"p": "good"}, {"p": "good"}]
    assert a.dropped() == {
        "unsigned": 1,
        "bad_signature": 1,
        "malformed": 0,
        "misfiled": 1,
        "stale": 0,
        "future": 1,
    }
    assert not client.hexists(key_for("m", "v"), "evil-1/t")  # deleted: our EXPIRE does not keep it alive


def test_each_node_votes_once_and_too_few_nodes_do_not_vote(client):
    now = 1000.0
    b = FingerprintExchange(client, "node-b", lambda: now, RING, 30.0, 2)
    for target in ("t1", "t2", "t3"):  # one node, three instances: one vote
        b.share("m", "v", target, {"p": "bad"}, 600, 180)
    a = FingerprintExchange(client, "node-a", lambda: now, RING, 30.0, 2)
    assert a.share("m", "v", "t", {"p": "good"}, 600, 180) == ([], None)  # 1 node < min 2
    FingerprintExchange(client, "node-c", lambda: now, RING, 30.0, 2).share("m", "v", "t", {"p": "bad"}, 600, 180)
    peers, _ = a.share("m", "v", "t", {"p": "good"}, 600, 180)
    assert len(peers) == 2


def test_decisions_are_signed_with_the_keys_in_force_so_an_executor_can_verify_each(client, control):
    d = GateDecisions(client, "vllm_control", "node-a", lambda: 5.0, LOG, keys=RING)
    own = _oc("00", {"condition": "B", "level": "L3", "own_conditions": ["B"]})
    hint = _oc("01", {"condition": "B", "level": "L3", "own_conditions": [], "external": ["report"]})
    d.decided(own, None)
    d.decided(hint, Refusal("rests on gateway reports: alert only until ...", name="external"))
    got = _published(client, control, d)
    assert [check(m, KEYS) for m in got] == [None, None]  # an executor can verify every decision
    assert [(m["decision"], m.get("hold_reason")) for m in got] == [
        ("drain_and_restart", None),
        ("alert_only", "external"),
    ]


# ---------------------------------------------------------------- a hash stuffed with junk (issue: E15)
NOW = 1000.0
HONEST = ("node-b", "node-c")


def _honest(client) -> list[FingerprintExchange]:
    out = [FingerprintExchange(client, n, lambda: NOW, RING, 30.0, 2) for n in HONEST]
    for ex in out:
        ex.share("m", "v", "t", {"p": "good"}, 600, 180)
    return out


def _stuff(client, fields: dict[str | bytes, str | bytes]) -> None:
    pipe = client.pipeline(transaction=False)
    for name, value in fields.items():
        pipe.hset(key_for("m", "v"), name, value)
    pipe.execute()


def _unsigned(node: str) -> str:
    return json.dumps({"node": node, "target": "t", "fps": {"p": "bad"}, "t": NOW})


JUNK = 1100  # over the 1 024 fields that once switched L4 across nodes off for good


@pytest.mark.parametrize(
    "junk, reason",
    [
        (lambda i: (f"junk-{i}/t", "{not json"), "malformed"),
        (lambda i: (f"junk-{i}", _unsigned(f"junk-{i}")), "malformed"),  # not a <node>/<target> field
        (lambda i: (f"junk-{i}/t", "x" * (MAX_ENTRY + 1)), "malformed"),
        (lambda i: (f"node-a/junk-{i}", "[]"), "malformed"),  # under this node's own name
        (lambda i: (b"\xff%d/t" % i, "{}"), "malformed"),  # a field that is not UTF-8 (once: every page an error)
        (lambda i: (f"junk-{i}/t", b"\xff" * 8), "malformed"),  # a value that is not UTF-8
        (lambda i: (f"evil-{i}/t", _unsigned(f"evil-{i}")), "unsigned"),
        (lambda i: (f"evil-{i}/t", _unsigned("node-b")), "unsigned"),
    ],
    ids=[
        "not-json",
        "not-node-target",
        "too-big",
        "own-name",
        "field-not-utf8",
        "value-not-utf8",
        "unsigned",
        "misfiled",
    ],  # fmt: skip
)
def test_a_hash_stuffed_with_junk_still_votes_and_the_junk_is_deleted_and_counted(client, junk, reason):
    _honest(client)
    _stuff(client, dict(junk(i) for i in range(JUNK)))
    a = FingerprintExchange(client, "node-a", lambda: NOW, RING, 30.0, 2)
    peers, note = a.share("m", "v", "t", {"p": "good"}, 600, 180)
    assert note is None and peers == [{"p": "good"}, {"p": "good"}]  # cross-node L4 still works
    assert sorted(client.hkeys(key_for("m", "v"))) == ["node-a/t", "node-b/t", "node-c/t"]
    assert a.deleted()[reason] == JUNK and a.dropped()[reason] == JUNK


def test_the_work_per_round_is_bounded_and_a_flood_is_cleaned_over_rounds(client):
    _honest(client)
    _stuff(client, {f"junk-{i}/t": "{not json" for i in range(3 * MAX_SCAN)})
    a = FingerprintExchange(client, "node-a", lambda: NOW, RING, 30.0, 2)
    _, note = a.share("m", "v", "t", {"p": "good"}, 600, 180)
    first = a.deleted()["malformed"]
    # one round read about MAX_SCAN fields (the 3 real entries among them), not all of them; Redis
    # takes COUNT as a hint, so the last page may run over a little
    assert MAX_SCAN - 3 <= first <= MAX_SCAN + 2 * PAGE
    assert note is not None and f"over {MAX_SCAN} entries" in note
    for _ in range(3):  # each round deletes what it read: the flood is gone within 3 more rounds
        peers, note = a.share("m", "v", "t", {"p": "good"}, 600, 180)
    assert a.deleted()["malformed"] == 3 * MAX_SCAN and client.hlen(key_for("m", "v")) == 3
    assert note is None and peers == [{"p": "good"}, {"p": "good"}]


def test_honest_entries_and_this_nodes_own_are_never_deleted(client):
    honest = _honest(client)
    a = FingerprintExchange(client, "node-a", lambda: NOW, RING, 30.0, 2)
    a.share("m", "v", "t2", {"p": "good"}, 600, 180)
    for _ in range(3):
        a.share("m", "v", "t", {"p": "good"}, 600, 180)
    assert sorted(client.hkeys(key_for("m", "v"))) == ["node-a/t", "node-a/t2", "node-b/t", "node-c/t"]
    assert sum(a.deleted().values()) == 0 and sum(a.dropped().values()) == 0
    assert all(sum(ex.deleted().values()) == 0 for ex in honest)
