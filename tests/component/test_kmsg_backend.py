"""The kernel-log backend over a /dev/kmsg stand-in (a file of records under a root) and over a
pipe (non-blocking reads that end in EAGAIN, as the device does)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vllm_guardian.errors import BackendUnavailable
from vllm_guardian.host.accel import AccelEvent
from vllm_guardian.host.accel.kmsg import KmsgBackend

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "kmsg" / "kmsg_records.txt"


def root_with(tmp_path: Path, records: str, uptime_s: float) -> Path:
    (tmp_path / "dev").mkdir()
    (tmp_path / "proc").mkdir()
    (tmp_path / "dev" / "kmsg").write_text(records)
    (tmp_path / "proc" / "uptime").write_text(f"{uptime_s} 1.0\n")
    return tmp_path


def test_xids_of_the_backlog_younger_than_the_backlog_window_are_events_of_their_bus(tmp_path):
    root = root_with(tmp_path, FIX.read_text(), uptime_s=710)
    b = KmsgBackend(str(root), backlog=600)
    snap = b.read(0.0)
    b.close()
    # the Xid 13 at 9 s is older than 710 - 600 s; the Xid 79 and the lost-GPU line at ~700 s count
    assert snap.events == (
        AccelEvent("pci:0000:3b:00", "xid", 79, "GPU has fallen off the bus.", "kmsg", None),
        AccelEvent("pci:0000:3b:00", "xid", 79, "GPU has fallen off the bus", "kmsg", None),
    )
    assert snap.devices == () and snap.processes == ()


def test_lines_written_later_are_read_once_with_the_pid_they_name(tmp_path):
    root = root_with(tmp_path, "", uptime_s=100)
    b = KmsgBackend(str(root))
    assert b.read(0.0).events == ()
    with open(root / "dev" / "kmsg", "a") as f:
        f.write("4,9,99000000,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, Graphics SM Warp Exception\n")
    assert [(e.code, e.pid) for e in b.read(1.0).events] == [(13, 4242)]
    assert b.read(2.0).events == ()
    b.close()


def test_a_non_blocking_source_that_has_nothing_more_returns_at_once(tmp_path):
    r, w = os.pipe()
    os.write(
        w,
        b"4,1,5,-;NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error\n",
    )
    os.set_blocking(r, False)
    b = KmsgBackend(str(tmp_path), backlog=1e9, opener=lambda path, flags: r)
    assert [e.code for e in b.read(0.0).events] == [48]
    assert b.read(1.0).events == ()  # EAGAIN: nothing more, no wait
    b.close()
    os.close(w)


def test_an_unreadable_kernel_log_is_unavailable_with_one_line(tmp_path):
    with pytest.raises(BackendUnavailable, match="cannot read .*/dev/kmsg"):
        KmsgBackend(str(tmp_path))
