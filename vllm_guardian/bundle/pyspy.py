"""py-spy, without running it: argv building, parsing of its output, and what its errors mean.

Pure functions tested on literal output of py-spy 0.4.3:

- ``dump_argv`` / ``record_argv``: one ``dump`` per pid (``dump --json`` ignores
  ``--subprocesses``); ``record`` always ``--nonblocking``, whole seconds;
- ``parse_dump_json`` (``dump --json``: a list of threads, innermost frame first)
  and ``parse_dump_text`` (the text layout, ``Thread <tid> (active+gil): "name"``)
  into ``ThreadStack``; ``render_text`` writes the text layout back from threads;
- ``classify`` turns an exit code and stderr into a ``Failure`` saying what went
  wrong in words a person can act on, and whether ``--nonblocking`` is worth a try;
- ``pick_thread`` chooses the thread a summary should show.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, Sequence

from vllm_guardian.redact import REDACTED, is_secret_name, redact_text

MISSING_REASON = "py-spy not found: install py-spy or set evidence.pyspy"
PTRACE_REASON = "ptrace not permitted: py-spy needs root or the CAP_SYS_PTRACE capability"


# ---------------------------------------------------------------- argv
def dump_argv(
    pyspy: str,
    pid: int,
    *,
    as_json: bool = True,
    nonblocking: bool = False,
    native: bool = False,
    with_locals: bool = False,
) -> list[str]:
    """``py-spy dump`` of one process. ``--native`` needs blocking mode, so it is dropped with ``--nonblocking``."""
    argv = [pyspy, "dump", "--pid", str(pid)]
    if as_json:
        argv.append("--json")
    if nonblocking:
        argv.append("--nonblocking")
    elif native:
        argv.append("--native")
    if with_locals:
        argv.append("--locals")
    return argv


def record_seconds_arg(seconds: float) -> int:
    """py-spy wants whole seconds (``-d 1.5`` panics): round up, at least 1."""
    return max(1, math.ceil(seconds))


def record_argv(pyspy: str, pid: int, seconds: float, fmt: str, output: str) -> list[str]:
    """``py-spy record --nonblocking`` of one process for ``seconds``, one line per thread (``--threads``)."""
    if fmt not in ("flamegraph", "speedscope", "raw", "chrometrace"):
        raise ValueError(f"unknown py-spy record format {fmt!r}")
    return [
        pyspy,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(record_seconds_arg(seconds)),
        "--rate",
        "100",
        "--nonblocking",
        "--threads",
        "--format",
        fmt,
        "--output",
        output,
    ]


# ---------------------------------------------------------------- parsed dumps
@dataclass(frozen=True)
class Local:
    name: str
    repr: str | None
    arg: bool = False


@dataclass(frozen=True)
class Frame:
    name: str
    filename: str
    line: int = 0
    short_filename: str | None = None
    module: str | None = None
    locals: tuple[Local, ...] = ()

    @property
    def label(self) -> str:
        """``name (file.py:12)`` as py-spy prints it; native frames have line 0 and no line number."""
        where = self.short_filename or self.filename
        return f"{self.name} ({where}:{self.line})" if self.line else f"{self.name} ({where})"


@dataclass(frozen=True)
class ThreadStack:
    os_thread_id: int | None  # the Linux TID, when py-spy knows it
    thread_id: int | None  # the pthread id
    name: str | None
    active: bool
    owns_gil: bool
    frames: tuple[Frame, ...]  # innermost first
    pid: int | None = None

    @property
    def status(self) -> str:
        if self.active and self.owns_gil:
            return "active+gil"
        return "active" if self.active else "idle"


def _opt_int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _opt_str(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _frame_from(doc: Any) -> Frame:
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        raise ValueError(f"frame without a name: {doc!r:.80}")
    locs = tuple(
        Local(str(v.get("name", "?")), _opt_str(v.get("repr")), bool(v.get("arg", False)))
        for v in (doc.get("locals") or ())
        if isinstance(v, dict)
    )
    return Frame(
        doc["name"],
        str(doc.get("filename") or ""),
        _opt_int(doc.get("line")) or 0,
        _opt_str(doc.get("short_filename")),
        _opt_str(doc.get("module")),
        locs,
    )


def parse_dump_json(text: str) -> tuple[ThreadStack, ...]:
    """``py-spy dump --json`` → threads in py-spy's order. ``ValueError`` on anything that is not that."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"py-spy dump --json: not JSON ({e})") from None
    if not isinstance(doc, list):
        raise ValueError("py-spy dump --json: expected a list of threads")
    threads = []
    for t in doc:
        if not isinstance(t, dict) or not isinstance(t.get("frames"), list):
            raise ValueError(f"py-spy dump --json: thread without frames: {t!r:.80}")
        threads.append(
            ThreadStack(
                os_thread_id=_opt_int(t.get("os_thread_id")),
                thread_id=_opt_int(t.get("thread_id")),
                name=_opt_str(t.get("thread_name")),
                active=bool(t.get("active", False)),
                owns_gil=bool(t.get("owns_gil", False)),
                frames=tuple(_frame_from(f) for f in t["frames"]),
                pid=_opt_int(t.get("pid")),
            )
        )
    return tuple(threads)


