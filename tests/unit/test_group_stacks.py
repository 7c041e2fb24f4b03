"""A node's answer to a group capture request: believed only signed, fresh, filed right and bounded."""

from __future__ import annotations

import json

import pytest

from vllm_guardian.gates import trust
from vllm_guardian.groups import stacks as st

KEYS = trust.Keys(secrets={"k1": b"s" * 32}, signer="k1")
OTHER = trust.Keys(secrets={"k9": b"x" * 32}, signer="k9")
NOW = 1_000_000.0
G = "dp@10.0.0.1:13345"
ANSWER = st.Stacks(G, "inc-1", "node-a", NOW - 1.0, ((0, "/var/lib/guardian/group-stacks/inc-1/node-a-rank0.txt"),))


def decode(raw, keys=KEYS, node="node-a"):
    return st.decode(raw, keys, group=G, node=node, now=NOW)


def resigned(mutate) -> str:
    doc = json.loads(st.encode(ANSWER, KEYS))
    mutate(doc)
    return json.dumps(trust.sign(doc, KEYS))


def test_a_signed_answer_reads_back_and_says_where_each_ranks_stacks_are():
    got = decode(st.encode(ANSWER, KEYS))
    assert got == ANSWER
    assert got.line() == "node-a: rank 0 /var/lib/guardian/group-stacks/inc-1/node-a-rank0.txt"


@pytest.mark.parametrize(
    ("raw", "keys", "node", "reason"),
    [
        (lambda: st.encode(ANSWER, OTHER), KEYS, "node-a", trust.BAD_SIGNATURE),
        (lambda: st.encode(ANSWER, KEYS), trust.Keys(), "node-a", "untrusted"),
        (lambda: st.encode(ANSWER, KEYS), KEYS, "node-b", "misfiled"),
        (lambda: resigned(lambda d: d.update(time=NOW - 3600)), KEYS, "node-a", "stale"),
        (lambda: resigned(lambda d: d["files"][0].update(path="/etc/../shadow")), KEYS, "node-a", "malformed"),
        (lambda: resigned(lambda d: d["files"][0].update(path="relative.txt")), KEYS, "node-a", "malformed"),
        (lambda: resigned(lambda d: d["files"][0].update(path="/x\n/y")), KEYS, "node-a", "malformed"),
        (lambda: resigned(lambda d: d["files"][0].update(rank=True)), KEYS, "node-a", "malformed"),
        (lambda: resigned(lambda d: d.update(failed=["\x1b[2J"])), KEYS, "node-a", "malformed"),
        (lambda: resigned(lambda d: d.update(files=[d["files"][0]] * 65)), KEYS, "node-a", "malformed"),
        (lambda: "x" * (st.MAX_BYTES + 1), KEYS, "node-a", "malformed"),
    ],
    ids=[
        "unknown-key",
        "reader-has-no-keys",
        "filed-under-another-node",
        "stale",
        "path-climbs",
        "path-relative",
        "path-with-newline",
        "rank-bool",
        "failure-with-escape-codes",
        "too-many-files",
        "oversized",
    ],  # fmt: skip
)
def test_an_answer_not_believed_is_refused_with_its_reason(raw, keys, node, reason):
    got = decode(raw(), keys, node)
    assert isinstance(got, st.Refused) and got.reason == reason, got
