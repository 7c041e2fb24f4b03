"""Alert events, schema v1 (docs/alerts.md): fields, ids, fingerprints, and when events are due."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from vllm_guardian import __version__
from vllm_guardian.incidents.ids import IdGenerator
from vllm_guardian.model import Action, Incident, Kind, Severity, Status, TargetRef, Transition
from vllm_guardian.sinks.events import (
    EVENT_FIELDS,
    TARGET_FIELDS,
    AlertEmitter,
    IncidentAlerts,
    event_from_incident,
    event_time_ms,
    list_evidence_files,
    rfc3339,
)
from vllm_guardian.testing.clock import FakeClock

OPENED = 1_700_000_000.0


def incident(**over) -> Incident:
    base = Incident(
        id="01HZZZZZZZZZZZZZZZZZZZZZZZ",
        kind=Kind.BUSY_LOOP,
        severity=Severity.CRITICAL,
        node="gpu-1",
        target=TargetRef("llama", 4242, 98765, 8000, "tiny-llama", "engine_core"),
        status=Status.FIRING,
        summary="EngineCore main thread spinning",
        opened_at=OPENED,
        signals={"cpu_ratio": 0.99, "threshold": 0.9, "kind": Kind.BUSY_LOOP, "nan": math.nan},
        evidence_dir="/var/lib/vllm_guardian/incidents/X",
        actions=(Action("evidence", "ok", OPENED + 1.5, "3 files"),),
    )
    return replace(base, **over)


def resolved_incident() -> Incident:
    return incident().resolve(OPENED + 60, "progress resumed")


# ---------------------------------------------------------------- the schema
@pytest.mark.parametrize("inc, reason", [(incident(), "opened"), (resolved_incident(), "resolved")])
def test_an_event_has_every_schema_field(inc, reason):
    ev = event_from_incident(inc, "gpu-1", OPENED + 61, reason=reason, evidence_files=["incident.json"])
    assert set(ev) == set(EVENT_FIELDS)
    assert set(ev["target"]) == set(TARGET_FIELDS)
    assert set(ev["evidence"]) == {"dir", "files"}
    assert all(set(a) == {"name", "status", "at", "detail"} for a in ev["actions"])


def test_a_firing_event_says_firing_and_has_no_end():
    ev = event_from_incident(incident(), "gpu-1", OPENED + 2, reason="opened")
    assert ev["schema"] == 1
    assert ev["status"] == "firing"
    assert ev["reason"] == "opened"
    assert ev["ends_at"] is None
    assert ev["starts_at"] == "2023-11-14T22:13:20.000Z"
    assert ev["timestamp"] == "2023-11-14T22:13:22.000Z"


def test_a_resolved_event_ends_when_the_incident_resolved():
    ev = event_from_incident(resolved_incident(), "gpu-1", OPENED + 90, reason="resolved")
    assert ev["status"] == "resolved"
    assert ev["ends_at"] == "2023-11-14T22:14:20.000Z"
    assert ev["actions"][-1] == {
        "name": "resolve",
        "status": "ok",
        "at": "2023-11-14T22:14:20.000Z",
        "detail": "progress resumed",
    }


def test_the_event_carries_the_incident_its_target_and_its_generator():
    ev = event_from_incident(incident(), "gpu-1", OPENED, reason="opened", evidence_files=["a.txt"])
    assert ev["incident_id"] == "01HZZZZZZZZZZZZZZZZZZZZZZZ"
    assert ev["kind"] == "busy_loop" and ev["severity"] == "critical" and ev["node"] == "gpu-1"
    assert ev["target"] == {
        "name": "llama",
        "pid": 4242,
        "starttime": 98765,
        "port": 8000,
        "model": "tiny-llama",
        "role": "engine_core",
        "namespace": None,  # not matched through a pod
        "pod": None,
    }
    assert ev["evidence"] == {"dir": "/var/lib/vllm_guardian/incidents/X", "files": ["a.txt"]}
    assert ev["generator"] == f"vllm-guardian/{__version__}@gpu-1"


def test_signals_are_made_json_safe():
    ev = event_from_incident(incident(), "gpu-1", OPENED, reason="opened")
    assert ev["signals"] == {"cpu_ratio": 0.99, "threshold": 0.9, "kind": "busy_loop", "nan": None}


@pytest.mark.parametrize("reason", ["", "fired", "RESOLVED"])
def test_an_unknown_reason_is_refused(reason):
    with pytest.raises(ValueError):
        event_from_incident(incident(), "gpu-1", OPENED, reason=reason)


@pytest.mark.parametrize(
    "wall, text",
    [
        (0.0, "1970-01-01T00:00:00.000Z"),
        (1_700_000_000.25, "2023-11-14T22:13:20.250Z"),
        (None, None),
    ],
)
def test_times_are_rfc3339_utc_with_milliseconds(wall, text):
    assert rfc3339(wall) == text


# ---------------------------------------------------------------- ids and fingerprints
def test_event_ids_are_unique_and_sort_in_creation_order():
    ids = IdGenerator()
    walls = [OPENED, OPENED, OPENED + 0.0004, OPENED + 1, OPENED + 1, OPENED + 3600]
    made = [event_from_incident(incident(), "gpu-1", w, reason="renotify", ids=ids)["id"] for w in walls]
    assert len(set(made)) == len(made)
    assert sorted(made) == made


def test_an_event_id_encodes_its_time():
    ev = event_from_incident(incident(), "gpu-1", OPENED + 5, reason="opened")
    assert event_time_ms(ev) == int((OPENED + 5) * 1000)


@pytest.mark.parametrize("ev", [{}, {"id": "not-a-ulid!"}])
def test_an_id_that_is_not_a_ulid_has_time_zero(ev):
    assert event_time_ms(ev) == 0


def test_the_fingerprint_is_stable_across_the_incidents_life():
    a = event_from_incident(incident(), "gpu-1", OPENED, reason="opened")
    b = event_from_incident(
        replace(incident(), id="01J00000000000000000000000"), "gpu-1", OPENED + 7200, reason="renotify"
    )
    c = event_from_incident(resolved_incident(), "gpu-1", OPENED + 90, reason="resolved")
    assert a["fingerprint"] == b["fingerprint"] == c["fingerprint"] == "gpu-1/llama/busy_loop"
    assert len({a["id"], b["id"], c["id"]}) == 3


@pytest.mark.parametrize(
    "other",
    [
        {"node": "gpu-2"},
        {"kind": Kind.ENGINE_STALL},
        {"target": TargetRef("mistral", 4242, 98765, 8000)},
    ],
)
def test_a_different_node_target_or_kind_has_a_different_fingerprint(other):
    base = event_from_incident(incident(), "gpu-1", OPENED, reason="opened")["fingerprint"]
    assert event_from_incident(incident(**other), "gpu-1", OPENED, reason="opened")["fingerprint"] != base


def test_a_target_pid_change_keeps_the_fingerprint():
    moved = incident(target=TargetRef("llama", 5555, 1, 8000, "tiny-llama", "engine_core"))
    assert (
        event_from_incident(moved, "gpu-1", OPENED, reason="opened")["fingerprint"]
        == event_from_incident(incident(), "gpu-1", OPENED, reason="opened")["fingerprint"]
    )


# ---------------------------------------------------------------- when events are due
def emitter(interval: float = 60.0) -> AlertEmitter:
    return AlertEmitter("gpu-1", interval, list_files=lambda d: [])


@pytest.mark.parametrize(
    "tr, reason, status",
    [
        (Transition(incident(), None), "opened", "firing"),
        (Transition(incident(), Status.FIRING), "updated", "firing"),
        (Transition(resolved_incident(), Status.FIRING), "resolved", "resolved"),
    ],
)
def test_every_transition_makes_one_event(tr, reason, status):
    ev = emitter().on_transition(tr, OPENED, 100.0)
    assert (ev["reason"], ev["status"]) == (reason, status)


def test_a_firing_incident_is_renotified_after_the_interval():
    em = emitter(60.0)
    em.on_transition(Transition(incident(), None), OPENED, 100.0)
    assert em.due([incident()], OPENED + 59, 159.0) == []
    (ev,) = em.due([incident()], OPENED + 60, 160.0)
    assert ev["reason"] == "renotify" and ev["status"] == "firing"
    assert em.due([incident()], OPENED + 61, 161.0) == []


def test_an_incident_first_seen_by_due_is_not_renotified_at_once():
    em = emitter(60.0)
    assert em.due([incident()], OPENED, 100.0) == []
    assert len(em.due([incident()], OPENED + 60, 160.0)) == 1


def test_a_resolved_incident_is_never_renotified():
    em = emitter(60.0)
    em.on_transition(Transition(incident(), None), OPENED, 100.0)
    em.on_transition(Transition(resolved_incident(), Status.FIRING), OPENED + 10, 110.0)
    assert em.due([resolved_incident()], OPENED + 1000, 1100.0) == []


def test_an_incident_no_longer_open_is_forgotten():
    em = emitter(60.0)
    em.on_transition(Transition(incident(), None), OPENED, 100.0)
    assert em.due([], OPENED + 30, 130.0) == []
    assert em.due([incident()], OPENED + 70, 170.0) == []  # seen afresh: announced "now"


@pytest.mark.parametrize("interval", [0.0, -1.0])
def test_the_renotify_interval_must_be_positive(interval):
    with pytest.raises(ValueError):
        AlertEmitter("gpu-1", interval)


def test_the_emitter_lists_the_evidence_files_through_its_seam():
    seen: list[str | None] = []

    def list_files(evidence_dir: str | None) -> list[str]:
        seen.append(evidence_dir)
        return ["incident.json"]

    em = AlertEmitter("gpu-1", 60.0, list_files=list_files)
    ev = em.on_transition(Transition(incident(), None), OPENED, 100.0)
    assert seen == ["/var/lib/vllm_guardian/incidents/X"]
    assert ev["evidence"]["files"] == ["incident.json"]


def test_incident_alerts_publishes_transitions_and_renotifications():
    clock = FakeClock()
    published: list[dict] = []
    alerts = IncidentAlerts(emitter(60.0), published.append, clock)
    alerts(Transition(incident(), None))
    clock.advance(60)
    assert alerts.renotify([incident()]) == 1
    assert [e["reason"] for e in published] == ["opened", "renotify"]
    assert published[0]["timestamp"] == rfc3339(clock.wall() - 60)


# ---------------------------------------------------------------- evidence files
def test_evidence_files_are_listed_relative_and_sorted(tmp_path):
    (tmp_path / "proc" / "42").mkdir(parents=True)
    (tmp_path / "proc" / "42" / "status").write_text("x")
    (tmp_path / "pyspy-42-engine_core.txt").write_text("x")
    (tmp_path / "incident.json").write_text("{}")
    assert list_evidence_files(str(tmp_path)) == ["incident.json", "proc/42/status", "pyspy-42-engine_core.txt"]


def test_evidence_files_are_capped(tmp_path):
    for i in range(5):
        (tmp_path / f"f{i}").write_text("x")
    assert list_evidence_files(str(tmp_path), limit=2) == ["f0", "f1"]


@pytest.mark.parametrize("directory", [None, "", "/nonexistent/guardian/evidence"])
def test_no_evidence_folder_lists_nothing(directory):
    assert list_evidence_files(directory) == []


def test_every_incident_kind_has_its_runbook_and_the_event_links_it():
    """Kinds are read from the code: a kind added without docs/runbooks/<kind>.md fails here."""
    from pathlib import Path

    from vllm_guardian.incidents.runbooks import RUNBOOKS_PATH, RUNBOOKS_URL, runbook_url
    from vllm_guardian.model import Kind

    root = Path(__file__).resolve().parents[2]
    missing = [k.value for k in Kind if not (root / RUNBOOKS_PATH / f"{k.value}.md").is_file()]
    assert missing == []
    assert runbook_url("busy_loop") == f"{RUNBOOKS_URL}/busy_loop.md"
    ev = event_from_incident(incident(), "gpu-1", OPENED + 2, reason="opened")
    assert ev["runbook"] == runbook_url(ev["kind"])
