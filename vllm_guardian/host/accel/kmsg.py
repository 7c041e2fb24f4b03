"""Kernel-log backend: the NVIDIA driver's ``NVRM: Xid`` lines from ``/dev/kmsg``.

The way to see Xids when NVML events are not there (a container without the event device,
an older driver, NVML not initialised). Opens ``<root>/dev/kmsg`` non-blocking once (absent or
refused, e.g. ``kernel.dmesg_restrict`` without CAP_SYSLOG: ``BackendUnavailable``, one line);
each ``read`` takes the records written since the last one (at most ``MAX_RECORDS``), and at
the first read only those of the last ``backlog`` seconds (by ``<root>/proc/uptime``), so an
Xid 79 from just before a guardian restart is seen and one from last week is not. Records the
kernel overwrote before they were read (``EPIPE``) are skipped with a note. A regular file in
place of the device (tests) is read the same way, line by line (a line longer than ``MAX_LINE``
is dropped with a note: a record of the device is at most 8 KiB).

Anyone on the node can put an Xid's words into the kernel log (a process writing to
``/dev/kmsg``, a segfault in a file named like an Xid line), so a line is an event only when
``kmsg_parse.kernel_xid`` says it is the driver's own, and only for a bus that is a GPU of this
node by the driver's own list: ``<root>/proc/driver/nvidia/gpus/<bus id>`` and the devices bound
to ``<root>/sys/bus/pci/drivers/nvidia`` (read when a bus not seen there before is named; a bus
once listed stays known, as a lost GPU may leave the list). Anything else is refused: counted in
the snapshot's ``refused`` (``not_kernel``, ``not_driver_line``, ``unknown_device``), never an event.

Returns events only (``device`` = ``pci:<bus id>``); the fault ledger maps them onto the device
whose ``pci_bus_id`` matches. ``opener`` is the seam (default ``os.open``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from vllm_guardian.errors import BackendUnavailable
from vllm_guardian.host.accel import EXAMPLE_CHARS, AccelEvent, AccelSnapshot, Refused
from vllm_guardian.host.accel.kmsg_parse import NOT_DRIVER_LINE, NOT_KERNEL, kernel_xid, parse_record, pci_key

MAX_RECORDS = 2048
READ_SIZE = 8192
MAX_LINE = 16384
UNKNOWN_DEVICE = "unknown_device"  # the driver's line names a bus that is no GPU of this node


class KmsgBackend:
    name = "kmsg"
    refusal_reasons = (NOT_KERNEL, NOT_DRIVER_LINE, UNKNOWN_DEVICE)

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
        self.buses: set[str] = set()  # the node's GPUs by the driver's list, ever seen

    def _uptime_us(self) -> int | None:
        try:
            return int(float((self.root / "proc" / "uptime").read_text().split()[0]) * 1e6)
        except (OSError, ValueError, IndexError):
            return None

    def node_gpu(self, bus: str) -> bool:
        """Is ``bus`` a GPU of this node by the driver's own lists (re-read for a bus not known yet)?"""
        if bus not in self.buses:
            for where in ("proc/driver/nvidia/gpus", "sys/bus/pci/drivers/nvidia"):
                try:
                    names = os.listdir(self.root / where)
                except OSError:
                    continue
                self.buses.update(k for k in map(pci_key, names) if k is not None)
        return bus in self.buses

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
            if len(self._buf) > MAX_LINE:
                self.notes.append(f"kernel log: a line longer than {MAX_LINE} bytes was dropped")
                self._buf = b""
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
        counts: dict[str, int] = {}  # refused: reason -> lines
        examples: dict[str, str] = {}  # reason -> the first such message
        for line in self._lines():
            rec = parse_record(line)
            if rec is None or (since is not None and rec.usec < since):
                continue
            x, reason = kernel_xid(rec)
            if x is not None and not self.node_gpu(x.pci):
                x, reason = None, UNKNOWN_DEVICE
            if reason is not None:
                counts[reason] = counts.get(reason, 0) + 1
                examples.setdefault(reason, rec.message[:EXAMPLE_CHARS])
            if x is not None:
                events.append(AccelEvent(f"pci:{x.pci}", "xid", x.code, x.text or f"Xid {x.code}", "kmsg", x.pid))
        notes, self.notes = tuple(self.notes[-5:]), []
        return AccelSnapshot(
            self.name,
            (),
            (),
            tuple(events),
            notes,
            tuple(Refused(r, n, examples[r]) for r, n in sorted(counts.items())),
        )

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
