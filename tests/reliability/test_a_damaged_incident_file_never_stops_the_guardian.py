"""Fault 19: a hostile or damaged incident.json never stops the guardian from starting, and
``incidents show`` answers a bad id or a missing evidence folder with a message, not a traceback."""

from __future__ import annotations

import shutil

import pytest
import yaml

from vllm_guardian.cli.main import main
from vllm_guardian.incidents import IncidentStore
from vllm_guardian.model import Incident, Kind, Severity, Status, TargetRef

ID = "01HF7Z9GDG0TRA5GW6MSKGM012"


def config(tmp_path) -> str:
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "api": {"http": None}}))
    return str(path)


def incident(evidence_dir=None) -> Incident:
    return Incident(
        ID,
        Kind.BUSY_LOOP,
        Severity.CRITICAL,
        "n1",
        TargetRef("llm", 10, 20, 8000, "m", "engine_core"),
        Status.FIRING,
        "spins",
        1.7e9,
        evidence_dir=evidence_dir,
    )


def test_a_deeply_nested_incident_file_is_skipped_at_start_up(tmp_path):
    store = IncidentStore(str(tmp_path / "state"))
    store.save(incident())
    bad = store.root / "01HF7Z9GDG0TRA5GW6MSKGM099"
    bad.mkdir()
    (bad / "incident.json").write_text("[" * 100_000 + "]" * 100_000)
    assert [i.id for i in store.load_open()] == [ID]


@pytest.mark.parametrize("bad_id", ["../etc", "a/b", ".hidden", "a b"])
def test_showing_an_invalid_id_says_so(tmp_path, capsys, bad_id):
    assert main(["incidents", "show", bad_id, "-c", config(tmp_path)]) in (1, 2)
    err = capsys.readouterr().err
    assert "incident id" in err and "Traceback" not in err


def test_showing_an_incident_whose_evidence_folder_is_gone_says_so(tmp_path, capsys):
    evidence = tmp_path / "state" / "incidents" / ID / "evidence"
    evidence.mkdir(parents=True)
    IncidentStore(str(tmp_path / "state")).save(incident(str(evidence)))
    shutil.rmtree(evidence)
    assert main(["incidents", "show", ID, "-c", config(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "evidence folder is missing" in out
