"""How the guardian's log lines look: ``text`` (the default), ``json`` or ``logfmt``, and at which level.

Reads the chosen format and level (``--log-format``/``--log-level``, else ``GUARDIAN_LOG_FORMAT``/
``GUARDIAN_LOG_LEVEL``, else the config's ``log`` section) and the environment's
``JOURNAL_STREAM``; decides nothing else.

- ``json``: one object per line with the stable keys ``time`` (RFC 3339 UTC, milliseconds),
  ``level`` (``debug`` ... ``critical``), ``logger``, ``msg``, then ``target``, ``incident``,
  ``kind`` where the call passed them (``extra=log_fields(...)``), and ``exc`` for a traceback.
- ``logfmt``: the same keys as ``key=value`` pairs (values with a space, ``"`` or ``=`` quoted).
- ``text``: ``2026-01-02 03:04:05,678 WARNING guardian: ...``. Under journald (stderr is the
  stream ``JOURNAL_STREAM`` names) the time is left to the journal and each line starts with its
  syslog priority (``<4>``), so ``journalctl -p warning`` filters by level.

Once the daemon knows its secrets, ``scrub_log_lines(scrub)`` makes the handler pass every
formatted line, a traceback included, through ``scrub`` (the secret values it holds:
``bundle/known_secrets.py``), whatever the format.

The JSON and logfmt encodings are a few lines over ``json.dumps`` and one quoting rule; the
libraries that do it (python-json-logger, logfmter) would add a dependency for no behaviour.

One record is one line whatever its message holds: messages carry strings from outside (a model
id, an answer, a header) that may hold a newline, a carriage return, U+2028/U+2029 (line breaks
to ``str.splitlines`` and to many log viewers), bidi overrides or other characters that are not
printable. ``text`` writes each such character as an escape (``\n``, ``\x1b``, ``\u2028``:
``escape``) and indents a traceback's lines under its record, so no line can pass for a record
of its own; ``json`` and ``logfmt`` keep the message as it was but write every such character as
a JSON escape (``\u2028``), which ``json.dumps`` leaves raw above U+007F.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, TextIO

FORMATS = ("text", "json", "logfmt")
LEVELS = ("debug", "info", "warning", "error", "critical")
FIELDS = ("target", "incident", "kind")  # the context keys a call may pass; always in this order
FORMAT_ENV = "GUARDIAN_LOG_FORMAT"
LEVEL_ENV = "GUARDIAN_LOG_LEVEL"
_SYSLOG_PRIORITY = {"DEBUG": 7, "INFO": 6, "WARNING": 4, "ERROR": 3, "CRITICAL": 2}


def log_fields(target: str | None = None, incident: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """``extra=`` for a log call about a target / incident / kind: the keys json and logfmt show."""
    return {k: v for k, v in (("target", target), ("incident", incident), ("kind", kind)) if v is not None}


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
CONTINUATION = "  "  # before each line of a traceback under its record (a record starts at column 0)


def _char_escape(c: str) -> str:
    o = ord(c)
    return _NAMED.get(c) or (f"\\x{o:02x}" if o <= 0xFF else f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")


def escape(text: str) -> str:
    """``text`` with every character that is not printable (``str.isprintable``: controls, line and
    paragraph separators, format characters such as bidi overrides, lone surrogates; a space is
    printable) written as a Python-style escape: on one line, showing what it holds."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _char_escape(c) for c in text)


def _json_escape(c: str) -> str:
    o = ord(c)
    if o <= 0xFFFF:
        return f"\\u{o:04x}"
    o -= 0x10000
    return f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}"


