"""The local alert spool: an append-only, fsync'd file of events waiting for Redis.

``<dir>/events.jsonl`` holds one JSON event per line, oldest first. ``append``
writes and fsyncs before returning, so an event survives a crash of the
guardian the moment ``publish`` returns; ``remove`` drops acknowledged ids by
rewriting the file atomically (temporary file, fsync, ``os.replace``, fsync of
the folder). The spool is bounded by event count and bytes: when full, the
OLDEST events are dropped and counted (``dropped_total``), with one warning per
episode. Every read and write holds an ``flock`` on ``<dir>/spool.lock``, so two
spools on one folder (a restarted sink) never interleave. A line torn by a
crash, or unreadable, is skipped with a warning.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Collection, Iterator, Mapping

from vllm_guardian.fsutil import atomic_write, fsync_dir

log = logging.getLogger(__name__)

FILE_NAME = "events.jsonl"
LOCK_NAME = "spool.lock"
FILE_MODE = 0o640
DIR_MODE = 0o750


def encode_event(event: Mapping[str, Any]) -> bytes:
    """One spool line: compact JSON (no newline inside) plus ``\\n``."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8") + b"\n"


def decode_line(line: bytes) -> dict[str, Any] | None:
    """A spool line back to its event; None for a torn/corrupt line or one without a string id."""
    try:
        event = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(event, dict) or not isinstance(event.get("id"), str) or not event["id"]:
        return None
    return event


def _line_id(line: bytes) -> str | None:
    event = decode_line(line)
    return None if event is None else event["id"]


class Spool:
    """A bounded on-disk FIFO of events, keyed by their ``id``."""

    def __init__(
        self, directory: str | os.PathLike[str], *, max_events: int, max_bytes: int, fsync: bool = True
    ) -> None:
        if max_events < 1 or max_bytes < 1:
            raise ValueError("spool bounds must be positive")
        self.dir = Path(directory)
        self.path = self.dir / FILE_NAME
        self.max_events = int(max_events)
        self.max_bytes = int(max_bytes)
        self._fsync = fsync
        self._mutex = threading.Lock()
        self.dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        self._lock_fd: int | None = os.open(self.dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, FILE_MODE)
        self.dropped_total = 0
        self._episode_drops = 0
        self._count = 0
        self._bytes = 0
        with self._locked():
            lines, damaged = self._read_lines()
            if damaged:
                self._rewrite(lines)
            else:
                self._set_size(lines)
            excess = self._excess(lines)
            if excess:
                self._rewrite(lines[excess:])
                self._note_drops(excess)

    # ------------------------------------------------------------ public
    def append(self, event: Mapping[str, Any]) -> int:
        """Write ``event`` durably at the tail; returns how many oldest events were dropped."""
        line = encode_event(event)
        if decode_line(line) is None:
            raise ValueError("an event needs a non-empty string 'id'")
        with self._locked():
            if self._count + 1 <= self.max_events and self._bytes + len(line) <= self.max_bytes:
                self._append_line(line)
                return 0
            lines, _ = self._read_lines()
            lines.append(line)
            excess = self._excess(lines)
            self._rewrite(lines[excess:])
            self._note_drops(excess)
            return excess

    def head(self, n: int) -> list[dict[str, Any]]:
        """The ``n`` oldest events, in order."""
        out: list[dict[str, Any]] = []
        if n <= 0:
            return out
        with self._locked():
            for line in self._iter_raw():
                event = decode_line(line)
                if event is not None:
                    out.append(event)
                    if len(out) >= n:
                        break
        return out

    def remove(self, ids: Collection[str]) -> int:
        """Drop the events with these ids (acknowledged); returns how many were removed."""
        wanted = set(ids)
        if not wanted:
            return 0
        with self._locked():
            lines, damaged = self._read_lines()
            kept = [ln for ln in lines if _line_id(ln) not in wanted]
            removed = len(lines) - len(kept)
            if removed or damaged:
                self._rewrite(kept)
            if self._episode_drops and self._count < self.max_events and self._bytes < self.max_bytes:
                log.warning(
                    "alert spool has room again; %d oldest event(s) were dropped while it was full", self._episode_drops
                )
                self._episode_drops = 0
            return removed

    def __len__(self) -> int:
        return self._count

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def close(self) -> None:
        with self._mutex:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    # ------------------------------------------------------------ internals
    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._mutex:
            if self._lock_fd is None:
                raise ValueError("spool is closed")
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _iter_raw(self) -> Iterator[bytes]:
        try:
            with open(self.path, "rb") as f:
                yield from f
        except FileNotFoundError:
            return

    def _read_lines(self) -> tuple[list[bytes], bool]:
        """Valid lines (each ending in newline) and whether anything had to be skipped."""
        lines: list[bytes] = []
        damaged = 0
        for raw in self._iter_raw():
            if raw.endswith(b"\n") and decode_line(raw) is not None:
                lines.append(raw)
            else:
                damaged += 1
        if damaged:
            log.warning("alert spool %s: skipped %d torn or unreadable line(s)", self.path, damaged)
        return lines, bool(damaged)

    def _excess(self, lines: list[bytes]) -> int:
        """How many lines to drop from the front so the rest fits both bounds."""
        total = sum(len(ln) for ln in lines)
        drop = 0
        while drop < len(lines) and (len(lines) - drop > self.max_events or total > self.max_bytes):
            total -= len(lines[drop])
            drop += 1
        return drop

    def _note_drops(self, n: int) -> None:
        if not n:
            return
        if not self._episode_drops:
            log.warning(
                "alert spool full (max_events=%d, max_bytes=%d): dropping the oldest events",
                self.max_events,
                self.max_bytes,
            )
        self._episode_drops += n
        self.dropped_total += n

    def _set_size(self, lines: list[bytes]) -> None:
        self._count = len(lines)
        self._bytes = sum(len(ln) for ln in lines)

    def _append_line(self, line: bytes) -> None:
        """Append one whole line or nothing: a write the disk cuts short (ENOSPC, EFBIG) is
        retried for the rest, and on failure the file is cut back to where it was, so a torn
        record never stays behind to swallow the next one. A torn tail left by a crash is cut
        off first for the same reason."""
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
        try:
            start = _whole_lines_end(fd)
            try:
                view = memoryview(line)
                while view:
                    n = os.write(fd, view)
                    if n <= 0:
                        raise OSError(errno.ENOSPC, "short write to the alert spool")
                    view = view[n:]
                if self._fsync:
                    os.fsync(fd)
            except OSError:
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    pass
                raise
        finally:
            os.close(fd)
        if created:
            self._fsync_dir()
        self._count += 1
        self._bytes += len(line)

    def _rewrite(self, lines: list[bytes]) -> None:
        atomic_write(self.path, b"".join(lines), mode=FILE_MODE, fsync=self._fsync)
        self._set_size(lines)

    def _fsync_dir(self) -> None:
        if self._fsync:
            fsync_dir(self.dir)


def _whole_lines_end(fd: int) -> int:
    """The size of the file up to its last newline; a torn tail after it is cut off."""
    size = os.fstat(fd).st_size
    if size == 0:
        return 0
    end = size
    while end > 0:
        step = min(4096, end)
        chunk = os.pread(fd, step, end - step)
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            end = end - step + nl + 1
            break
        end -= step
    if end != size:
        log.warning("alert spool: cut a torn tail of %d byte(s) before appending", size - end)
        os.ftruncate(fd, end)
    return end