_THREAD_LINE = re.compile(
    r"^Thread (?P<id>0[xX][0-9a-fA-F]+|\d+) \((?P<status>active\+gil|active|idle)\)"
    r'(?:: "(?P<name>.*)")?\s*$'
)
_FRAME_LINE = re.compile(r"^ {4}(?P<name>\S.*) \((?P<where>[^()]*?)(?::(?P<line>\d+))?\)\s*$")
_PROCESS_LINE = re.compile(r"^Process (?P<pid>\d+): ")


def parse_dump_text(text: str) -> tuple[ThreadStack, ...]:
    """``py-spy dump`` text → threads. Header lines and ``--locals`` blocks are skipped.

    ``ValueError`` when no ``Thread`` line is found (an error message, an empty output).
    """
    pid: int | None = None
    threads: list[ThreadStack] = []
    current: ThreadStack | None = None
    frames: list[Frame] = []

    def close() -> None:
        if current is not None:
            threads.append(replace(current, frames=tuple(frames)))

    for line in text.splitlines():
        m = _PROCESS_LINE.match(line)
        if m:
            pid = int(m.group("pid"))
            continue
        m = _THREAD_LINE.match(line)
        if m:
            close()
            frames = []
            ident, status = m.group("id"), m.group("status")
            hexa = ident.lower().startswith("0x")
            current = ThreadStack(
                os_thread_id=None if hexa else int(ident),
                thread_id=int(ident, 16) if hexa else None,
                name=m.group("name"),
                active=status.startswith("active"),
                owns_gil=status == "active+gil",
                frames=(),
                pid=pid,
            )
            continue
        m = _FRAME_LINE.match(line)
        if m and current is not None:
            where = m.group("where")
            frames.append(Frame(m.group("name"), where, int(m.group("line") or 0), where))
    close()
    if not threads:
        raise ValueError("py-spy dump text: no 'Thread' line")
    return tuple(threads)


def render_text(threads: Iterable[ThreadStack], pid: int | None = None, title: str | None = None) -> str:
    """Threads in py-spy's text layout (``Process`` header when ``pid`` is given; locals when present)."""
    lines: list[str] = []
    if pid is not None:
        lines += [f"Process {pid}: {title or ''}".rstrip(), ""]
    for t in threads:
        ident = str(t.os_thread_id) if t.os_thread_id is not None else f"{t.thread_id or 0:#X}"
        name = f': "{t.name}"' if t.name is not None else ""
        lines.append(f"Thread {ident} ({t.status}){name}")
        for f in t.frames:
            lines.append(f"    {f.label}")
            for heading, is_arg in (("Arguments:", True), ("Locals:", False)):
                group = [v for v in f.locals if v.arg is is_arg]
                if group:
                    lines.append(f"        {heading}")
                    lines += [f"            {v.name}: {_shown_local(v)}" for v in group]
    return "\n".join(lines) + "\n"


def _shown_local(v: Local) -> str:
    if is_secret_name(v.name):
        return REDACTED
    return v.repr if v.repr is not None else "?"


