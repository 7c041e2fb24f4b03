"""What a message from the reports channel may do: bounded, authenticated, de-duplicated,
rate-limited; everything else dropped, counted by reason, logged once per episode."""

from __future__ import annotations

import dataclasses
import json
import logging
import tracemalloc

import pytest

from vllm_guardian.config.schema import TrustConfig
from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors import output_corruption
from vllm_guardian.gates.shared import GatesShared
from vllm_guardian.gates.trust import KeyRing, Keys, sign
from vllm_guardian.incidents.store import jsonable

from tests.support.detector_world import make_view

NOW = 1767225600.0
KEYS = Keys({"gw": b"0123456789abcdef0123"}, "gw")


def report(**kw) -> dict:
    m = {
        "instance_id": "node-a/t",
        "request_id": "r1",
        "timestamp": NOW,
        "check_level": "L1",
        "type": "repeated_chars",
        "details": {"output": "!!!!!!!!!!!!"},
    }
    m.update(kw)
    return m


def shared(keys: Keys | None = None, started: float | None = None, **trust) -> GatesShared:
    ring = KeyRing.fixed(keys) if keys is not None else None
    s = GatesShared("node-a", 60.0, logging.getLogger("test.intake"), TrustConfig(**trust), ring, started=started)
    s.known_targets = frozenset({"t"})
    return s


def send(s: GatesShared, msg: dict | str | bytes, wall: float = NOW, mono: float = 100.0) -> str:
    raw = msg if isinstance(msg, (str, bytes)) else json.dumps(msg)
    return s.accept_report(raw, mono, wall)


# ---------------------------------------------------------------- D1: bounded, flat
def test_a_deeply_nested_report_never_reaches_an_incident_deep_or_huge():
    """A 1.3 KB report nesting 600 lists in ``details`` was kept raw and broke saving."""
    s = shared()
    deep = "[" * 600 + "]" * 600
    head = json.dumps(report(check_level=3, details={"a": 0}))[: -len("0}}")]
    assert send(s, head + deep + "}}") == "malformed"  # 1.3 KB, 600 lists deep
    wide = {"output": "x" * 20_000, **{f"k{i}": {"n": {"e": {"s": {"t": [i] * 20}}}} for i in range(100)}}
    assert send(s, report(check_level="L3", details=wide, request_id="r2")) == "accepted"
    (rep,) = s.view("t").reports
    assert len(rep.failure.output) <= 120 and len(rep.failure.figures) <= 17
    assert all(not isinstance(v, (dict, list)) for v in rep.failure.figures.values())
    view = _target_view(s)
    finding = output_corruption.evaluate(view, DetectorsConfig())
    assert finding is not None and len(json.dumps(jsonable(finding.signals))) < 8_000


def _target_view(s: GatesShared):
    base = make_view()
    now = s.view("t").reports[-1].t
    return dataclasses.replace(base, state=dataclasses.replace(base.state, now=now), gates=s.view("t"))


# ---------------------------------------------------------------- D2: never raises
@pytest.mark.parametrize(
    "raw",
    ["[" * 100_000, "[" * 2000 + "]" * 2000, '{"a":' * 3000, b"\xff\xfe", "", "null", "1e999999", '"x"' * 10],
)
def test_whatever_a_publisher_sends_is_counted_never_raised(raw):
    s = shared()
    assert send(s, raw) == "malformed"
    assert s.report_counts["malformed"] == 1


