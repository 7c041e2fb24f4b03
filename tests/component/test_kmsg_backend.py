"""The kernel-log backend over a /dev/kmsg stand-in (a file of records under a root), over a
pipe (non-blocking reads that end in EAGAIN, as the device does) and over the real /dev/kmsg of
this machine, where a process writes forged lines and a real segfault logs a forged file name.
The node's GPUs are the driver's list under the root (``proc/driver/nvidia/gpus/<bus id>``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from vllm_guardian.errors import BackendUnavailable
from vllm_guardian.host.accel import AccelEvent, AccelSnapshot
from vllm_guardian.host.accel.kmsg import KmsgBackend
from vllm_guardian.host.accel.kmsg_parse import NOT_DRIVER_LINE, NOT_KERNEL
from tests.support.wait import poll

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kmsg"
FIX = FIXTURES / "kmsg_records.txt"
GPU = "0000:3b:00.0"  # the node's one GPU, as the driver lists it


def gpus(root: Path, *bus_ids: str) -> None:
    for bus in bus_ids:
        (root / "proc" / "driver" / "nvidia" / "gpus" / bus).mkdir(parents=True)


def root_with(tmp_path: Path, records: str, uptime_s: float) -> Path:
    (tmp_path / "dev").mkdir()
    (tmp_path / "proc").mkdir()
    (tmp_path / "dev" / "kmsg").write_text(records)
    (tmp_path / "proc" / "uptime").write_text(f"{uptime_s} 1.0\n")
    gpus(tmp_path, GPU)
    return tmp_path


def refused(snap: AccelSnapshot) -> dict[str, int]:
    return {r.reason: r.count for r in snap.refused}


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
    gpus(tmp_path, GPU)
    b = KmsgBackend(str(tmp_path), backlog=1e9, opener=lambda path, flags: r)
    assert [e.code for e in b.read(0.0).events] == [48]
    assert b.read(1.0).events == ()  # EAGAIN: nothing more, no wait
    b.close()
    os.close(w)


def test_an_unreadable_kernel_log_is_unavailable_with_one_line(tmp_path):
    with pytest.raises(BackendUnavailable, match="cannot read .*/dev/kmsg"):
        KmsgBackend(str(tmp_path))


def test_records_that_carry_an_xids_words_but_are_not_the_drivers_are_counted_never_events(tmp_path):
    # segfaults in files named like Xid lines (kernel facility), lines a process wrote (user, daemon)
    root = root_with(tmp_path, (FIXTURES / "forged_records.txt").read_text(), uptime_s=3300)
    b = KmsgBackend(str(root))
    snap = b.read(0.0)
    b.close()
    assert snap.events == ()
    assert refused(snap) == {NOT_DRIVER_LINE: 3, NOT_KERNEL: 4}
    assert snap.refused[0].example.startswith("NVRM: Xid (PCI:[23829]: segfault at 0")


def test_a_kernel_xid_of_a_bus_that_is_no_gpu_of_this_node_is_counted_never_an_event(tmp_path):
    root = root_with(tmp_path, "", uptime_s=100)
    b = KmsgBackend(str(root))
    with open(root / "dev" / "kmsg", "a") as f:
        f.write("4,1,99000000,-;NVRM: Xid (PCI:0000:aa:00): 79, pid=4242, name=python3, GPU has fallen off the bus.\n")
        f.write("4,2,99000001,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.\n")
    snap = b.read(0.0)
    b.close()
    assert [e.device for e in snap.events] == ["pci:0000:3b:00"]
    assert refused(snap) == {"unknown_device": 1}
    assert "0000:aa:00" in snap.refused[0].example


def test_the_devices_bound_to_the_driver_are_gpus_of_the_node_and_stay_known_once_seen(tmp_path):
    root = root_with(tmp_path, "", uptime_s=100)
    bound = root / "sys" / "bus" / "pci" / "drivers" / "nvidia"
    bound.mkdir(parents=True)
    for name in ("0000:5e:00.0", "bind", "unbind", "new_id", "module"):
        (bound / name).touch()
    b = KmsgBackend(str(root))
    with open(root / "dev" / "kmsg", "a") as f:
        f.write("4,1,99000000,-;NVRM: Xid (PCI:0000:5e:00): 79, GPU has fallen off the bus.\n")
    assert [e.device for e in b.read(0.0).events] == ["pci:0000:5e:00"]
    (bound / "0000:5e:00.0").unlink()  # the lost GPU left the bus
    with open(root / "dev" / "kmsg", "a") as f:
        f.write("4,2,99000001,-;NVRM: GPU 0000:5e:00.0: GPU has fallen off the bus.\n")
    assert [e.device for e in b.read(1.0).events] == ["pci:0000:5e:00"]
    b.close()


def test_a_line_without_end_is_dropped_past_its_bound(tmp_path):
    root = root_with(tmp_path, "4,1,1,-;" + "x" * 100_000, uptime_s=100)
    b = KmsgBackend(str(root))
    snap = b.read(0.0)
    b.close()
    assert snap.events == () and any("longer than" in n for n in snap.notes)
    assert len(b._buf) < 20_000


# ------------------------------------------------------------------ the real kernel log
REAL = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access("/dev/kmsg", os.R_OK | os.W_OK), reason="needs root and this machine's /dev/kmsg"
)


@pytest.fixture
def real_kmsg(tmp_path):
    """A root whose dev/kmsg is this machine's kernel log (the node's GPU: 0000:3b:00), read from now on."""
    (tmp_path / "dev").mkdir()
    (tmp_path / "proc").mkdir()
    (tmp_path / "dev" / "kmsg").symlink_to("/dev/kmsg")
    (tmp_path / "proc" / "uptime").symlink_to("/proc/uptime")
    gpus(tmp_path, GPU)
    b = KmsgBackend(str(tmp_path), backlog=0)
    b.read(0.0)  # what was logged before the test
    yield b
    b.close()


def read_until(b: KmsgBackend, marker: str) -> list[AccelSnapshot]:
    """Reads until a refused or accepted line names ``marker`` (the kernel logs it at once)."""
    snaps: list[AccelSnapshot] = []

    def seen() -> bool:
        snaps.append(b.read(0.0))
        return any(marker in r.example for s in snaps for r in s.refused) or any(
            marker in e.detail for s in snaps for e in s.events
        )

    poll(seen, 10, every=0.1)
    return snaps


@REAL
def test_an_xid_line_a_process_writes_to_the_real_kernel_log_is_not_the_kernels(real_kmsg):
    marker = f"forged-by-{os.getpid()}"
    for prefix in ("", "<4>", "<0>"):  # none, a warning, and one asking for kern.emerg
        with open("/dev/kmsg", "w") as kmsg:
            kmsg.write(f"{prefix}NVRM: Xid (PCI:0000:3b:00): 79, pid={os.getpid()}, name=x, {marker}\n")
    snaps = read_until(real_kmsg, marker)
    assert [e for s in snaps for e in s.events if marker in e.detail] == []
    assert sum(r.count for s in snaps for r in s.refused if r.reason == NOT_KERNEL) >= 1
    assert all(marker not in r.example for s in snaps for r in s.refused if r.reason != NOT_KERNEL)


CRASH = "int main(void) { *(volatile int *)0 = 0; return 0; }\n"


@REAL
@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build the crashing program")
def test_a_segfault_in_a_file_named_like_an_xid_line_is_not_an_xid(real_kmsg, tmp_path):
    # an unprivileged user's program, saved under a name of the driver's form, crashes in its own code:
    # the kernel logs the name (kern facility) after its process name cut to "NVRM: Xid (PCI:"
    home = Path(tempfile.mkdtemp(prefix="forged-"))
    try:
        home.chmod(0o755)
        src = home / "crash.c"
        src.write_text(CRASH)
        exe = home / f"NVRM: Xid (PCI:0000:3b:00): 79, pid={os.getpid()}, name=x, GPU has fallen off the bus"
        subprocess.run(["cc", "-O0", "-o", str(exe), str(src)], check=True)
        child = subprocess.run([str(exe)], cwd=home, user=65534, group=65534, check=False)
        assert child.returncode == -11  # SIGSEGV
        marker = f"pid={os.getpid()}, name=x"
        snaps = read_until(real_kmsg, marker)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert [e for s in snaps for e in s.events] == []
    assert any(r.reason == NOT_DRIVER_LINE and marker in r.example for s in snaps for r in s.refused)
