"""Reports from gates elsewhere: the message, what is accepted, what is refused and why."""

from __future__ import annotations

import json

import pytest

from vllm_guardian.gates.reports import ReportError, for_node, parse_report

GOOD = {
    "instance_id": "node-a/vllm-8000",
    "request_id": "req-1",
    "timestamp": 1767225600.5,
    "check_level": "L1",
    "type": "repeated_chars",
    "details": {"output": "!!!!!!!!!!!!", "prompt": "hi"},
}


def msg(**kw) -> str:
    d = dict(GOOD)
    d.update(kw)
    return json.dumps({k: v for k, v in d.items() if v is not ...})


def test_a_good_report():
    r = parse_report(msg())
    assert (r.node, r.target, r.level, r.type, r.request_id) == ("node-a", "vllm-8000", "L1", "repeated_chars", "req-1")
    f = r.failure()
    assert (f.level, f.check, f.prompt, f.output, f.figures["reported_by"]) == (
        "L1",
        "repeated_chars",
        "hi",
        "!!!!!!!!!!!!",
        "req-1",
    )


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("check_level", 3, "L3"),
        ("check_level", "l2", "L2"),
        ("check_level", "5", "L5"),
        ("timestamp", "2026-01-01T00:00:00Z", 1767225600.0),
        ("timestamp", 1767225600500, 1767225600.5),
        ("instance_id", "vllm-8000", None),
    ],
)
def test_accepted_variants(field, value, expected):
    r = parse_report(msg(**{field: value}))
    got = {"check_level": r.level, "timestamp": r.timestamp, "instance_id": r.node}[field]
    assert got == expected


@pytest.mark.parametrize(
    "raw, error",
    [
        ("not json", "not JSON"),
        ("[1]", "JSON object"),
        (msg(type=...), "missing field"),
        (msg(check_level="L9"), "check_level"),
        (msg(check_level=True), "check_level"),
        (msg(timestamp="yesterday"), "timestamp"),
        (msg(timestamp="2026-01-01T00:00:00"), "time zone"),
        (msg(timestamp=-1), "timestamp"),
        (msg(instance_id=""), "instance_id"),
        (msg(instance_id="a/b/c"), "instance_id"),
        (msg(instance_id="/x"), "instance_id"),
        (msg(type=""), "type"),
        (b"\xff\xfe", "UTF-8"),
        (b"x" * 70000, "bytes"),
    ],
)
def test_bad_messages_are_refused_naming_the_problem(raw, error):
    with pytest.raises(ReportError, match=error):
        parse_report(raw)


def test_a_report_addresses_this_node_by_its_node_prefix_only_a_bare_name_reaches_no_node():
    assert not for_node(parse_report(msg(instance_id="t")), "node-a")
    assert for_node(parse_report(msg(instance_id="node-a/t")), "node-a")
    assert not for_node(parse_report(msg(instance_id="node-b/t")), "node-a")
