"""NVML health and events through the real NvmlBackend over the fake NVML (pynvml's own constants
and error classes): ECC, retired pages, remapped rows, throttle reasons, NVLink, PCIe, a lost GPU,
a GPU that needs a reset, every event type, and unsupported calls noted once."""

from __future__ import annotations

from vllm_guardian.host.accel import AccelEvent
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_nvml import FakeNvmlBackend


def read_at(b, clock, t):
    clock.advance(t - (clock.monotonic() - b.library.t0))
    return b.read(clock.monotonic())


def codes(snap, dev="nvml:0"):
    return [c.code for d in snap.devices if d.id == dev for c in d.conditions]


def test_a_healthy_gpu_reads_its_counters_and_has_no_condition():
    clock = FakeClock()
    b = FakeNvmlBackend({"devices": [{"nvlink": {"links": 4}}]}, clock=clock)
    snap = b.read(clock.monotonic())
    (d,) = snap.devices
    assert d.conditions == () and d.pci_bus_id == "0000:10:00"
    c = d.extra["health_counters"]
    assert c["ecc_uncorrected_volatile"] == 0 and c["remap_failure"] == 0 and c["nvlink_active_links"] == 4
    assert c["pcie_replay"] == 0 and c["clock_event_reasons"] == 0


def test_uncorrected_ecc_remapping_and_retirement_become_conditions_when_they_appear():
    clock = FakeClock()
    dev = {
        "ecc": {"uncorrected_volatile": {"curve": "step", "before": 0, "after": 2, "at": 10}},
        "remapped_rows": {"uncorrectable": 1, "pending_at": 20, "failure_at": 30},
        "retired_pages": {"dbe": 2, "pending_at": 20},
    }
    b = FakeNvmlBackend({"devices": [dev]}, clock=clock, health_interval=1.0)
    assert codes(read_at(b, clock, 1)) == []
    assert codes(read_at(b, clock, 11)) == ["ecc_uncorrectable"]
    assert codes(read_at(b, clock, 21)) == ["ecc_uncorrectable", "retired_pages_pending", "remap_pending"]
    assert "remap_failure" in codes(read_at(b, clock, 31))


def test_throttle_reasons_come_and_go_with_the_clock_events():
    clock = FakeClock()
    dev = {"throttle": [{"at": 5, "reasons": ["hw_thermal", "sw_power_cap"]}, {"at": 15, "reasons": []}]}
    b = FakeNvmlBackend({"devices": [dev]}, clock=clock, health_interval=1.0)
    assert codes(read_at(b, clock, 6)) == ["throttle:hw_thermal", "throttle:sw_power_cap"]
    assert codes(read_at(b, clock, 16)) == []


def test_nvlink_and_pcie_counters_raise_a_condition_only_when_they_grow():
    clock = FakeClock()
    dev = {
        "nvlink": {"links": 2, "recovery": {"curve": "step", "before": 3, "after": 5, "at": 10}},
        "pcie_replay": {"curve": "step", "before": 7, "after": 9, "at": 10},
    }
    b = FakeNvmlBackend({"devices": [dev]}, clock=clock, health_interval=1.0)
    assert codes(read_at(b, clock, 1)) == []  # old counts are history
    assert codes(read_at(b, clock, 11)) == ["nvlink_errors", "pcie_replays"]
    assert codes(read_at(b, clock, 12)) == []


def test_health_is_read_every_health_interval_and_kept_in_between():
    clock = FakeClock()
    b = FakeNvmlBackend({"devices": [{"remapped_rows": {"failure_at": 2}}]}, clock=clock, health_interval=5.0)
    read_at(b, clock, 0)
    assert codes(read_at(b, clock, 3)) == []  # not due yet
    assert codes(read_at(b, clock, 5)) == ["remap_failure"]
    assert codes(read_at(b, clock, 6)) == ["remap_failure"]


def test_a_gpu_without_ecc_remapping_nvlink_or_pcie_counters_is_noted_once_never_asked_again():
    clock = FakeClock()
    dev = {"ecc": None, "remapped_rows": None, "retired_pages": None, "throttle": None, "pcie_replay": None}
    b = FakeNvmlBackend({"devices": [dev]}, clock=clock, health_interval=1.0)
    first = read_at(b, clock, 0)
    calls_before = len(b.health.unsupported)
    for t in range(1, 20):
        snap = read_at(b, clock, t)
    assert snap.notes == first.notes and len(b.health.unsupported) == calls_before
    assert {n.split(": ")[1].split(" ")[0] for n in first.notes} >= {
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetPcieReplayCounter",
    }
    assert codes(snap) == []


def test_a_lost_gpu_is_health_lost_with_its_condition_on_every_read():
    clock = FakeClock()
    b = FakeNvmlBackend({"devices": [{"lost_at": 5}, {}]}, clock=clock)
    snap = read_at(b, clock, 6)
    lost = {d.id: d for d in snap.devices}["nvml:0"]
    assert lost.health == "lost" and codes(snap) == ["gpu_lost"] and lost.pci_bus_id == "0000:10:00"
    assert codes(snap, "nvml:1") == []


def test_a_gpu_that_needs_a_reset_says_so():
    clock = FakeClock()
    b = FakeNvmlBackend({"devices": [{"reset_required_at": 1}]}, clock=clock)
    snap = read_at(b, clock, 2)
    assert snap.devices[0].health == "reset_required" and codes(snap) == ["reset_required"]


def test_every_event_type_a_device_supports_is_delivered_with_its_kind():
    clock = FakeClock()
    sc = {
        "devices": [{}, {"events": ["xid"]}],
        "xid": [{"at": 1, "device": 1, "code": 79}],
        "events": [{"at": 2, "device": 0, "type": "ecc_dbe"}, {"at": 2, "device": 1, "type": "ecc_dbe"}],
    }
    b = FakeNvmlBackend(sc, clock=clock)
    snap = read_at(b, clock, 3)
    assert snap.events == (
        AccelEvent("nvml:1", "xid", 79, "XID 79"),
        AccelEvent("nvml:0", "ecc_dbe", 0, "NVML ecc_dbe event"),
    )  # device 1 registered for Xids only: its DBE is not delivered
    assert read_at(b, clock, 4).events == ()


def test_an_other_nvml_error_leaves_the_number_out_noted_once_and_the_device_reads_on():
    clock = FakeClock()
    b = FakeNvmlBackend({"devices": [{}], "errors": {"nvmlDeviceGetPcieReplayCounter": "Unknown"}}, clock=clock)
    b.health_interval = 1.0
    first = read_at(b, clock, 0)
    (d,) = first.devices
    assert d.health == "OK" and d.memory_total_bytes and "pcie_replay" not in d.extra["health_counters"]
    failed = [n for n in first.notes if "failed (NVMLError_Unknown)" in n]
    assert len(failed) == 1
    for t in range(1, 5):
        snap = read_at(b, clock, t)
    assert [n for n in snap.notes if "failed" in n] == failed
