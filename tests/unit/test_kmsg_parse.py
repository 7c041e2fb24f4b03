"""The kernel log's NVIDIA lines: /dev/kmsg records and Xid lines in every form seen in the wild
(tests/fixtures/kmsg/README.md names where each line comes from)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_guardian.host.accel.kmsg_parse import (
    NOT_DRIVER_LINE,
    NOT_KERNEL,
    KmsgRecord,
    XidLine,
    kernel_xid,
    parse_record,
    parse_xid,
    pci_key,
    xids_of_text,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kmsg"


@pytest.mark.parametrize(
    "text, key",
    [
        ("0000:3b:00", "0000:3b:00"),
        ("00000000:3B:00.0", "0000:3b:00"),  # NVML's busId
        ("0000:9E:00.0", "0000:9e:00"),
        ("3b:00.0", "0000:3b:00"),
        ("0001:02:03", "0001:02:03"),
        ("GPU-0b11d014", None),
        ("", None),
    ],
)
def test_pci_ids_of_nvml_and_the_kernel_read_the_same(text, key):
    assert pci_key(text) == key


def test_every_xid_line_of_the_fixture_is_read_with_its_bus_code_pid_and_name():
    got = xids_of_text((FIXTURES / "xid_lines.txt").read_text())
    assert [(x.pci, x.code, x.pid, x.name) for x in got] == [
        ("0000:2b:00", 79, None, None),
        ("0000:9b:00", 119, 2024380, "nvidia-smi"),
        ("0000:91:00", 79, None, None),  # pid='<unknown>', name=<unknown>
        ("0000:cb:00", 13, None, None),
        ("0000:10:1c", 63, 1896, None),
        ("0000:01:00", 3, None, None),  # an older driver: no "PCI:"
        ("0000:01:00", 32, None, None),
        ("0000:01:00", 79, None, None),  # "GPU at 0000:01:00.0 has fallen off the bus."
        ("0000:91:00", 79, None, None),  # "GPU 0000:91:00.0: GPU has fallen off the bus."
        ("0000:b3:00", 79, None, None),  # "The NVIDIA GPU 0000:b3:00.0" (continued: fallen off the bus)
    ]  # the GPU header line, the usbhid line and the NVSwitch SXid line are not Xids


def test_the_xid_text_is_what_follows_pid_and_name():
    x = parse_xid("NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting")
    assert x == XidLine("0000:9b:00", 119, 2024380, "nvidia-smi", "Timeout after 6s of waiting")
    lost = parse_xid("NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.")
    assert lost is not None and lost.text == "GPU has fallen off the bus."


def test_kmsg_records_are_split_into_sequence_time_and_message_and_continuations_skipped():
    lines = (FIXTURES / "kmsg_records.txt").read_text().splitlines()
    recs = [parse_record(line) for line in lines]
    assert recs[0] == KmsgRecord(1201, 5_000_000, "usbhid 2-3:1.0: suspend error -5", 6)
    assert recs[0].facility == 0  # priority 6: kern.info
    assert recs[2] is None and recs[3] is None  # " SUBSYSTEM=pci", " DEVICE=+pci:..."
    assert [r.sequence for r in recs if r is not None] == [1201, 1202, 1203, 1204]


@pytest.mark.parametrize("junk", ["", "garbage", "NVRM: Xid", "NVRM: Xid (PCI:zz:zz): 79, x", "4,1,2;", "a,b,c,d;e"])
def test_junk_is_not_an_xid_nor_a_record(junk):
    assert parse_xid(junk) is None
    assert junk.startswith("4,1,2;") or parse_record(junk) is None


def test_the_drivers_own_records_are_xids_of_the_kernel():
    lines = (FIXTURES / "kmsg_records.txt").read_text().splitlines()
    got = [kernel_xid(r) for r in map(parse_record, lines) if r is not None]
    assert [(x.pci, x.code) if x else reason for x, reason in got] == [
        None,  # usbhid: nothing of the driver
        ("0000:3b:00", 13),
        ("0000:3b:00", 79),
        ("0000:3b:00", 79),
    ]


# tests/fixtures/kmsg/forged_records.txt, line by line (its README says where each comes from)
FORGED = {
    "a segfault in a file named like an Xid line (read from a real kernel)": NOT_DRIVER_LINE,
    "a segfault in a file named like a lost-GPU line": NOT_DRIVER_LINE,
    "a segfault in a file named like the multi-line lost-GPU header": NOT_DRIVER_LINE,
    "written to /dev/kmsg with <4>: user.warning": NOT_KERNEL,
    "written to /dev/kmsg with <6>: user.info": NOT_KERNEL,
    "written to /dev/kmsg with <30>: daemon.info": NOT_KERNEL,
    "written to /dev/kmsg with <0>, asking for kern.emerg: user.emerg": NOT_KERNEL,
}


@pytest.mark.parametrize("n, name", list(enumerate(FORGED)), ids=list(FORGED))
def test_an_xids_words_outside_the_drivers_kernel_line_are_refused_with_the_reason(n, name):
    line = (FIXTURES / "forged_records.txt").read_text().splitlines()[n]
    rec = parse_record(line)
    assert rec is not None
    assert kernel_xid(rec) == (None, FORGED[name])
    assert xids_of_text(line) == []


@pytest.mark.parametrize(
    "message",
    [
        "NVRM: Xid (PCI:[23829]: segfault at 0 ip 0 sp 0 error 6 in x[1132,55a68ef47000+1000]",  # the name, cut
        "python3[4242]: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
        "NVRM: GPU at 0000:3b:00.0 has fallen off the bus.[55d0c8a3e000+1000]",
        "NVRM: The NVIDIA GPU 0000:b3:00.0[55d0c8a3e000+1000] likely on CPU 0 (core 0, socket 0)",
    ],
)
def test_only_a_whole_message_in_a_driver_form_is_an_xid(message):
    assert parse_xid(message) is None
