"""Pure parsers of kernel-log text: ``/dev/kmsg`` records and the NVIDIA driver's Xid lines.

A ``/dev/kmsg`` record is ``<priority>,<sequence>,<timestamp µs>,<flags>[,...];<message>``,
continuation lines (``KEY=value`` dictionary lines) start with a space (the kernel's
Documentation/ABI/testing/dev-kmsg). The journal's kernel stream and ``dmesg`` print the same
message after their own prefix (``[  123.456] ``, ``May 18 19:02:39 host kernel: ``).

Xid lines seen in the wild (fixtures: tests/fixtures/kmsg/):

- ``NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.``
- ``NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of ...``
- ``NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.``
- ``NVRM: Xid (0000:01:00): 3, C 00000005 ...`` (older drivers: no ``PCI:``)

and the lost-GPU lines some drivers print without an Xid: ``NVRM: GPU at PCI:0000:01:00: ... has
fallen off the bus`` / ``NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.`` /
``NVRM: The NVIDIA GPU 0000:b3:00.0`` (continued: ``fallen off the bus and is not responding``);
all three read as Xid 79 of that bus. PCI ids are normalised to ``dddd:bb:dd`` (lower case), the
form ``pci_key`` gives NVML's ``busId`` (``00000000:3B:00.0``) too.

Only the driver's own line is an Xid (``kernel_xid``): a record of the kernel facility (0; a
process writing to ``/dev/kmsg`` gets facility 1, user, or the one it names, never 0: the kernel
enforces it, ``devkmsg_write``) whose message *is* one of the forms above, from its first
character to its last. Text the kernel logs on behalf of a process can carry the words anywhere
else: a segfault line names the faulting process (``comm``, at most 15 characters, so it can
start ``NVRM: Xid (PCI:`` but never complete a form) and then the file the fault was in, any name
its owner chose, followed by ``[offset,base+size]``. Such a record is refused and says why
(``not_kernel``, ``not_driver_line``), so the caller can count it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

XID_LOST = 79

KERN = 0  # the kernel's facility; what a process writes to /dev/kmsg never has it
NOT_KERNEL = "not_kernel"  # Xid words in a record a process wrote (facility user, daemon, ...)
NOT_DRIVER_LINE = "not_driver_line"  # Xid words inside another kernel message (a segfault's file name)

_RECORD = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;(.*)$")
# whole messages (``fullmatch``): the driver's line from its first character to its last
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+)"
    r"(?:, pid=(?P<pid>'?[^,']*'?))?(?:, name=(?P<name>[^,]*))?(?:, (?P<text>.*))?"
)
_LOST = re.compile(
    r"NVRM: (?:GPU at (?:PCI:)?(?P<a>[0-9A-Fa-f:.]+)[: ].*fallen off the bus\.?"
    r"|GPU (?P<b>[0-9A-Fa-f:.]+): GPU has fallen off the bus\.?"
    r"|The NVIDIA GPU (?P<c>[0-9A-Fa-f:.]+)\s*)"
)
_MENTION = re.compile(r"NVRM: Xid \(|fallen off the bus|NVRM: The NVIDIA GPU ")  # anywhere: what a forgery carries
# what ``journalctl -k`` / ``dmesg`` / ``dmesg -T`` print before the kernel's message
_TEXT_PREFIX = re.compile(r"^(?:\w{3} +\d+ [\d:]+ \S+ kernel: )?(?:\[[^\]]*\] *)?")
_PCI = re.compile(r"^(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.[0-7])?$")


@dataclass(frozen=True)
class KmsgRecord:
    sequence: int
    usec: int  # monotonic µs since boot
    message: str
    priority: int  # facility * 8 + level, as the record's first field

    @property
    def facility(self) -> int:
        return self.priority >> 3


@dataclass(frozen=True)
class XidLine:
    pci: str  # normalised bus id, "0000:3b:00"
    code: int
    pid: int | None
    name: str | None
    text: str


def pci_key(text: str) -> str | None:
    """``0000:3b:00``, ``00000000:3B:00.0``, ``3b:00.0`` -> ``0000:3b:00``; None if not a bus id."""
    m = _PCI.match(text.strip().rstrip(":"))
    if m is None:
        return None
    domain, bus, dev = m.group(1) or "0", m.group(2), m.group(3)
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}"


def parse_record(line: str) -> KmsgRecord | None:
    """One ``/dev/kmsg`` record; None for a continuation line or anything else."""
    m = _RECORD.match(line.rstrip("\n"))
    if m is None:
        return None
    return KmsgRecord(int(m.group(2)), int(m.group(3)), m.group(4), int(m.group(1)))


def mentions_xid(message: str) -> bool:
    """Does the text carry an Xid's words anywhere (what a forged line would)?"""
    return _MENTION.search(message) is not None


def kernel_xid(rec: KmsgRecord) -> tuple[XidLine | None, str | None]:
    """``(the Xid, None)`` for the driver's own line; ``(None, reason)`` for a record that carries
    an Xid's words but is not one (``NOT_KERNEL``, ``NOT_DRIVER_LINE``); ``(None, None)`` else."""
    if rec.facility != KERN:
        return None, NOT_KERNEL if mentions_xid(rec.message) else None
    x = parse_xid(rec.message)
    if x is None and mentions_xid(rec.message):
        return None, NOT_DRIVER_LINE
    return x, None


def parse_xid(message: str) -> XidLine | None:
    """The Xid a whole kernel message reports (a lost-GPU line reads as Xid 79); None otherwise,
    also for a message that only contains one."""
    m = _XID.fullmatch(message)
    if m is not None:
        pci = pci_key(m.group("pci"))
        if pci is None:
            return None
        pid_text = (m.group("pid") or "").strip("'")
        name = (m.group("name") or "").strip() or None
        return XidLine(
            pci,
            int(m.group("code")),
            int(pid_text) if pid_text.isdigit() else None,
            None if name in (None, "<unknown>") else name,
            (m.group("text") or "").strip(),
        )
    m = _LOST.fullmatch(message)
    if m is not None:
        pci = pci_key(m.group("a") or m.group("b") or m.group("c") or "")
        if pci is not None:
            return XidLine(pci, XID_LOST, None, None, "GPU has fallen off the bus")
    return None


def xids_of_text(text: str) -> list[XidLine]:
    """Every Xid of a block of kernel-log text in any of the forms above (one message a line:
    a ``/dev/kmsg`` record, kernel facility only, or the kernel stream as journalctl / dmesg print it)."""
    out = []
    for line in text.splitlines():
        rec = parse_record(line)
        if rec is not None:
            x, _ = kernel_xid(rec)
        else:
            x = parse_xid(_TEXT_PREFIX.sub("", line, count=1))
        if x is not None:
            out.append(x)
    return out
