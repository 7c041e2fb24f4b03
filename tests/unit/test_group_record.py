"""Group records: signed, filed under their group and node, fresh, bounded; joined into one group view."""

from __future__ import annotations

import json

import pytest

from vllm_guardian.gates import trust
from vllm_guardian.groups import record as rec
from vllm_guardian.groups.record import Member, NodeRecord, Rejected

KEYS = trust.Keys(secrets={"k1": b"s" * 32}, signer="k1")
OTHER = trust.Keys(secrets={"k9": b"x" * 32}, signer="k9")
NOW = 1_000_000.0
G = "dp@10.0.0.1:13345"


RANK1 = (Member(1, 4242, "serving", NOW - 1.0),)


def record(node="node-b", members=RANK1, **kw) -> NodeRecord:
    base = dict(group=G, kind="vllm-dp", node=node, time=NOW - 2.0, size=2, leader_address="10.0.0.1")
    base.update(kw)
    return NodeRecord(members=tuple(members), **base)


def decode(raw, keys=KEYS, node="node-b", group=G):
    return rec.decode(raw, keys, group=group, node=node, now=NOW, max_age=30.0)


def resigned(mutate) -> str:
    """A record changed after encoding and signed again with the right key (a valid signer's bad input)."""
    doc = json.loads(rec.encode(record(), KEYS))
    mutate(doc)
    return json.dumps(trust.sign(doc, KEYS))


def test_a_signed_record_reads_back_as_written():
    assert decode(rec.encode(record(), KEYS)) == record()


def test_the_leader_api_port_and_a_member_incident_read_back_as_written():
    leader = record(members=(Member(1, 4242, "stalled", None, incident="20261207-x-busy_loop"),), api_port=8000)
    assert decode(rec.encode(leader, KEYS)) == leader


@pytest.mark.parametrize(
    ("raw", "keys", "reason"),
    [
        (lambda: rec.encode(record(), trust.Keys()), KEYS, trust.UNSIGNED),
        (lambda: rec.encode(record(), OTHER), KEYS, trust.BAD_SIGNATURE),
        (lambda: rec.encode(record(), KEYS).replace('"pid":4242', '"pid":1'), KEYS, trust.BAD_SIGNATURE),
        (lambda: rec.encode(record(), KEYS), trust.Keys(), rec.UNTRUSTED),
        (lambda: rec.encode(record(node="node-a"), KEYS), KEYS, rec.MISFILED),
        (lambda: rec.encode(record(group="dp@other:1"), KEYS), KEYS, rec.MISFILED),
        (lambda: rec.encode(record(time=NOW - 31.0), KEYS), KEYS, rec.STALE),
        (lambda: rec.encode(record(time=NOW + 3600.0), KEYS), KEYS, rec.FUTURE),
        (lambda: "{not json", KEYS, rec.MALFORMED),
        (lambda: "[1,2]", KEYS, rec.MALFORMED),
        (lambda: "x" * (rec.MAX_RECORD_BYTES + 1), KEYS, rec.MALFORMED),
    ],
    ids=[
        "unsigned",
        "signed-by-unknown-key",
        "tampered-after-signing",
        "reader-has-no-keys",
        "filed-under-other-node",
        "filed-under-other-group",
        "stale",
        "from-the-future",
        "not-json",
        "not-an-object",
        "oversized",
    ],  # fmt: skip
)
def test_a_record_not_believed_is_rejected_with_its_reason(raw, keys, reason):
    got = decode(raw(), keys)
    assert isinstance(got, Rejected)
    assert got.reason == reason, got.detail


@pytest.mark.parametrize(
    ("mutate", "detail"),
    [
        (lambda d: d["members"][0].update(rank=2), "rank '2' is not in 0..1"),
        (lambda d: d["members"][0].update(rank=-1), "is not in 0..1"),
        (lambda d: d["members"][0].update(pid=0), "is not a process id"),
        (lambda d: d["members"][0].update(pid=True), "is not a process id"),
        (lambda d: d["members"][0].update(health="rm -rf"), "is not one of"),
        (lambda d: d["members"][0].update(leader="yes"), "leader is not true/false"),
        (lambda d: d["members"].append(dict(d["members"][0])), "a rank is named twice"),
        (lambda d: d.update(members=[{"rank": 0, "pid": 1, "health": "serving"}] * 300), "at most 256"),
        (lambda d: d.update(size=0), "size is not in 1..1024"),
        (lambda d: d.update(leader_address="a b"), "leader_address"),
        (lambda d: d.update(v=2), "schema"),
        (lambda d: d.update(api_port=70000), "api_port is not in 1..65535"),
        (lambda d: d.update(api_port="8000"), "api_port is not in 1..65535"),
        (lambda d: d["members"][0].update(incident="$(reboot)"), "incident is not an incident id"),
    ],
    ids=[
        "rank-beyond-size",
        "negative-rank",
        "pid-zero",
        "pid-bool",
        "unknown-health",
        "leader-not-bool",
        "duplicate-rank",
        "too-many-members",
        "size-zero",
        "hostile-address",
        "unknown-schema",
        "api-port-out-of-range",
        "api-port-not-a-number",
        "hostile-incident-id",
    ],  # fmt: skip
)
def test_a_signed_record_with_bad_fields_is_malformed(mutate, detail):
    got = decode(resigned(mutate))
    assert isinstance(got, Rejected) and got.reason == rec.MALFORMED
    assert detail in got.detail


LEADER = record(node="node-a", members=(Member(0, 100, "serving", NOW - 1.0, leader=True),))
HEADLESS = record(node="node-b", members=(Member(1, 200, "stalled", NOW - 20.0),))


def test_a_headless_rank_finds_its_leader_in_the_other_nodes_records():
    v = rec.view(G, [LEADER, HEADLESS])
    assert v.leader() == ("node-a", LEADER.members[0])
    assert v.ranks[1] == ("node-b", HEADLESS.members[0])
    assert v.missing(2) == () and v.conflicts == ()


def test_a_rank_two_nodes_claim_belongs_to_neither_and_is_a_conflict():
    twin = record(node="node-c", members=(Member(1, 300, "serving", NOW),))
    v = rec.view(G, [LEADER, HEADLESS, twin])
    assert 1 not in v.ranks
    assert v.conflicts == ("rank 1 claimed by node-b, node-c",)
    assert v.missing(2) == (1,)


def test_two_leaders_give_no_leader():
    other = record(node="node-c", members=(Member(1, 300, "serving", NOW, leader=True),))
    v = rec.view(G, [LEADER, other])
    assert v.leader() is None
    assert "more than one node says it hosts the leader" in v.conflicts


def test_rejected_records_are_kept_in_the_view_and_add_no_member():
    forged = decode(rec.encode(record(members=(Member(1, 1, "serving", NOW, leader=True),)), OTHER))
    v = rec.view(G, [LEADER, forged])
    assert v.leader() == ("node-a", LEADER.members[0])
    assert v.missing(2) == (1,)
    assert [r.reason for r in v.rejected] == [trust.BAD_SIGNATURE]


def test_the_leaders_api_port_is_the_one_its_own_node_names():
    leader = record(node="node-a", members=LEADER.members, api_port=8000)
    liar = record(node="node-b", members=HEADLESS.members, api_port=9999)  # not the leader's node
    assert rec.view(G, [leader, liar]).leader_api_port() == 8000
    assert rec.view(G, [LEADER, liar]).leader_api_port() is None
