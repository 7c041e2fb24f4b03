"""Writes one evidence bundle folder: files ``0640`` (atomically: temporary name, then rename),
folders ``0750`` whatever the umask, and the manifest's bookkeeping (files and sizes, failures
and their reasons, notes, py-spy calls as ``PySpyCall``). Safe to use from the capture's pool threads.
Every file written passes through ``scrub`` (the known secret values, ``known_secrets``) on its way
to disk: a text always, bytes when they are UTF-8.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from vllm_guardian.fsutil import atomic_write


@dataclass(frozen=True)
class PySpyCall:
    """One py-spy call of the capture, as the manifest lists it under ``steps``."""

    what: str  # dump | record
    pid: int
    mode: str  # blocking | nonblocking | ...-text
    argv: tuple[str, ...]
    error: str | None  # why it failed; None: it worked
    ran: bool = True  # False: py-spy could not be started (then no rc, duration, timeout)
    rc: int | None = None
    duration_s: float = 0.0
    timed_out: bool = False

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"what": self.what, "pid": self.pid, "mode": self.mode, "argv": list(self.argv)}
        if self.ran:
            doc.update(rc=self.rc, duration_s=round(self.duration_s, 3), timed_out=self.timed_out)
        doc["error"] = self.error
        return doc


FILE_MODE = 0o640
DIR_MODE = 0o750


class BundleWriter:
    """The folder being written and its manifest entries; safe to use from the pool threads."""

    def __init__(self, root: Path, scrub: Callable[[str], str] | None = None) -> None:
        self.root = root
        self._scrub = scrub
        self.files: dict[str, int] = {}
        self.failures: dict[str, str] = {}
        self.steps: list[PySpyCall] = []
        self.notes: dict[str, str] = {}
        self._lock = threading.Lock()

    def mkdir(self, path: Path) -> None:
        missing = []
        while not path.is_dir():
            missing.append(path)
            path = path.parent
        for d in reversed(missing):
            try:
                d.mkdir(mode=DIR_MODE)
            except FileExistsError:
                pass
            os.chmod(d, DIR_MODE)

    def write(self, rel: str, data: str | bytes) -> None:
        if self._scrub is not None:
            if isinstance(data, bytes):
                try:
                    data = data.decode("utf-8")
                except UnicodeDecodeError:
                    pass
            if isinstance(data, str):
                data = self._scrub(data)
        raw = data.encode("utf-8", errors="replace") if isinstance(data, str) else data
        path = self.root / rel
        self.mkdir(path.parent)
        atomic_write(path, raw, mode=FILE_MODE)
        self.adopt(rel, len(raw))

    def adopt(self, rel: str, size: int) -> None:
        with self._lock:
            self.files[rel] = size

    def fail(self, key: str, reason: str) -> None:
        with self._lock:
            self.failures.setdefault(key, reason)

    def note(self, key: str, text: str) -> None:
        with self._lock:
            self.notes[key] = text

    def step(self, call: PySpyCall) -> None:
        with self._lock:
            self.steps.append(call)
