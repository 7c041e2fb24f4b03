"""Incident store on a real temp dir: atomic JSON files, modes, listing, corrupt files skipped."""

from __future__ import annotations

import json
import logging
import stat
from dataclasses import replace

import pytest

from vllm_guardian.incidents.store import IncidentStore, incident_from_dict, incident_to_dict
from vllm_guardian.model import Action, Incident, Kind, Severity, Status, TargetRef

REF = TargetRef(name="llm", pid=100, starttime=11, port=8000, model="tiny", role="engine_core")


def incident(id_: str = "01HZZZZZZZZZZZZZZZZZZZZZZ0", opened_at: float = 1_700_000_000.0, **kw) -> Incident:
    base = Incident(
        id=id_,
        kind=Kind.BUSY_LOOP,
        severity=Severity.CRITICAL,
        node="node-a",
        target=REF,
        status=Status.FIRING,
        summary="EngineCore thread 200 spins",
        opened_at=opened_at,
        signals={"cpu_ratio": 0.99, "progress": False, "tids": (1, 2)},
        actions=(Action("evidence", "ok", opened_at + 1, "7 files"),),
    )
    return replace(base, **kw)


def test_save_then_load_round_trips(tmp_path):
    store = IncidentStore(tmp_path)
    inc = incident(evidence_dir=str(tmp_path / "incidents" / "x"))
    store.save(inc)
    assert store.load(inc.id) == replace(inc, signals={"cpu_ratio": 0.99, "progress": False, "tids": [1, 2]})


def test_file_uses_the_spec_field_names(tmp_path):
    store = IncidentStore(tmp_path)
    path = store.save(incident())
    doc = json.loads(path.read_text())
    assert set(doc) == {
        "id",
        "kind",
        "status",
        "severity",
        "node",
        "target",
        "summary",
        "signals",
        "opened_at",
        "resolved_at",
        "evidence_dir",
        "actions",
        "fingerprint",
        "diagnosis",
        "crash",
    }
    assert doc["kind"] == "busy_loop" and doc["status"] == "firing" and doc["severity"] == "critical"
    assert doc["target"] == {
        "name": "llm",
        "pid": 100,
        "starttime": 11,
        "port": 8000,
        "model": "tiny",
        "role": "engine_core",
        "namespace": None,  # the pod it runs in, when matched through one
        "pod": None,
    }
    assert doc["actions"] == [{"name": "evidence", "status": "ok", "at": 1_700_000_001.0, "detail": "7 files"}]
    assert doc["fingerprint"] == "node-a/llm/busy_loop"


def test_file_and_folder_modes(tmp_path):
    store = IncidentStore(tmp_path)
    path = store.save(incident())
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o750
    assert stat.S_IMODE((tmp_path / "incidents").stat().st_mode) == 0o750


def test_save_replaces_atomically_and_leaves_no_temporary_file(tmp_path):
    store = IncidentStore(tmp_path)
    inc = incident()
    store.save(inc)
    store.save(inc.resolve(1_700_000_100.0, "cleared"))
    assert [p.name for p in store.dir_for(inc.id).iterdir()] == ["incident.json"]
    loaded = store.load(inc.id)
    assert loaded is not None and loaded.status is Status.RESOLVED


def test_list_is_newest_first_and_limited(tmp_path):
    store = IncidentStore(tmp_path)
    for i, id_ in enumerate(["01A", "01B", "01C"]):
        store.save(incident(id_, opened_at=1000.0 + i))
    assert [i.id for i in store.list()] == ["01C", "01B", "01A"]
    assert [i.id for i in store.list(limit=2)] == ["01C", "01B"]


def test_load_open_returns_only_firing_incidents(tmp_path):
    store = IncidentStore(tmp_path)
    store.save(incident("01A"))
    store.save(incident("01B").resolve(1_700_000_050.0, "ok"))
    assert [i.id for i in store.load_open()] == ["01A"]


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"[]", b'{"id": "01BAD"}', b'{"id":"x","kind":"no_such_kind"}', b"\xff\xfe"],
)
def test_corrupt_files_are_skipped_and_reported(tmp_path, caplog, content):
    store = IncidentStore(tmp_path)
    store.save(incident("01GOOD"))
    bad = tmp_path / "incidents" / "01BAD"
    bad.mkdir()
    (bad / "incident.json").write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="vllm_guardian.incidents.store"):
        assert [i.id for i in store.list()] == ["01GOOD"]
        assert store.load("01BAD") is None
    assert "01BAD" in caplog.text


def test_missing_incident_and_empty_store(tmp_path):
    store = IncidentStore(tmp_path / "never-created")
    assert store.load("01NOPE") is None
    assert store.list() == [] and store.load_open() == []


@pytest.mark.parametrize("bad_id", ["../etc", "a/b", "", ".hidden"])
def test_ids_that_are_paths_are_refused(tmp_path, bad_id):
    with pytest.raises(ValueError):
        IncidentStore(tmp_path).load(bad_id)


def test_codec_round_trips_and_sanitises_signals():
    inc = incident(signals={"rate": float("inf"), "kind": Kind.BUSY_LOOP, "n": None})
    d = incident_to_dict(inc)
    assert d["signals"] == {"rate": None, "kind": "busy_loop", "n": None}
    json.dumps(d, allow_nan=False)
    assert incident_from_dict(d) == replace(inc, signals=d["signals"])


def test_an_incident_whose_signals_nest_thousands_deep_is_saved_not_raised(tmp_path):
    """Saving must never raise on what a finding carries (a report once nested 600 lists)."""
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    path = IncidentStore(tmp_path).save(incident(signals={"sample": {"figures": {"x": deep}}}))
    saved = json.loads(path.read_text())
    assert "nested deeper than" in json.dumps(saved["signals"])
