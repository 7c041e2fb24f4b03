"""Live: every line a short ``guardian run`` writes parses in the format asked for, with the stable
keys (time, level, logger, msg) and target / incident / kind on the lines about an incident.

The run: a simulated vLLM server is found, its engine dies (engine_dead opens within seconds),
the guardian (dry-run) is stopped with SIGTERM. Nothing but log lines may be on its stderr.
"""

from __future__ import annotations

import json
import re

import pytest

from vllm_guardian.sim.control import SimServer
from tests.support.guardian_process import GuardianProcess

pytestmark = pytest.mark.live

LEVELS = {"debug", "info", "warning", "error", "critical"}
TEXT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+): (.*)$")
JOURNAL_TEXT = re.compile(r"^<([2-7])>(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+): (.*)$")
LOGFMT_PAIR = re.compile(r'([a-z_]+)=("(?:[^"\\]|\\.)*"|[^ "]+)(?: |$)')


def parse_logfmt(line: str) -> dict:
    pairs = LOGFMT_PAIR.findall(line)
    assert "".join(f"{k}={v} " for k, v in pairs).rstrip() == line, f"not logfmt: {line!r}"
    return {k: json.loads(v) if v.startswith('"') else v for k, v in pairs}


def parse_json(line: str) -> dict:
    doc = json.loads(line)
    assert isinstance(doc, dict)
    return doc


def parse_text(line: str) -> dict:
    m = TEXT.match(line)
    assert m, f"not the text format: {line!r}"
    return {"level": m[1].lower(), "logger": m[2], "msg": m[3]}


def parse_journal_text(line: str) -> dict:
    m = JOURNAL_TEXT.match(line)
    assert m, f"not journald text (<priority>LEVEL logger: msg, no time): {line!r}"
    priority = {"DEBUG": "7", "INFO": "6", "WARNING": "4", "ERROR": "3", "CRITICAL": "2"}[m[2]]
    assert m[1] == priority
    return {"level": m[2].lower(), "logger": m[3], "msg": m[4]}


def short_run(tmp_path, *args: str, journal: bool = False, model: str = "sim-model") -> list[str]:
    sim = SimServer(startup_delay=1.0, extra_args=("--model", model)).start()
    g = GuardianProcess(tmp_path, sim.port, extra={"policy": {"dry_run": True}})
    try:
        sim.wait_ready(60)
        g.start(*args, journal=journal)
        assert g.wait_ready(30), g.log_text()
        sim.set_fault("die")
        try:
            sim.complete("trip the fault", max_tokens=4, timeout=10)
        except Exception:  # noqa: BLE001 - the engine dies under this request: it fails, which is the point
            pass
        assert g.wait_incident("engine_dead", timeout=30), g.log_text()
    finally:
        sim.stop()
        assert g.stop() == 0, g.log_text()
    return g.log_text().splitlines()


@pytest.mark.parametrize(
    "fmt, parse",
    [("json", parse_json), ("logfmt", parse_logfmt)],
)
def test_every_line_of_a_structured_format_parses_with_the_stable_keys(tmp_path, fmt, parse):
    lines = short_run(tmp_path, "--log-format", fmt)
    docs = [parse(line) for line in lines]
    assert docs and all(list(d)[:4] == ["time", "level", "logger", "msg"] for d in docs)
    assert all(d["level"] in LEVELS and re.match(r"^\d{4}-\d\d-\d\dT[\d:.]+Z$", d["time"]) for d in docs)
    incident = next(d for d in docs if d["msg"].startswith("INCIDENT"))
    assert (incident["target"], incident["kind"]) == ("sim", "engine_dead") and incident["incident"]
    assert any(d.get("target") == "sim" and "discovered" in d["msg"] for d in docs)


@pytest.mark.parametrize(
    "journal, parse",
    [(False, parse_text), (True, parse_journal_text)],
    ids=["text", "text-under-journald"],
)
def test_every_line_of_the_text_format_parses(tmp_path, journal, parse):
    docs = [parse(line) for line in short_run(tmp_path, "--log-format", "text", journal=journal)]
    assert any(d["msg"].startswith("INCIDENT") and "engine_dead on sim" in d["msg"] for d in docs)


# a model id is the server's to choose: one holding a line break and a record of its own
FORGED = "2026-01-01 00:00:00,000 CRITICAL guardian: INCIDENT 01FORGED engine_dead on sim"
HOSTILE_MODEL = f"m\n{FORGED}\u2028{FORGED}\r\x1b[2K"


@pytest.mark.parametrize(
    "fmt, journal, parse",
    [
        ("text", False, parse_text),
        ("text", True, parse_journal_text),
        ("json", False, parse_json),
        ("logfmt", False, parse_logfmt),
    ],
    ids=["text", "text-under-journald", "json", "logfmt"],
)
def test_a_model_id_with_line_breaks_stays_inside_the_record_that_names_it(tmp_path, fmt, journal, parse):
    lines = short_run(tmp_path, "--log-format", fmt, journal=journal, model=HOSTILE_MODEL)  # (splitlines, as a viewer)
    docs = [parse(line) for line in lines]
    assert any("01FORGED" in d["msg"] and "serves" in d["msg"] for d in docs)  # said, inside the ready line
    assert not [d for d in docs if d["msg"].startswith("INCIDENT 01FORGED") or d["level"] == "critical"]
