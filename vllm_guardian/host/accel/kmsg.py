"""Kernel-log backend: the NVIDIA driver's ``NVRM: Xid`` lines from ``/dev/kmsg``.

The way to see Xids when NVML events are not there (a container without the event device,
an older driver, NVML not initialised). Opens ``<root>/dev/kmsg`` non-blocking once (absent or
refused, e.g. ``kernel.dmesg_restrict`` without CAP_SYSLOG: ``BackendUnavailable``, one line);
each ``read`` takes the records written since the last one (at most ``MAX_RECORDS``), and at
the first read only those of the last ``backlog`` seconds (by ``<root>/proc/uptime``), so an
Xid 79 from just before a guardian restart is seen and one from last week is not. Records the
kernel overwrote before they were read (``EPIPE``) are skipped with a note. A regular file in
place of the device (tests) is read the same way, line by line.

Returns events only (``device`` = ``pci:<bus id>``); the fault ledger maps them onto the device
whose ``pci_bus_id`` matches. ``opener`` is the seam (default ``os.open``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from vllm_guardian.errors import BackendUnavailable
from vllm_guardian.host.accel import AccelEvent, AccelSnapshot
from vllm_guardian.host.accel.kmsg_parse import parse_record, parse_xid

MAX_RECORDS = 2048
READ_SIZE = 8192


class KmsgBackend:
    name = "kmsg"

    def __init__(
        self,
        root: str = "/",
        *,
        interval: float = 1.0,
        backlog: float = 600.0,
        opener: Callable[[str, int], int] = os.open,
    ) -> None:
        self.root = Path(root)
        self.path = str(self.root / "dev" / "kmsg")
        self.interval = interval
        self.backlog = backlog
        try:
            self.fd: int | None = opener(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            raise BackendUnavailable(f"kernel log: cannot read {self.path} ({e.strerror or e})") from None
        self._first = True
        self._buf = b""
        self.notes: list[str] = []

    def _uptime_us(self) -> int | None:
        try:
            return int(float((self.root / "proc" / "uptime").read_text().split()[0]) * 1e6)
        except (OSError, ValueError, IndexError):
            return None

    def _lines(self) -> list[str]:
        """The complete lines available now (a device read is one record; a file read, many)."""
        assert self.fd is not None
        lines: list[str] = []
        while len(lines) < MAX_RECORDS:
            try:
                chunk = os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                break  # nothing more now
            except BrokenPipeError:
                self.notes.append("kernel log: records were overwritten before they were read")
                continue
            if not chunk:
                break  # a regular file at its end
            self._buf += chunk
            *done, self._buf = self._buf.split(b"\n")
            lines.extend(d.decode("utf-8", "replace") for d in done)
        return lines

    def read(self, now: float) -> AccelSnapshot:
        if self.fd is None:
            return AccelSnapshot(self.name, (), (), (), tuple(self.notes))
        since = None
        if self._first:
            up = self._uptime_us()
            since = None if up is None else up - int(self.backlog * 1e6)
            self._first = False
        events: list[AccelEvent] = []
        for line in self._lines():
            rec = parse_record(line)
            if rec is None or (since is not None and rec.usec < since):
                continue
            x = parse_xid(rec.message)
            if x is None:
                continue
            events.append(AccelEvent(f"pci:{x.pci}", "xid", x.code, x.text or f"Xid {x.code}", "kmsg", x.pid))
        notes, self.notes = tuple(self.notes[-5:]), []
        return AccelSnapshot(self.name, (), (), tuple(events), notes)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
