"""External evidence is a hint, not a verdict: reports, other nodes' fingerprints and
autodiscovered local servers' answers may raise an alert; only the guardian's own failing round
lets an ``output_corruption`` restart."""

from __future__ import annotations

import dataclasses

import pytest

from vllm_guardian.config.schema_detectors import DetectorsConfig, OutputCorruptionConfig
from vllm_guardian.detectors import output_corruption
from vllm_guardian.gates.judge import GateFailure
from vllm_guardian.gates.ledger import LedgerView, ReportRecord, RoundRecord
from vllm_guardian.remediation.external import external_hold

from tests.support.detector_world import make_view

CFG = OutputCorruptionConfig()
ALL = frozenset({"L1", "L2", "L3", "L4", "L5"})


def fail(level: str, source: str = "own") -> GateFailure:
    return GateFailure(level, "x", "p", "garbage", "ok", {}, source=source)


def rnd(t: float, *failures: GateFailure) -> RoundRecord:
    return RoundRecord(t, failures, ALL)


def rep(t: float, level: str) -> ReportRecord:
    return ReportRecord(t, fail(level, "report"), "req")


def signals(rounds, reports, now: float) -> dict:
    base = make_view()
    view = dataclasses.replace(
        base, state=dataclasses.replace(base.state, now=now), gates=LedgerView(tuple(rounds), tuple(reports), 60.0)
    )
    f = output_corruption.evaluate(view, DetectorsConfig())
    assert f is not None
    return dict(f.signals)


PEERS_L4 = [rnd(t, fail("L4", "peers")) for t in (0, 60, 120)]
LOCAL_L4 = [rnd(t, fail("L4", "local_peers")) for t in (0, 60, 120)]


@pytest.mark.parametrize(
    "rounds, reports, now, trusted, held",
    [
        # the guardian's own rounds make the condition: act, trusted or not
        ([rnd(0, fail("L3"))], [], 0, False, None),
        ([rnd(0, fail("L3"))], [rep(0, "L3")], 0, False, None),
        # one report (a forged one, say) and a clean own round: alert only
        ([rnd(0)], [rep(1, "L3")], 1, True, "until the guardian's own confirming gate round fails"),
        ([rnd(0)], [rep(1, "L3")], 1, False, "unauthenticated"),
        # signed report, then the guardian's own round failed too: confirmed
        ([rnd(0), rnd(5, fail("L1"))], [rep(1, "L3")], 5, True, None),
        # ...but unsigned evidence never restarts, even confirmed by a lesser own failure
        ([rnd(0), rnd(5, fail("L1"))], [rep(1, "L3")], 5, False, "unauthenticated"),
        # L4 that only other nodes' fingerprints make: condition C, held the same way
        (PEERS_L4, [], 120, False, "other nodes' fingerprints"),
        (PEERS_L4, [], 120, True, "until the guardian's own"),
        ([rnd(0, fail("L4", "peers")), rnd(60, fail("L4", "peers")), rnd(120, fail("L4"))], [], 120, True, None),
        # L4 that only autodiscovered local servers make: nothing signs them, keys or not, confirmed or not
        (LOCAL_L4, [], 120, False, "no key authenticates autodiscovered local servers' answers"),
        (LOCAL_L4, [], 120, True, "no key authenticates autodiscovered local servers' answers"),
        ([*LOCAL_L4[:2], rnd(120, fail("L4", "local_peers"), fail("L1"))], [], 120, True, "no key authenticates"),
    ],
    ids=[
        "own",
        "own+report",
        "signed-report",
        "unsigned-report",
        "confirmed",
        "unsigned-confirmed",
        "peers-untrusted",
        "peers-signed",
        "peers-confirmed",
        "local-untrusted",
        "local-signed",
        "local-confirmed",
    ],  # fmt: skip
)
def test_external_evidence_alone_never_restarts(rounds, reports, now, trusted, held):
    hold = external_hold(signals(rounds, reports, now), trusted)
    if held is None:
        assert hold is None
    else:
        assert hold is not None and held in hold


def test_the_finding_says_what_it_rests_on():
    s = signals([rnd(0), rnd(5, fail("L1"))], [rep(1, "L3")], 5)
    assert (s["own_conditions"], s["external"], s["confirmed_by_own_round"]) == ([], ["report"], True)
    s = signals([rnd(0, fail("L3"))], [], 0)
    assert (s["own_conditions"], s["external"]) == (["B"], [])


def test_a_condition_only_autodiscovered_local_servers_make_is_not_the_guardians_own():
    s = signals(LOCAL_L4, [], 120)
    assert (s["condition"], s["own_conditions"], s["external"]) == ("C", [], ["local_peers"])


def test_incidents_of_other_kinds_are_not_held():
    assert external_hold({"cpu_ratio": 0.99}, trusted=False) is None
