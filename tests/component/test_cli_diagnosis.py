"""`guardian incidents show` says what the incident is; `--html` writes the incident page."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from vllm_guardian.cli.main import main
from vllm_guardian.incidents import IncidentStore
from vllm_guardian.model import Incident, Kind, Severity, Status, TargetRef

DIAG = (
    {
        "id": "vllm-scheduler-assertion",
        "title": "Scheduler state bug",
        "confidence": 0.75,
        "matched": ["exception AssertionError: boom"],
        "references": [],
        "workaround": None,
        "fixed_in": None,
        "advice": "restart recovers",
    },
)
CRASH = {
    "exception": "AssertionError",
    "message": "boom",
    "process": "EngineCore_DP0",
    "pid": 7,
    "frames": [{"file": "/v/vllm/v1/core/sched/scheduler.py", "line": 5, "function": "schedule", "code": ""}],
    "chain": [],
    "text": "Traceback ...",
    "source": "file /var/log/v.log",
    "error": None,
}


def setup(tmp_path, evidence=True):
    state = tmp_path / "state"
    cfg = tmp_path / "g.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(state), "api": {"http": None}}))
    store = IncidentStore(str(state))
    iid = "01HF7Z9GDG0TRA5GW6MSKGM012"
    bundle = store.dir_for(iid)
    bundle.mkdir(parents=True, exist_ok=True)
    if evidence:
        (bundle / "series.json").write_text(json.dumps({"http.health_ok": {"": [[1, 1], [2, 1], [3, 0]]}}))
        (bundle / "summary.txt").write_text("Incident x\n\nCapture: 3 files\n")
    store.save(
        Incident(
            iid,
            Kind.ENGINE_DEAD,
            Severity.CRITICAL,
            "n1",
            TargetRef("llm", 10, 20, 8000),
            Status.FIRING,
            "EngineCore is gone",
            1.7e9,
            evidence_dir=str(bundle) if evidence else None,
            diagnosis=DIAG,
            crash=CRASH,
        )
    )
    return str(cfg), iid, bundle


def test_show_prints_the_diagnosis_and_the_crash(tmp_path, capsys):
    cfg, iid, _ = setup(tmp_path)
    assert main(["incidents", "show", iid, "-c", cfg]) == 0
    out = capsys.readouterr().out
    assert "Diagnosis: Scheduler state bug [vllm-scheduler-assertion, confidence 0.75]" in out
    assert "Crash: AssertionError: boom (EngineCore_DP0, at scheduler.py:5 in schedule)" in out


def test_show_json_carries_diagnosis_and_crash(tmp_path, capsys):
    cfg, iid, _ = setup(tmp_path)
    assert main(["incidents", "show", iid, "--json", "-c", cfg]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["diagnosis"][0]["id"] == "vllm-scheduler-assertion" and d["crash"]["exception"] == "AssertionError"


def test_show_html_writes_the_page_into_the_bundle(tmp_path, capsys):
    cfg, iid, bundle = setup(tmp_path)
    assert main(["incidents", "show", iid, "--html", "-c", cfg]) == 0
    path = capsys.readouterr().out.strip()
    assert path == str(bundle / "report.html")
    html = Path(path).read_text()
    assert 'id="crash"' in html and 'id="chart-health"' in html and "Scheduler state bug" in html


def test_show_html_without_a_bundle_prints_the_page(tmp_path, capsys):
    cfg, iid, _ = setup(tmp_path, evidence=False)
    assert main(["incidents", "show", iid, "--html", "-c", cfg]) == 0
    assert capsys.readouterr().out.startswith("<!DOCTYPE html>")


def test_a_bad_extra_catalog_fails_check_config_naming_file_and_key(tmp_path, capsys):
    bad = tmp_path / "site.yaml"
    bad.write_text(
        "schema: 1\nname: site\nversion: '1'\nsignatures:\n"
        "  - {id: s, title: t, kinds: [busy_loop], confidence: 0.5, source: ops,\n"
        "     hot_thread: {state: busy}}\n"
    )
    cfg = tmp_path / "g.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "s"), "diagnosis": {"catalogs": [str(bad)]}}))
    assert main(["check-config", "-c", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"diagnosis.catalogs: {bad}: signatures[0].hot_thread.state: expected one of any, active, idle, gil" in err
