"""vLLM's own stack dumps (``--watchdog-config``, vLLM 0.33+) as incident evidence beside py-spy's.

vLLM's ``ThreadedWatchDog`` (``vllm/utils/watch_dog.py``) appends to
``<dump_dir>/VLLM_STACK_DUMP_for_<name>_<pid>.log`` a section per missed feed::

    >>> Call stack dump #3 at Sun Dec  6 12:00:00 2026 due to feed timeout

    Thread 0x00007f3a (most recent call first):
      File "/…/vllm/utils/cache.py", line 88 in popitem
      …

    ================================================================

(``faulthandler.dump_traceback(all_threads=True)``). It never kills anything: the file is evidence.

Reads: the dump files of a ``dump_dir`` whose mtime is at or after the incident's onset, each through
``host/server_files.read_tail`` (the server's user writes that folder: a link anywhere it could make
is refused, a FIFO or device too, at most ``max_bytes`` from the end of each file, at most
``max_files`` files, newest first). Parses (pure) the last section of each into ``ThreadStack``s the
catalog matcher takes: faulthandler names no thread, so a thread is named for the function its
``threading.Thread.run`` calls (``process_input_sockets``), ``MainThread`` for the one without
``threading.py`` at its bottom; a thread whose innermost frame waits (a lock, a queue, a select)
is idle, any other active.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass

from vllm_guardian.bundle.pyspy import Frame, ThreadStack
from vllm_guardian.vllm_versions import is_watchdog_dump
from vllm_guardian.host.server_files import read_tail
from vllm_guardian.model import Target

LOG = logging.getLogger(__name__)

MAX_FILES = 16
MAX_BYTES = 256 * 1024
ONSET_LOOKBACK_S = 60.0  # dumps from this long before the incident opened count (its detector's window)
BUNDLE_DIR = "watchdog"  # the dumps' copies in the evidence bundle
_SECTION = ">>> Call stack dump #"
_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[[^\]]*\])? \(most recent call first\):$")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<fn>\S+)\s*$')
_WAITS = frozenset({"wait", "get", "select", "poll", "acquire", "_wait_for_tstate_lock", "sleep", "recv", "accept"})
_WAIT_FILES = ("threading.py", "queue.py", "selectors.py", "socket.py", "zmq/sugar/socket.py")


@dataclass(frozen=True)
class WatchdogDump:
    """One dump file: where, whose, when written, its last section's text and threads."""

    path: str
    name: str  # the watchdog's name (vLLM's thread or process label)
    pid: int
    mtime: float
    text: str
    threads: tuple[ThreadStack, ...]


def _idle(frames: list[Frame]) -> bool:
    if not frames:
        return True
    top = frames[0]
    return top.name in _WAITS or top.filename.endswith(_WAIT_FILES)


def _named(frames: list[Frame]) -> str:
    """``frames`` innermost first: the target threading's ``run`` calls, or MainThread."""
    for i, f in enumerate(frames):
        if f.name == "run" and f.filename.endswith("threading.py") and i > 0:
            return frames[i - 1].name
    if frames and frames[-1].filename.endswith("threading.py"):
        return "Thread"
    return "MainThread"


def parse_dump(text: str, *, pid: int | None = None) -> tuple[ThreadStack, ...]:
    """The threads of the last dump section of ``text`` (faulthandler's format); malformed lines are skipped."""
    section = text.rsplit(_SECTION, 1)[-1]
    threads: list[ThreadStack] = []
    ident: int | None = None
    frames: list[Frame] = []

    def close() -> None:
        if ident is not None:
            threads.append(
                ThreadStack(
                    os_thread_id=None,
                    thread_id=ident,
                    name=_named(frames),
                    active=not _idle(frames),
                    owns_gil=False,
                    frames=tuple(frames),
                    pid=pid,
                )
            )

    for line in section.splitlines():
        if m := _THREAD.match(line):
            close()
            ident, frames = int(m.group(1), 16), []
        elif ident is not None and (m := _FRAME.match(line)):
            frames.append(Frame(name=m.group("fn"), filename=m.group("file"), line=int(m.group("line"))))
    close()
    return tuple(threads)


@dataclass(frozen=True)
class DirEntry:
    name: str
    mtime: float
    regular: bool  # a regular file, not a link (lstat)


def list_dump_dir(dump_dir: str) -> list[DirEntry]:
    """The folder's entries as ``lstat`` sees them (links are not regular); [] when it cannot be listed."""
    out: list[DirEntry] = []
    try:
        with os.scandir(dump_dir) as it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                out.append(DirEntry(e.name, st.st_mtime, stat.S_ISREG(st.st_mode)))
    except OSError as exc:
        LOG.info("watchdog dump_dir %s not listed: %s", dump_dir, exc)
    return out


def collect(
    dump_dir: str,
    onset_wall: float,
    *,
    lister: Callable[[str], list[DirEntry]] = list_dump_dir,
    reader: Callable[[str, int], tuple[bytes, int]] = read_tail,
    max_files: int = MAX_FILES,
    max_bytes: int = MAX_BYTES,
) -> tuple[WatchdogDump, ...]:
    """The dump files written at or after ``onset_wall`` (seconds since the epoch), newest first."""
    fresh = [
        (e, parsed)
        for e in lister(dump_dir)
        if e.regular and e.mtime >= onset_wall and (parsed := is_watchdog_dump(e.name)) is not None
    ]
    fresh.sort(key=lambda ep: ep[0].mtime, reverse=True)
    dumps: list[WatchdogDump] = []
    for entry, (name, pid) in fresh[:max_files]:
        path = os.path.join(dump_dir, entry.name)
        try:
            data, _size = reader(path, max_bytes)
        except OSError as exc:  # UnsafePath included: a link, a FIFO, a swapped folder
            LOG.warning("watchdog dump %s not read: %s", path, exc)
            continue
        text = data.decode("utf-8", "replace")
        dumps.append(WatchdogDump(path, name, pid, entry.mtime, text, parse_dump(text, pid=pid)))
    return tuple(dumps)


def _flag_value(argv: tuple[str, ...], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1 :]
    return None


def dump_dir_of(target: Target) -> str | None:
    """The ``dump_dir`` of the target's ``--watchdog-config`` (vLLM's JSON, or the dotted
    ``--watchdog-config.dump_dir``), read from its processes' command lines; None when off or not
    an absolute path (a relative one is the server's own working directory: not guessed)."""
    for p in target.processes:
        argv = tuple(p.cmdline)
        found = _flag_value(argv, "--watchdog-config.dump_dir")
        raw = _flag_value(argv, "--watchdog-config")
        if found is None and raw is not None:
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            found = doc.get("dump_dir") if isinstance(doc, dict) else None
        if isinstance(found, str) and os.path.isabs(found) and "\x00" not in found:
            return found
    return None
