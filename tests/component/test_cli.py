"""The CLI as an operator uses it: exit codes, JSON shapes, errors that name the problem."""

from __future__ import annotations

import json

import pytest
import yaml

from vllm_guardian.cli.control import parse_duration
from vllm_guardian.cli.main import main
from vllm_guardian.incidents import IncidentStore
from vllm_guardian.model import Incident, Kind, Severity, Status, TargetRef


def write_config(tmp_path, **extra):
    cfg = {"state_dir": str(tmp_path / "state"), "api": {"http": None}, **extra}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_check_config_prints_the_effective_config(tmp_path, capsys):
    assert main(["check-config", "-c", write_config(tmp_path, interval=2)]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out)["interval"] == 2


def test_check_config_names_every_bad_key_and_exits_2(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("detectors:\n  busy_loop:\n    window: ten\n  bogus: {}\n")
    assert main(["check-config", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert 'detectors.busy_loop.window: expected a number > 0, got "ten"' in err
    assert "detectors.bogus: unknown key" in err


def test_a_trust_key_file_readable_by_others_is_refused_by_check_config_and_run_before_anything_starts(
    tmp_path, capsys
):
    import os

    keys = tmp_path / "trust.keys"
    keys.write_text("gw aaaaaaaaaaaaaaaaaaaaaaaa\n")
    os.chmod(keys, 0o644)
    cfg = write_config(tmp_path, gates={"enabled": True, "trust": {"keys_file": str(keys)}})
    for command in ("check-config", "run"):
        assert main([command, "-c", cfg]) == 2
        assert "must be 0600 or stricter" in capsys.readouterr().err
    assert not (tmp_path / "state" / "redis").exists()  # nothing was started (no embedded Redis left behind)
    os.chmod(keys, 0o600)
    assert main(["check-config", "-c", cfg]) == 0
    assert "aaaaaaaa" not in capsys.readouterr().out  # the secret is never printed


def test_status_without_a_running_guardian_says_so_and_exits_1(tmp_path, capsys):
    assert main(["status", "-c", write_config(tmp_path)]) == 1
    assert "not reachable" in capsys.readouterr().err


STATUS_DOC = {
    "node": "gpu-1",
    "version": "9.9",
    "targets": [{"name": "llama", "phase": "serving", "serving": True, "pid": 42, "model": "m"}],
    "unmatched": [{"target": "mistral", "reason": "no process matches"}],
}


@pytest.fixture
def serving_status(tmp_path):
    """A control socket answering ``status`` with whatever document ``doc`` holds."""
    from vllm_guardian.surface.control_socket import ControlSocket

    doc: dict = {"value": STATUS_DOC}
    sock = ControlSocket(str(tmp_path / "g.sock"), {"status": lambda req: doc["value"]})
    sock.start()
    try:
        yield sock.path, doc
    finally:
        sock.stop()


def test_status_reads_the_socket_document_back_into_the_table(serving_status, capsys):
    path, _ = serving_status
    assert main(["status", "--socket", path]) == 0
    out = capsys.readouterr().out
    assert "guardian 9.9 on gpu-1" in out and "TARGET llama  [SERVING]  pid 42" in out
    assert "configured target mistral not found: no process matches" in out


def test_status_json_prints_the_document_as_the_socket_sent_it(serving_status, capsys):
    path, _ = serving_status
    assert main(["status", "--json", "--socket", path]) == 0
    assert json.loads(capsys.readouterr().out) == STATUS_DOC


def test_a_status_document_of_the_wrong_shape_is_one_line_naming_the_key(serving_status, capsys):
    path, doc = serving_status
    doc["value"] = {"targets": [{"name": "llama", "pid": "forty-two"}]}
    assert main(["status", "--socket", path]) == 1
    err = capsys.readouterr().err
    assert "cannot read" in err and "status.targets[0].pid: expected int" in err


def test_incidents_list_json_has_the_contract_fields(tmp_path, capsys):
    cfg = write_config(tmp_path)
    store = IncidentStore(str(tmp_path / "state"))
    store.save(
        Incident(
            "01HF7Z9GDG0TRA5GW6MSKGM012",
            Kind.BUSY_LOOP,
            Severity.CRITICAL,
            "n1",
            TargetRef("llm", 10, 20, 8000, "m", "engine_core"),
            Status.FIRING,
            "spins",
            1.7e9,
        )
    )
    assert main(["incidents", "list", "--json", "-c", cfg]) == 0
    items = json.loads(capsys.readouterr().out)
    assert {"id", "kind", "status", "target", "opened_at", "resolved_at", "evidence_dir", "actions"} <= set(items[0])
    assert main(["incidents", "show", "01HF7Z9GDG0TRA5GW6MSKGM012", "-c", cfg]) == 0
    out = capsys.readouterr().out
    assert "busy_loop" in out
    assert "runbook https://" in out and "/docs/runbooks/busy_loop.md" in out


def test_incidents_list_refuses_html_instead_of_ignoring_it(tmp_path, capsys):
    assert main(["incidents", "list", "--html", "-c", write_config(tmp_path)]) == 2
    assert "guardian incidents show ID --html" in capsys.readouterr().err


def test_showing_an_unknown_incident_exits_1(tmp_path, capsys):
    assert main(["incidents", "show", "01HF7Z9GDG0TRA5GW6MSKGM099", "-c", write_config(tmp_path)]) == 1


def test_maintenance_on_off_round_trip(tmp_path, capsys):
    cfg = write_config(tmp_path)
    assert main(["maintenance", "on", "--for", "30m", "-c", cfg]) == 0
    assert main(["maintenance", "status", "-c", cfg]) == 0
    assert "maintenance on until" in capsys.readouterr().out
    assert main(["maintenance", "off", "-c", cfg]) == 0
    assert main(["maintenance", "status", "-c", cfg]) == 0
    assert capsys.readouterr().out.strip().endswith("maintenance off")


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("45", 45)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-5m", "0"])
def test_bad_durations_are_refused(text):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)


def test_guardian_config_in_the_environment_is_the_config_when_c_is_not_given(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GUARDIAN_CONFIG", write_config(tmp_path, interval=7))
    assert main(["check-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["interval"] == 7


def test_c_wins_over_guardian_config(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GUARDIAN_CONFIG", str(tmp_path / "absent.yaml"))
    (tmp_path / "mine").mkdir()
    assert main(["check-config", "-c", write_config(tmp_path / "mine", interval=3)]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["interval"] == 3


def test_a_guardian_config_that_does_not_exist_is_named_and_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GUARDIAN_CONFIG", str(tmp_path / "absent.yaml"))
    assert main(["check-config"]) == 2
    assert "GUARDIAN_CONFIG=" in capsys.readouterr().err


ESCAPES = "\x1b[2J\x1b]0;owned\x07\rX\x9b31m"


def test_incidents_list_and_show_print_others_control_characters_visibly_never_raw(tmp_path, capsys):
    """A report's type, a thread or model name, a server's error body: text from others must not
    drive the reader's terminal (clear the screen, retitle it, overwrite a line)."""
    cfg = write_config(tmp_path)
    IncidentStore(str(tmp_path / "state")).save(
        Incident(
            "01HF7Z9GDG0TRA5GW6MSKGM013",
            Kind.OUTPUT_CORRUPTION,
            Severity.CRITICAL,
            "n1",
            TargetRef("llm" + ESCAPES, 10, 20, 8000, "m" + ESCAPES, "engine_core"),
            Status.FIRING,
            "report type " + ESCAPES,
            1.7e9,
            signals={"thread": "Thread" + ESCAPES},
        )
    )
    for argv in (["incidents", "list"], ["incidents", "show", "01HF7Z9GDG0TRA5GW6MSKGM013"]):
        assert main([*argv, "-c", cfg]) == 0
        out = capsys.readouterr().out
        assert not any(c in out for c in "\x1b\x07\r\x9b"), argv
        assert "\\x1b[2J" in out
