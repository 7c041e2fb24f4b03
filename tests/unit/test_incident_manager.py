"""Incident manager: hysteresis, dedupe, lifecycle, restart safety; incident ids."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vllm_guardian.config.schema_detectors import BusyLoopConfig, DetectorsConfig, EngineDeadConfig
from vllm_guardian.incidents.ids import IdGenerator, LENGTH, decode_ms, new_incident_id
from vllm_guardian.incidents.manager import IncidentManager
from vllm_guardian.incidents.store import IncidentStore
from vllm_guardian.model import Action, Finding, Incident, Kind, Severity, Status, TargetRef
from vllm_guardian.testing.clock import FakeClock

BL = Kind.BUSY_LOOP
CFG = DetectorsConfig(
    busy_loop=BusyLoopConfig(open_after=2, resolve_after=3),
    engine_dead=EngineDeadConfig(open_after=1, resolve_after=1),
)
REF = TargetRef(name="llm", pid=100, starttime=11, port=8000, model="tiny")


def hit(kind: Kind = BL, confirmed: bool = True, **signals) -> Finding:
    return Finding(
        kind=kind,
        target="llm",
        severity=Severity.CRITICAL,
        summary=f"{kind.value} seen",
        signals={"role": "engine_core", "cpu_ratio": 0.99, **signals},
        confirmed=confirmed,
        subject="p200/t200",
    )


SUSPECT = hit(confirmed=False)


def manager(store=None, clock=None, cfg=CFG) -> IncidentManager:
    return IncidentManager("node-a", clock or FakeClock(), store, cfg)


def stored(store: IncidentStore, incident_id: str) -> Incident:
    inc = store.load(incident_id)
    assert inc is not None, f"incident {incident_id} is not in the store"
    return inc


def feed(mgr: IncidentManager, *findings, kind: Kind = BL, clock: FakeClock | None = None):
    """One tick per finding; returns the transitions of every tick."""
    out = []
    for f in findings:
        out.append(mgr.update("llm", REF, {kind: f}))
        if clock is not None:
            clock.advance(1.0)
    return out


# ------------------------------------------------------------------ opening
@pytest.mark.parametrize(
    "sequence, opens_at",
    [
        ([hit(), hit()], 1),  # open_after = 2
        ([hit(), None, hit(), hit()], 3),  # a negative breaks the streak
        ([hit(), SUSPECT, hit()], 2),  # a suspect counts neither and resets nothing
        ([hit(), SUSPECT, SUSPECT, SUSPECT], None),  # suspects alone never open
        ([hit()], None),  # not before N
    ],
)
def test_opens_after_n_consecutive_confirmed_findings(sequence, opens_at):
    ticks = feed(manager(), *sequence)
    opened = [i for i, trs in enumerate(ticks) if trs]
    assert opened == ([] if opens_at is None else [opens_at])


def test_opened_incident_is_built_from_the_finding_and_ref():
    clock = FakeClock()
    mgr = manager(clock=clock)
    (tr,) = feed(mgr, hit(), hit(pid=200))[1]
    inc = tr.incident
    assert tr.previous is None
    assert inc.status is Status.FIRING and inc.kind is BL and inc.severity is Severity.CRITICAL
    assert inc.node == "node-a" and inc.fingerprint == "node-a/llm/busy_loop"
    assert inc.target == replace(REF, role="engine_core")
    assert inc.signals["pid"] == 200 and inc.summary == "busy_loop seen"
    assert inc.opened_at == clock.wall()
    assert mgr.open_incidents() == [inc]


def test_kind_thresholds_come_from_its_config_block():
    (tr,) = feed(manager(), hit(Kind.ENGINE_DEAD), kind=Kind.ENGINE_DEAD)[0]
    assert tr.incident.kind is Kind.ENGINE_DEAD


# ------------------------------------------------------------------ resolving
@pytest.mark.parametrize(
    "after_open, resolves_at",
    [
        ([None, None, None], 2),  # resolve_after = 3
        ([None, None, SUSPECT, None], 3),  # a suspect does not resolve, nor reset
        ([None, None, hit(), None, None], None),  # a positive breaks the negative streak
        ([SUSPECT] * 6, None),  # suspects never resolve
    ],
)
def test_resolves_after_m_consecutive_negatives(after_open, resolves_at):
    mgr = manager()
    feed(mgr, hit(), hit())
    ticks = feed(mgr, *after_open)
    resolved = [i for i, trs in enumerate(ticks) if trs]
    assert resolved == ([] if resolves_at is None else [resolves_at])
    if resolves_at is not None:
        (tr,) = ticks[resolves_at]
        assert tr.previous is Status.FIRING and tr.incident.status is Status.RESOLVED
        assert tr.incident.resolved_at is not None
        assert tr.incident.actions[-1].name == "resolve"
        assert mgr.open_incidents() == []


def test_dedupe_keeps_one_incident_and_the_latest_signals():
    mgr = manager()
    feed(mgr, hit(), hit(cpu_ratio=0.95))
    later = feed(mgr, hit(cpu_ratio=0.97), hit(cpu_ratio=1.0))
    assert later == [[], []]
    (inc,) = mgr.open_incidents()
    assert inc.signals["cpu_ratio"] == 0.95  # the opening finding's
    latest = mgr.latest_signals(inc.id)
    assert latest is not None and latest["cpu_ratio"] == 1.0


def test_reopen_after_resolve_gives_a_new_id():
    clock = FakeClock()
    mgr = manager(clock=clock)
    first = feed(mgr, hit(), hit(), clock=clock)[1][0].incident
    feed(mgr, None, None, None, clock=clock)
    assert feed(mgr, hit(), clock=clock) == [[]]  # needs open_after positives again
    second = feed(mgr, hit(), clock=clock)[0][0].incident
    assert second.id != first.id and second.id > first.id
    assert [i.id for i in mgr.recent(10)] == [second.id, first.id]


def test_targets_and_kinds_are_independent():
    mgr = manager()
    mgr.update("llm", REF, {BL: hit()})
    other = replace(REF, name="other", pid=300)
    mgr.update("other", other, {BL: hit()})
    mgr.update("llm", REF, {BL: hit(), Kind.ENGINE_DEAD: None})
    (inc,) = mgr.open_incidents()
    assert inc.target.name == "llm"


def test_kinds_missing_from_a_tick_are_untouched():
    mgr = manager()
    feed(mgr, hit(), hit())
    for _ in range(5):
        mgr.update("llm", REF, {Kind.ENGINE_DEAD: None})
    assert len(mgr.open_incidents()) == 1


def test_resolve_target_resolves_all_its_open_incidents():
    mgr = manager()
    feed(mgr, hit(), hit())
    feed(mgr, hit(Kind.ENGINE_DEAD), kind=Kind.ENGINE_DEAD)
    trs = mgr.resolve_target("llm", "target forgotten")
    assert {t.incident.kind for t in trs} == {BL, Kind.ENGINE_DEAD}
    assert all(t.incident.status is Status.RESOLVED for t in trs)
    assert trs[0].incident.actions[-1].detail == "target forgotten"
    assert mgr.open_incidents() == []
    assert mgr.resolve_target("llm", "again") == []


# ------------------------------------------------------------------ persistence and restart
def test_restart_with_the_same_store_keeps_the_open_incident_and_does_not_reopen(tmp_path):
    store = IncidentStore(tmp_path)
    first = manager(store)
    (tr,) = feed(first, hit(), hit())[1]
    again = manager(store)
    assert [i.id for i in again.open_incidents()] == [tr.incident.id]
    assert feed(again, hit(), hit(), hit()) == [[], [], []]
    resolved = feed(again, None, None, None)[2][0].incident
    assert resolved.id == tr.incident.id
    assert stored(store, tr.incident.id).status is Status.RESOLVED


def test_every_transition_is_persisted(tmp_path):
    store = IncidentStore(tmp_path)
    mgr = manager(store)
    inc = feed(mgr, hit(), hit())[1][0].incident
    assert store.load(inc.id) == inc
    feed(mgr, None, None, None)
    assert stored(store, inc.id).status is Status.RESOLVED


def test_evidence_and_actions_are_recorded_and_persisted(tmp_path):
    store = IncidentStore(tmp_path)
    mgr = manager(store)
    inc = feed(mgr, hit(), hit())[1][0].incident
    got = mgr.set_evidence(inc.id, "/var/lib/vllm_guardian/incidents/x")
    assert got.evidence_dir == "/var/lib/vllm_guardian/incidents/x"
    got = mgr.add_action(inc.id, Action("drain", "ok", 5.0, "readiness 503"))
    assert got.actions[-1] == Action("drain", "ok", 5.0, "readiness 503")
    assert store.load(inc.id) == got == mgr.get(inc.id)


def test_the_diagnosis_and_its_notes_are_recorded_and_persisted(tmp_path):
    store = IncidentStore(tmp_path)
    mgr = manager(store)
    inc = feed(mgr, hit(), hit())[1][0].incident
    diag = [{"id": "vllm-mm-cache-lru-busy-loop", "confidence": 0.95}]
    note = "device idle while the engine spins (accelerator 0 %)"
    got = mgr.set_diagnosis(inc.id, diag, None, [note])
    assert got.diagnosis == tuple(diag) and got.crash is None
    assert got.summary == f"busy_loop seen; {note}"
    assert mgr.set_diagnosis(inc.id, diag, None, [note]).summary == got.summary  # said once
    assert store.load(inc.id) == mgr.get(inc.id)


def test_actions_can_be_added_after_resolution(tmp_path):
    store = IncidentStore(tmp_path)
    mgr = manager(store)
    inc = feed(mgr, hit(), hit())[1][0].incident
    feed(mgr, None, None, None)
    got = mgr.add_action(inc.id, Action("restart", "ok", 9.0))
    assert got.status is Status.RESOLVED and stored(store, inc.id).actions[-1].name == "restart"


def test_unknown_incident_changes_raise_keyerror():
    with pytest.raises(KeyError):
        manager().set_evidence("01NOPE", "/x")
    assert manager().get("01NOPE") is None


def test_a_failing_store_does_not_break_the_state_machine(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    mgr = manager(IncidentStore(blocker))
    (tr,) = feed(mgr, hit(), hit())[1]
    assert mgr.open_incidents() == [tr.incident]


def test_recent_is_bounded():
    clock = FakeClock()
    mgr = IncidentManager("node-a", clock, None, CFG, recent_limit=3)
    for _ in range(5):
        feed(mgr, hit(), hit(), None, None, None, clock=clock)
    assert len(mgr.recent(100)) == 3


# ------------------------------------------------------------------ ids
def test_ids_are_unique_over_1000_draws_at_the_same_instant():
    ids = {new_incident_id(1_700_000_000.0) for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == LENGTH for i in ids)


def test_ids_sort_by_time_over_1000_draws():
    ids = [new_incident_id(1_700_000_000.0 + i * 0.001) for i in range(1000)]
    assert sorted(ids) == ids


def test_generator_stays_monotonic_within_a_millisecond_and_when_the_clock_steps_back():
    gen = IdGenerator()
    walls = [1_700_000_000.0] * 500 + [1_699_999_999.0] * 10 + [1_700_000_001.0] * 490
    ids = [gen(w) for w in walls]
    assert sorted(ids) == ids and len(set(ids)) == 1000


def test_id_layout_is_ulid():
    def zero(n):
        return b"\0" * n

    assert new_incident_id(1469918176.385, rand=zero) == "01ARYZ6S41" + "0" * 16  # the ULID spec's example time
    assert decode_ms(new_incident_id(1469918176.385)) == 1469918176385
    assert new_incident_id(0.0, rand=lambda n: b"\xff" * n) == "0" * 10 + "Z" * 16
