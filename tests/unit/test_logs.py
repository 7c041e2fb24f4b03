"""The log formats: what one record becomes in json, logfmt and text, and which format and level win."""

from __future__ import annotations

import io
import json
import logging
import os
import socket

import pytest

from vllm_guardian.surface.logs import (
    JournalTextFormatter,
    JsonFormatter,
    LogfmtFormatter,
    TextFormatter,
    choose,
    escape,
    formatter_for,
    log_fields,
    logfmt_value,
    under_journald,
)


def record(msg: str = "INCIDENT 01X engine_dead on llama", **extra) -> logging.LogRecord:
    r = logging.LogRecord("guardian", logging.WARNING, __file__, 1, msg, (), None)
    r.created = 1_700_000_000.25
    for k, v in extra.items():
        setattr(r, k, v)
    return r


def test_json_has_the_stable_keys_first_then_the_context_keys_given():
    doc = json.loads(JsonFormatter().format(record(**log_fields("llama", "01X", "engine_dead"))))
    assert doc == {
        "time": "2023-11-14T22:13:20.250Z",
        "level": "warning",
        "logger": "guardian",
        "msg": "INCIDENT 01X engine_dead on llama",
        "target": "llama",
        "incident": "01X",
        "kind": "engine_dead",
    }


def test_json_leaves_out_context_keys_a_line_has_not():
    assert list(json.loads(JsonFormatter().format(record(target="llama")))) == [
        "time",
        "level",
        "logger",
        "msg",
        "target",
    ]


def test_a_traceback_is_one_json_line_under_exc():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        r = logging.LogRecord("guardian", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = JsonFormatter().format(r)
    assert "\n" not in line and "ValueError: boom" in json.loads(line)["exc"]


@pytest.mark.parametrize(
    "value, written",
    [
        ("llama", "llama"),
        ("two words", '"two words"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("a=b", '"a=b"'),
        ("line\nbreak", '"line\\nbreak"'),
        ("", '""'),
        (3, "3"),
    ],
)
def test_logfmt_quotes_only_what_needs_it(value, written):
    assert logfmt_value(value) == written


def test_logfmt_line():
    line = LogfmtFormatter().format(record("RESOLVED x", target="llama"))
    assert line == 'time=2023-11-14T22:13:20.250Z level=warning logger=guardian msg="RESOLVED x" target=llama'


def test_text_has_its_own_time_outside_journald():
    assert formatter_for("text", io.StringIO(), {}).format(record("hi")).split(" ", 2)[2] == "WARNING guardian: hi"


def test_text_under_journald_has_the_priority_and_no_time(tmp_path):
    with open(tmp_path / "stream", "w") as stream:
        st = os.fstat(stream.fileno())
        fmt = formatter_for("text", stream, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
        assert fmt.format(record("hi")) == "<4>WARNING guardian: hi"


def test_journal_stream_of_another_file_is_not_ours(tmp_path):
    """JOURNAL_STREAM is inherited: a child whose stderr was redirected is not writing to the journal."""
    a, b = socket.socketpair()
    with a, b, open(tmp_path / "stream", "w") as stream:
        st = os.fstat(a.fileno())
        assert not under_journald(stream, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
        assert not under_journald(stream, {"JOURNAL_STREAM": "garbage"})


@pytest.mark.parametrize(
    "flag, env, configured, chosen",
    [
        ("json", {"GUARDIAN_LOG_FORMAT": "logfmt"}, "text", "json"),
        (None, {"GUARDIAN_LOG_FORMAT": "logfmt"}, "text", "logfmt"),
        (None, {"GUARDIAN_LOG_FORMAT": " JSON "}, "text", "json"),
        (None, {}, "text", "text"),
    ],
)
def test_the_flag_wins_then_the_environment_then_the_config(flag, env, configured, chosen):
    assert choose(flag, "GUARDIAN_LOG_FORMAT", configured, ("text", "json", "logfmt"), env) == chosen


def test_a_bad_environment_value_is_named():
    with pytest.raises(ValueError, match="GUARDIAN_LOG_LEVEL=loud: expected one of"):
        choose(None, "GUARDIAN_LOG_LEVEL", "info", ("debug", "info"), {"GUARDIAN_LOG_LEVEL": "loud"})


# ------------------------------------------------------------------ outside strings stay in their record
FORGED = "2026-01-01 00:00:00,000 CRITICAL guardian: INCIDENT 01FORGED"
HOSTILE = [
    ("newline", f"m\n{FORGED}"),
    ("carriage return", f"m\r{FORGED}"),
    ("line separator", f"m\u2028{FORGED}"),
    ("paragraph separator", f"m\u2029{FORGED}"),
    ("next line", f"m\x85{FORGED}"),
    ("vertical tab and form feed", f"m\x0b\x0c{FORGED}"),
    ("terminal escape", "m\x1b[2K\x1b[1A"),
    ("bidi override", "m\u202egnp.exe"),
    ("lone surrogate", "m\udcff"),
]
FORMATTERS = [TextFormatter(), JournalTextFormatter(), JsonFormatter(), LogfmtFormatter()]


@pytest.mark.parametrize("fmt", FORMATTERS, ids=["text", "journald", "json", "logfmt"])
@pytest.mark.parametrize("value", [v for _, v in HOSTILE], ids=[k for k, _ in HOSTILE])
def test_a_hostile_string_in_a_message_is_one_printable_line_in_every_format(fmt, value):
    r = logging.LogRecord("guardian", logging.WARNING, __file__, 1, "llama is ready (serves %s)", (value,), None)
    line = fmt.format(r)
    assert line.splitlines() == [line] and line.isprintable()
    line.encode("utf-8")  # a lone surrogate would make the stream raise: escaped instead


@pytest.mark.parametrize("value", [v for _, v in HOSTILE], ids=[k for k, _ in HOSTILE])
def test_json_and_logfmt_keep_the_message_as_it_was(value):
    r = logging.LogRecord("guardian", logging.WARNING, __file__, 1, "serves %s", (value,), None)
    assert json.loads(JsonFormatter().format(r))["msg"] == f"serves {value}"
    assert json.loads(LogfmtFormatter().format(r).split(" msg=", 1)[1]) == f"serves {value}"


@pytest.mark.parametrize(
    "value, shown",
    [
        ("llama-3 é 中", "llama-3 é 中"),  # printable, whatever the script: as is
        ("a\nb", "a\\nb"),
        ("a\u2028b", "a\\u2028b"),
        ("\x1b[2K", "\\x1b[2K"),
        ("tag\U000e0001", "tag\\U000e0001"),
    ],
)
def test_text_escapes_what_is_not_printable(value, shown):
    assert escape(value) == shown


def test_a_traceback_under_a_text_record_is_indented_so_no_line_passes_for_a_record():
    try:
        raise ValueError(f"bad model\n{FORGED}")
    except ValueError:
        import sys

        r = logging.LogRecord("guardian", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    head, *tail = TextFormatter().format(r).split("\n")
    assert head.endswith("ERROR guardian: failed")
    assert tail and all(line.startswith("  ") for line in tail)
    assert f"  {FORGED}" in tail
