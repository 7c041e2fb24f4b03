"""The last Python traceback in a log tail (pure): exception, message, frames.

vLLM decorates every line a child process writes with ``(<process> pid=<pid>)``
(``(EngineCore_DP0 pid=123)``, ``(APIServer pid=1)``, ``(Worker_TP0 pid=…)``),
sometimes in ANSI colour; lines of several processes interleave. The parser
strips the prefix and colour, finds the LAST ``Traceback (most recent call
last):`` line and follows only the lines of that same process:

- ``  File "path", line N, in func`` frames (plus the source line under each);
- Python 3.11+ ``^^^^`` markers and ``  |`` exception-group rails are skipped;
- the exception line ``pkg.Type: message`` (or a bare ``Type``) ends the report,
  with continuation lines of a multi-line message (bounded);
- ``The above exception was the direct cause …`` / ``During handling …`` chain
  the previous exception into ``chain`` and the parse goes on with the next one.

Returns None when the tail holds no complete traceback.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Iterable, Sequence

from vllm_guardian.diagnosis.matcher import Crash, CrashFrame

MAX_FRAMES = 12  # innermost frames kept
MAX_MESSAGE = 2000
MAX_TEXT = 16_000
MAX_MESSAGE_LINES = 8

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX = re.compile(r"^\s*\((?P<proc>[A-Za-z][\w.:-]*) pid=(?P<pid>\d+)\)\s?")
_TB_START = re.compile(r"Traceback \(most recent call last\):\s*$")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+?))?\s*$')
_MARKER = re.compile(r"^\s*[\^~\s]+$")
_EXC = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Timeout|Fault)?)"
    r"(?::\s?(?P<msg>.*))?$"
)
_CHAIN = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
_LOGLINE = re.compile(r"^(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s|\[?\d{4}-\d\d-\d\d|\d\d-\d\d \d\d:)")
# vLLM's log header after the process prefix: "ERROR 12-01 05:00:01 [core.py:1010] ". Its
# formatter repeats the whole prefix on every line of a multi-line message, traceback included.
_HEADER = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[[^\]]*\] ")


def split_line(raw: str) -> tuple[str | None, int | None, str, str | None]:
    """(process, pid, text, log header) of one log line: ANSI colour, vLLM's process prefix and
    its log header removed from the text."""
    line = _ANSI.sub("", raw.rstrip("\r\n"))
    m = _PREFIX.match(line)
    proc, pid = (m.group("proc"), int(m.group("pid"))) if m else (None, None)
    text = line[m.end() :] if m else line
    h = _HEADER.match(text)
    return proc, pid, (text[h.end() :] if h else text), (h.group(0) if h else None)


def strip_line(raw: str) -> tuple[str | None, int | None, str]:
    """(process, pid, text) of one log line: ANSI colour, vLLM's prefix and log header removed."""
    return split_line(raw)[:3]


def _is_exception_line(text: str) -> re.Match[str] | None:
    if not text or text[0].isspace():
        return None
    m = _EXC.match(text)
    if m is None:
        return None
    t = m.group("type")
    # a bare word is an exception only when it looks like one (AssertionError, KeyboardInterrupt)
    if m.group("msg") is None and not re.search(r"(Error|Exception|Exit|Interrupt|Timeout)$", t):
        return None
    return m


# Exceptions that report an earlier failure rather than being one: the API server's view of a
# dead engine. When the last traceback is one of these, the one before it (EngineCore's) is the crash.
CONSEQUENCES = frozenset({"EngineDeadError", "EngineGenerateError", "CancelledError"})
MAX_REPORTS = 50


def _is_continuation(rows: Sequence[tuple], mine: Sequence[int], start: int) -> bool:
    above = [i for i in mine if i < start and rows[i][2].strip()]
    return bool(above) and rows[above[-1]][2].strip() in _CHAIN


_MP_PROCESS = re.compile(r"^Process (?P<name>[\w.:-]+):$")  # multiprocessing's header of a child's traceback


def _report_at(rows: Sequence[tuple], start: int) -> Crash | None:
    """The report whose last traceback starts at ``start``, its chained causes included."""
    proc, pid = rows[start][0], rows[start][1]
    crash = _report_of(rows, start, proc, pid)
    if crash is not None and proc is None:
        head = next(
            (
                rows[i][2]
                for i in range(start - 1, max(-1, start - 200), -1)
                if rows[i][0] is None and rows[i][2].strip()
            ),
            "",
        )
        m = _MP_PROCESS.match(head.strip())
        if m:  # "Process EngineCore_DP0:" then Python's own traceback on stderr
            crash = replace(crash, process=m.group("name"))
    return crash


def _report_of(rows: Sequence[tuple], start: int, proc: str | None, pid: int | None) -> Crash | None:
    mine = [i for i, r in enumerate(rows) if r[0] == proc and r[1] == pid]
    first = start
    while _is_continuation(rows, mine, first):
        prev = next((i for i in reversed(mine) if i < first and _TB_START.search(rows[i][2])), None)
        if prev is None:
            break
        first = prev
    own = [(r[2], r[3]) for i, r in enumerate(rows) if i >= first and r[0] == proc and r[1] == pid]
    return _parse_report(own, proc, pid)