def json_text(value: Any) -> str:
    """``json.dumps`` without ``ensure_ascii`` (readable non-ASCII), but with every character that is
    not printable written as a JSON escape (it leaves U+2028, U+0085, bidi overrides raw)."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _json_escape(c) for c in text)


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The keys of one line, in their order."""
    out: dict[str, Any] = {
        "time": _rfc3339(record.created),
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    for key in FIELDS:
        value = getattr(record, key, None)
        if value is not None:
            out[key] = value
    if record.exc_info:
        out["exc"] = logging.Formatter().formatException(record.exc_info)
    return out


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json_text(record_fields(record))


def logfmt_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text and not any(c in text for c in ' "=\\') and text.isprintable():
        return text
    return json_text(text)  # quoted, with \" \\ \n \u2028 escapes


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={logfmt_value(v)}" for k, v in record_fields(record).items())


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> <logger>: <message>``, the message escaped (``escape``), a traceback's lines
    escaped and indented under it."""

    def __init__(self, fmt: str = "%(asctime)s %(levelname)s %(name)s: %(message)s") -> None:
        super().__init__(fmt)

    def format(self, record: logging.LogRecord) -> str:
        return "\n".join(self.lines(record))

    def lines(self, record: logging.LogRecord) -> list[str]:
        """The record's lines: its head, then each traceback line (escaped, indented)."""
        record.message = escape(record.getMessage())
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        out = [self.formatMessage(record)]
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        for tail in (record.exc_text, record.stack_info and self.formatStack(record.stack_info)):
            if tail:
                out += [CONTINUATION + escape(line) for line in tail.split("\n")]
        return out


class JournalTextFormatter(TextFormatter):
    """Text for journald: its priority prefix on every line, no time of its own."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{_SYSLOG_PRIORITY.get(record.levelname, 6)}>"
        return "\n".join(prefix + line for line in self.lines(record))


class ScrubbingFormatter(logging.Formatter):
    """Another formatter's lines, each passed through ``scrub`` (known secret values out)."""

    def __init__(self, inner: logging.Formatter, scrub: Callable[[str], str]) -> None:
        super().__init__()
        self.inner, self.scrub = inner, scrub

    def format(self, record: logging.LogRecord) -> str:
        return self.scrub(self.inner.format(record))


def scrub_log_lines(scrub: Callable[[str], str]) -> bool:
    """Every line of the guardian's handler (``setup_logging``) through ``scrub`` from now on
    (replacing an earlier scrub); False when no such handler is installed (a library use)."""
    for h in logging.getLogger().handlers:
        if h.get_name() == "guardian":
            inner = h.formatter or logging.Formatter()
            if isinstance(inner, ScrubbingFormatter):
                inner = inner.inner
            h.setFormatter(ScrubbingFormatter(inner, scrub))
            return True
    return False


def under_journald(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Whether ``stream`` is the journal's: ``JOURNAL_STREAM`` is ``<dev>:<inode>`` of that socket."""
    value = environ.get("JOURNAL_STREAM", "")
    try:
        dev, ino = (int(x) for x in value.split(":"))
        st = os.fstat(stream.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def choose(
    flag: str | None, env_key: str, configured: str, allowed: tuple[str, ...], environ: Mapping[str, str]
) -> str:
    """The flag, else the environment, else the config; a bad environment value is a ValueError."""
    if flag:
        return flag
    value = environ.get(env_key, "").strip().lower()
    if value and value not in allowed:
        raise ValueError(f"{env_key}={value}: expected one of {', '.join(allowed)}")
    return value or configured


def formatter_for(fmt: str, stream: TextIO, environ: Mapping[str, str]) -> logging.Formatter:
    if fmt == "json":
        return JsonFormatter()
    if fmt == "logfmt":
        return LogfmtFormatter()
    if fmt != "text":
        raise ValueError(f"log format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if under_journald(stream, environ):
        return JournalTextFormatter()
    return TextFormatter()


def setup_logging(
    fmt: str = "text",
    level: str = "info",
    *,
    stream: TextIO | None = None,
    environ: Mapping[str, str] = os.environ,
) -> None:
    """Install one handler on the root logger (replacing any earlier one of ours)."""
    stream = stream or sys.stderr
    if level not in LEVELS:
        raise ValueError(f"log level {level!r}: expected one of {', '.join(LEVELS)}")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter_for(fmt, stream, environ))
    handler.set_name("guardian")
    root = logging.getLogger()
    for h in list(root.handlers):
        if h.get_name() == "guardian" or isinstance(h, logging.StreamHandler) and h.stream is stream:
            root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