def scrub_dump_json(text: str) -> str:
    """A ``dump --json`` document safe to write: secret-looking text redacted, and the ``repr``
    of any local whose name says secret (``api_key``) replaced. Invalid JSON is redacted as text."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return redact_text(text)

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: walk(v) for k, v in node.items()}
            if isinstance(out.get("name"), str) and "repr" in out and is_secret_name(out["name"]):
                out["repr"] = REDACTED
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return redact_text(node) if isinstance(node, str) else node

    return json.dumps(walk(doc), indent=2) + "\n"


def pick_thread(threads: Sequence[ThreadStack], tid: int | None = None) -> ThreadStack | None:
    """The thread a person should look at: the one the incident names (``tid``), else the one
    holding the GIL, else an active one, else ``MainThread``, else the first."""
    if not threads:
        return None
    for rule in (
        lambda t: tid is not None and t.os_thread_id == tid,
        lambda t: t.owns_gil,
        lambda t: t.active,
        lambda t: t.name == "MainThread",
    ):
        for t in threads:
            if rule(t):
                return t
    return threads[0]


# ---------------------------------------------------------------- errors
@dataclass(frozen=True)
class Failure:
    """Why one py-spy call failed. ``kind`` is one of: missing, permission, gone, not_python,
    blocked, timeout, no_samples, usage, error."""

    kind: str
    reason: str
    retry_nonblocking: bool = False


def error_message(stderr: str) -> str:
    """The line a person needs: py-spy's ``Error: …`` (plus its first cause), a panic message,
    or the first line that is not progress chatter; backtraces dropped."""
    lines = [ln.strip() for ln in stderr.split("Stack backtrace:")[0].splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("py-spy>") and not ln.startswith("note:")]
    for i, ln in enumerate(lines):
        if ln.startswith("Error:"):
            msg = ln[len("Error:") :].strip()
            rest = lines[i + 1 :]
            if rest and rest[0] == "Caused by:" and len(rest) > 1:
                msg += f" ({_CAUSE_NUMBER.sub('', rest[1])})"
            return msg
    for i, ln in enumerate(lines):
        if "panicked at" in ln:
            return lines[i + 1] if i + 1 < len(lines) else ln
    return lines[0] if lines else ""


_CAUSE_NUMBER = re.compile(r"^[0-9]+:\s*")
_PERMISSION = ("permission denied", "operation not permitted", "os error 13", "os error 1)")
_GONE = ("failed to get process executable name", "no such process", "os error 3)", "process exited")


def classify(
    returncode: int | None, stderr: str, timed_out: bool = False, timeout: float | None = None
) -> Failure | None:
    """What a py-spy exit means; None for success. Blocking-mode failures that a
    ``--nonblocking`` retry can get past (a stopped or traced target, a timeout, an
    unknown error) say so; a permission problem, a gone process or a non-Python
    process never do."""
    if timed_out:
        after = f" after {timeout:g} s" if timeout is not None else ""
        return Failure("timeout", f"py-spy did not answer{after} (killed)", True)
    if returncode == 0:
        return None
    msg = error_message(stderr)
    head = stderr.split("Stack backtrace:")[0].lower()
    detail = f": {msg}" if msg else ""
    if any(p in head for p in _PERMISSION):
        return Failure("permission", f"{PTRACE_REASON}{detail}")
    if "can't get native stack traces" in head:
        return Failure("usage", f"--native needs blocking mode{detail}")
    if "failed to get stack traces" in head:
        return Failure("blocked", f"blocking dump failed (target stopped or already traced?){detail}", True)
    if any(p in head for p in _GONE):
        return Failure("gone", f"process gone{detail}")
    if "failed to find python version" in head:
        return Failure("not_python", f"not a Python process{detail}")
    if "no stack counts found" in head:
        return Failure("no_samples", "no samples: every thread was idle while recording (see the dumps)")
    if returncode == 2:
        return Failure("usage", f"py-spy rejected its arguments{detail}")
    code = "killed" if returncode is None else f"exit {returncode}"
    return Failure("error", f"py-spy failed ({code}){detail}", True)