def parse_tracebacks(lines: Iterable[str]) -> list[Crash]:
    """Every complete report of the tail (a chain counts once, as its last exception), oldest first."""
    rows = [split_line(x) for x in lines]
    starts = [i for i, r in enumerate(rows) if _TB_START.search(r[2])][-MAX_REPORTS:]
    finals = []
    for s in starts:
        proc, pid = rows[s][0], rows[s][1]
        later = [t for t in starts if t > s and rows[t][0] == proc and rows[t][1] == pid]
        mine = [i for i, r in enumerate(rows) if r[0] == proc and r[1] == pid]
        if later and _is_continuation(rows, mine, later[0]):
            continue  # a cause: its chain's last traceback reports it
        finals.append(s)
    return [c for c in (_report_at(rows, s) for s in finals) if c is not None]


def parse_last_traceback(lines: Iterable[str]) -> Crash | None:
    """The crash of the tail: the last report, unless it only reports an earlier failure
    (``EngineDeadError`` in the API server): then the last report before it; the later ones
    are kept in ``followed_by``."""
    reports = parse_tracebacks(lines)
    if not reports:
        return None
    pick = next(
        (i for i in range(len(reports) - 1, -1, -1) if reports[i].exception.rsplit(".", 1)[-1] not in CONSEQUENCES),
        len(reports) - 1,
    )
    if reports[pick].pid is None:  # the same crash logged by vLLM names its process and pid: prefer that
        same = next(
            (
                i
                for i in range(pick - 1, -1, -1)
                if reports[i].pid is not None
                and (reports[i].exception, reports[i].message) == (reports[pick].exception, reports[pick].message)
            ),
            None,
        )
        pick = same if same is not None else pick
    key = (reports[pick].exception, reports[pick].message)
    after = tuple(
        f"{c.exception}: {c.message.splitlines()[0] if c.message else ''}".rstrip(": ")
        + (f" ({c.process})" if c.process else "")
        for c in reports[pick + 1 :]
        if (c.exception, c.message) != key
    )[-3:]
    return replace(reports[pick], followed_by=after)


def _parse_report(rows: Sequence[tuple[str, str | None]], proc: str | None, pid: int | None) -> Crash | None:
    """One process's lines (text, log header) from a report's first traceback on."""
    lines = [t for t, _h in rows]
    headers = [h for _t, h in rows]
    chain: list[str] = []
    frames: list[CrashFrame] = []
    exc: tuple[str, str] | None = None
    text: list[str] = []
    i, n = 0, len(lines)
    in_tb = False
    while i < n:
        line = lines[i].rstrip()
        stripped = line.lstrip(" |").rstrip() if line.lstrip().startswith("|") else line
        if _TB_START.search(stripped):
            if exc is not None:
                chain.append(f"{exc[0]}: {exc[1]}" if exc[1] else exc[0])
            frames, exc, in_tb = [], None, True
            text.append(stripped)
            i += 1
            continue
        if not in_tb:
            if stripped.strip() in _CHAIN:
                text.append(stripped)
            i += 1
            continue
        fm = _FRAME.match(stripped)
        if fm:
            code = ""
            if i + 1 < n:
                nxt = lines[i + 1].rstrip()
                if nxt.startswith("    ") and not _FRAME.match(nxt) and not _MARKER.match(nxt):
                    code = nxt.strip()
                    i += 1
            frames.append(CrashFrame(fm.group("file"), int(fm.group("line")), (fm.group("func") or "?").strip(), code))
            text.append(stripped + ("\n    " + code if code else ""))
            i += 1
            continue
        if _MARKER.match(stripped) or not stripped.strip():
            i += 1
            continue
        em = _is_exception_line(stripped)
        if em:
            msg = [em.group("msg") or ""]
            text.append(stripped)
            j = i + 1
            while j < n and len(msg) < MAX_MESSAGE_LINES:
                nxt = lines[j].rstrip()
                if (
                    not nxt.strip()
                    or _TB_START.search(nxt)
                    or nxt.strip() in _CHAIN
                    or _LOGLINE.match(nxt)
                    or _FRAME.match(nxt)
                    or headers[j] != headers[i]
                ):  # another log record
                    break
                msg.append(nxt)
                text.append(nxt)
                j += 1
            exc = (em.group("type"), "\n".join(msg).strip()[:MAX_MESSAGE])
            in_tb = False
            i = j
            continue
        i += 1  # anything else inside a report (source of a frame without File line, etc.)
    if exc is None:
        return None
    body = "\n".join(text)
    if len(body) > MAX_TEXT:
        body = "…\n" + body[-MAX_TEXT:]
    return Crash(exc[0], exc[1], tuple(frames[-MAX_FRAMES:]), proc, pid, tuple(chain), body)
