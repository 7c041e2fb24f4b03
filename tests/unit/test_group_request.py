"""Signed group requests: believed only when signed, fresh, unseen and for a group this node hosts;
acted on only when sent by the lease holder, and a restart only after this node captured the stacks."""

from __future__ import annotations

import json

import pytest

from vllm_guardian.gates import trust
from vllm_guardian.groups import request as rq
from vllm_guardian.groups.request import CAPTURE, RESTART, GroupRequest, Refused

KEYS = trust.Keys(secrets={"k1": b"s" * 32}, signer="k1")
EVIL = trust.Keys(secrets={"k1": b"e" * 32}, signer="k1")
NOW = 5000.0
G = "dp@10.0.0.1:13345"


def req(**kw) -> GroupRequest:
    base = dict(group=G, op=CAPTURE, incident="inc-1", from_node="node-a", request_id="r1", time=NOW - 1.0, step=0)
    base.update(kw)
    return GroupRequest(**base)  # type: ignore[arg-type]


def decode(raw, keys=KEYS, groups=(G,), guard=None):
    return rq.decode(raw, keys, now=NOW, groups=groups, replay=guard if guard is not None else trust.ReplayGuard(300.0))


def test_a_signed_request_reads_back_as_sent():
    assert decode(rq.encode(req(), KEYS)) == req()


def resigned(mutate) -> str:
    doc = json.loads(rq.encode(req(), KEYS))
    mutate(doc)
    return json.dumps(trust.sign(doc, KEYS))


@pytest.mark.parametrize(
    ("raw", "keys", "reason"),
    [
        (lambda: rq.encode(req(), trust.Keys()), KEYS, trust.UNSIGNED),
        (lambda: rq.encode(req(), EVIL), KEYS, trust.BAD_SIGNATURE),
        (lambda: rq.encode(req(), KEYS).replace("capture", "restart"), KEYS, trust.BAD_SIGNATURE),
        (lambda: rq.encode(req(), KEYS), trust.Keys(), "untrusted"),
        (lambda: rq.encode(req(time=NOW - 600), KEYS), KEYS, "stale"),
        (lambda: rq.encode(req(time=NOW + 600), KEYS), KEYS, "stale"),
        (lambda: rq.encode(req(group="dp@other:1"), KEYS), KEYS, "not_ours"),
        (lambda: resigned(lambda d: d.update(op="kill_all")), KEYS, "malformed"),
        (lambda: resigned(lambda d: d.update(step=99)), KEYS, "malformed"),
        (lambda: resigned(lambda d: d.update(from_node="a b")), KEYS, "malformed"),
        (lambda: "x" * 9000, KEYS, "malformed"),
    ],
    ids=[
        "unsigned",
        "forged-with-wrong-secret",
        "tampered",
        "reader-has-no-keys",
        "stale",
        "from-the-future",
        "group-not-hosted-here",
        "unknown-op",
        "step-out-of-range",
        "hostile-node-name",
        "oversized",
    ],  # fmt: skip
)
def test_a_request_not_believed_is_refused_with_its_reason(raw, keys, reason):
    got = decode(raw(), keys)
    assert isinstance(got, Refused) and got.reason == reason, got


def test_a_replayed_request_is_refused_the_second_time():
    guard = trust.ReplayGuard(300.0)
    raw = rq.encode(req(), KEYS)
    assert isinstance(decode(raw, guard=guard), GroupRequest)
    got = decode(raw, guard=guard)
    assert isinstance(got, Refused) and got.reason == "replayed"


@pytest.mark.parametrize(
    ("request_", "holder", "captured", "reason"),
    [
        (req(), "node-a", (), None),
        (req(op=RESTART), "node-a", ("inc-1",), None),
        (req(op=RESTART), "node-a", (), "no_capture"),
        (req(), "node-b", (), "no_lease"),
        (req(op=RESTART), None, ("inc-1",), "no_lease"),
    ],
    ids=["capture-from-holder", "restart-after-capture", "restart-before-capture", "sender-not-holder", "lease-free"],
)
def test_only_the_lease_holder_may_ask_and_stacks_come_before_a_restart(request_, holder, captured, reason):
    got = rq.may_act(request_, lease_holder=holder, captured=captured)
    assert (got.reason if got else None) == reason