# ---------------------------------------------------------------- D3: unknown names
def test_reports_for_thousands_of_unknown_targets_keep_memory_and_log_bounded(caplog):
    s = shared()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    with caplog.at_level(logging.WARNING, "test.intake"):
        for i in range(4000):
            send(s, report(instance_id=f"node-a/ghost-{i}", request_id=f"r{i}"))
    grown = sum(st.size_diff for st in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    assert s.report_counts["unknown_target"] == 4000
    assert len(s.intake.unknown) <= 32 and s.intake.summary().unknown_targets[-1] == "ghost-3999"
    assert len([r for r in caplog.records if "unknown_target" in r.getMessage()]) == 1
    assert grown < 2 * 1024 * 1024  # nothing kept per name (it was +459 MiB for 4000 before)


# ---------------------------------------------------------------- D4: authenticated, de-duplicated
SIGNED = sign(report(), KEYS)


@pytest.mark.parametrize(
    "msg, wall, reason",
    [
        (report(), NOW, "unsigned"),
        (dict(SIGNED, check_level="L3"), NOW, "bad_signature"),
        (sign(report(), Keys({"gw": b"another secret of 20c"}, "gw")), NOW, "bad_signature"),
        (sign(report(instance_id="t"), KEYS), NOW, "no_node"),
        (sign(report(timestamp=NOW + 31), KEYS), NOW, "future"),
        (sign(report(timestamp=NOW - 601), KEYS), NOW, "stale"),
        (sign(report(instance_id="node-a/nobody"), KEYS), NOW, "unknown_target"),
        (sign(report(instance_id="node-b/t"), KEYS), NOW, "other_node"),
    ],
    ids=["unsigned", "tampered", "other-key", "bare-name", "future", "stale", "unknown", "other-node"],
)
def test_with_keys_a_report_is_dropped_and_counted_by_reason(msg, wall, reason):
    s = shared(KEYS)
    assert send(s, msg, wall) == reason
    assert s.report_counts[reason] == 1 and s.view("t").empty


def test_with_keys_a_signed_report_is_accepted_once_and_its_copies_are_replays():
    s = shared(KEYS)
    assert [send(s, SIGNED, NOW + i) for i in range(5)] == ["accepted"] + ["replay"] * 4
    assert len(s.view("t").reports) == 1  # five copies of one request id no longer make condition A


def test_a_report_accepted_before_a_restart_is_refused_after_it_and_its_copies_are_replays():
    before = shared(KEYS, started=NOW - 3600)
    assert send(before, SIGNED, NOW) == "accepted"
    after = shared(KEYS, started=NOW + 60)  # the guardian restarted a minute later: a new, empty replay window
    assert [send(after, SIGNED, NOW + 70 + i) for i in range(3)] == ["before_start", "replay", "replay"]
    assert after.view("t").empty


@pytest.mark.parametrize(
    "stamp, outcome",
    [
        (NOW - 1, "before_start"),  # made before the start
        (NOW + 29, "before_start"),  # within max_skew (30) of it: a gateway 30 s ahead made it before the start
        (NOW + 31, "accepted"),  # made after the start, whatever the gateway's skew
    ],
    ids=["before", "within-skew", "after"],
)
def test_a_report_stamped_before_the_start_plus_max_skew_is_refused(stamp, outcome):
    s = shared(KEYS, started=NOW)
    assert send(s, sign(report(timestamp=stamp), KEYS), max(stamp, NOW) + 1) == outcome


def test_without_keys_reports_are_still_de_duplicated_and_need_a_node():
    s = shared()
    assert send(s, report()) == "accepted" and send(s, report()) == "replay"
    assert send(s, report(instance_id="t", request_id="r9")) == "no_node"


def test_counted_reports_are_rate_limited_per_target():
    s = shared(KEYS, reports_per_minute=10)
    got = [send(s, sign(report(request_id=f"r{i}"), KEYS), NOW, mono=100.0) for i in range(50)]
    assert got.count("accepted") == 10 and got.count("rate_limited") == 40


def test_each_drop_reason_is_logged_once_per_episode(caplog):
    s = shared(KEYS)
    with caplog.at_level(logging.WARNING, "test.intake"):
        for i in range(100):
            send(s, report(request_id=f"u{i}"), NOW + i)  # unsigned
            send(s, "[[[", NOW + i)
        send(s, report(request_id="late"), NOW + 1000)  # after 300 s of quiet: a new episode
    lines = [r.getMessage() for r in caplog.records]
    assert len([x for x in lines if "gate report unsigned" in x]) == 2
    assert len([x for x in lines if "gate report malformed" in x]) == 1
    assert s.intake.summary().reports_dropped["unsigned"] == 101


def test_an_accepted_report_asks_for_a_confirming_round_of_its_own():
    s = shared(KEYS)
    asked: list[tuple[str, str]] = []
    s.intake.confirm = lambda target, why: asked.append((target, why))
    send(s, SIGNED)
    assert asked and asked[0][0] == "t"
