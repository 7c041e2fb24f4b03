"""accel_fault: the fault ledger, the detector (one incident per device) and the device story an
engine incident on a faulty device tells."""

from __future__ import annotations

from types import SimpleNamespace

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors import accel_fault
from vllm_guardian.diagnosis.device_story import device_story
from vllm_guardian.host.accel import AccelEvent, DeviceCondition
from vllm_guardian.model import Kind, Severity
from vllm_guardian.state.device_faults import DeviceFaults

CFG = DetectorsConfig()
WALL = 1_790_000_000.0


def result(devices=(), events=(), per_target=None):
    """An AccelResult-shaped reading: device dicts as the probe builds them."""
    devs = {}
    for d in devices:
        devs[d["device"]] = {
            "device": d["device"],
            "name": d.get("name", "NVIDIA H200"),
            "backend": "nvml",
            "pci_bus_id": d.get("pci"),
            "conditions": [{"code": c.code, "detail": c.detail} for c in d.get("conditions", ())],
        }
    return SimpleNamespace(devices=devs, events=list(events), per_target=per_target or {}, read=("nvml",))


def gpu(i, *conditions, pci=None):
    return {"device": f"nvml:{i}", "pci": pci or f"0000:{0x10 + i:02x}:00", "conditions": conditions}


def ledger_with(*folds, window=900.0):
    led = DeviceFaults(window)
    for now, res in folds:
        led.fold(res, now, WALL + now)
    return led


def test_a_healthy_device_has_no_finding():
    led = ledger_with((0, result([gpu(0)])))
    assert led.devices() == [] and accel_fault.evaluate(led.view("nvml:0", 0), CFG) is None


def test_an_xid_79_event_is_a_critical_finding_that_says_a_restart_will_not_help():
    led = ledger_with((10, result([gpu(0)], [AccelEvent("nvml:0", "xid", 79, "XID 79")])))
    f = accel_fault.evaluate(led.view("nvml:0", 11), CFG)
    assert f is not None and f.kind is Kind.ACCEL_FAULT and f.target == "nvml:0"
    assert f.severity is Severity.CRITICAL
    assert "Xid 79 (GPU has fallen off the bus)" in f.summary and "a restart will not help" in f.summary
    assert f.signals["blocks_restart"] is True and f.signals["action"] == "reboot_node"


def test_an_event_counts_for_the_window_then_the_device_clears():
    led = ledger_with((10, result([gpu(0)], [AccelEvent("nvml:0", "xid", 13, "")])), window=60)
    assert accel_fault.evaluate(led.view("nvml:0", 69), CFG) is not None
    assert accel_fault.evaluate(led.view("nvml:0", 71), CFG) is None


def test_a_condition_lasts_while_the_reads_show_it_and_keeps_when_it_was_first_seen():
    lost = DeviceCondition("gpu_lost", "NVML: GPU is lost")
    led = ledger_with((5, result([gpu(1, lost)])), (6, result([gpu(1, lost)])))
    (rec,) = led.faults("nvml:1", 6)
    assert rec.code == "gpu_lost" and rec.at == 5 and rec.condition
    led.fold(result([gpu(1)]), 7, WALL + 7)
    assert led.faults("nvml:1", 7) == ()


def test_a_kernel_log_xid_lands_on_the_device_with_that_bus_id_and_on_the_server_it_names():
    led = ledger_with((0, result([gpu(0, pci="0000:3b:00")])))
    ev = AccelEvent("pci:0000:3b:00", "xid", 79, "GPU has fallen off the bus.", "kmsg", pid=4242)
    led.record_event(ev, 1, WALL + 1, pid_owner=lambda pid: "llm" if pid == 4242 else None)
    assert led.devices() == ["nvml:0"] and led.target_devices["llm"] == {"nvml:0"}
    assert [r.source for r in led.blocking("llm", 2)] == ["kmsg"]


def test_a_kernel_log_xid_of_a_gpu_nvml_does_not_list_is_its_own_device():
    led = DeviceFaults()
    led.record_event(AccelEvent("pci:0000:aa:00", "xid", 48, "", "kmsg"), 1, WALL)
    assert led.devices() == ["pci:0000:aa:00"]
    f = accel_fault.evaluate(led.view("pci:0000:aa:00", 2), CFG)
    assert f is not None and f.severity is Severity.CRITICAL


def test_throttling_is_a_warning_and_a_power_cap_or_a_corrected_error_opens_nothing():
    hot = DeviceCondition("throttle:hw_thermal", "clock-event reason hw_thermal is on")
    cap = DeviceCondition("throttle:sw_power_cap", "")
    led = ledger_with((0, result([gpu(0, hot), gpu(1, cap)], [AccelEvent("nvml:1", "ecc_sbe", 0, "")])))
    f = accel_fault.evaluate(led.view("nvml:0", 1), CFG)
    assert f is not None and f.severity is Severity.WARNING and f.signals["blocks_restart"] is False
    assert accel_fault.evaluate(led.view("nvml:1", 1), CFG) is None
    assert led.health("nvml:0", 1) == 1 and led.health("nvml:1", 1) == 0


def test_a_server_remembers_its_devices_after_a_lost_gpu_stops_listing_its_processes():
    rows = {"llm": [{"device": "nvml:3"}]}
    lost = DeviceCondition("gpu_lost", "lost")
    led = ledger_with((0, result([gpu(3)], per_target=rows)), (5, result([gpu(3, lost)])))
    assert [f.code for f in led.blocking("llm", 6)] == ["gpu_lost"]
    assert led.blocking("other", 6) == []


def test_the_worst_fault_leads_the_finding():
    hot = DeviceCondition("throttle:hw_thermal", "")
    led = ledger_with(
        (0, result([gpu(0, hot)], [AccelEvent("nvml:0", "xid", 95, ""), AccelEvent("nvml:0", "xid", 13, "")]))
    )
    f = accel_fault.evaluate(led.view("nvml:0", 1), CFG)
    assert (
        f is not None
        and f.signals["code"] == "xid:95"
        and f.signals["other_codes"] == ["throttle:hw_thermal", "xid:13"]
    )


# ------------------------------------------------------------------ the story an engine incident tells
def test_an_engine_stall_on_a_lost_gpu_names_the_fault_first_and_says_a_restart_will_not_help():
    led = ledger_with(
        (0, result([gpu(3)], [AccelEvent("nvml:3", "xid", 79, "XID 79")], {"llm": [{"device": "nvml:3"}]}))
    )
    entries, notes = device_story("engine_stall", led.for_target("llm", 1))
    assert entries[0]["id"] == "device-fault:xid:79" and entries[0]["confidence"] == 0.95
    assert "nvml:3 reported Xid 79 (GPU has fallen off the bus) at" in entries[0]["title"]
    assert notes[0].endswith("a restart will not help")
    assert entries[0]["device_fault"]["action"] == "reboot_node"


def test_throttling_annotates_an_engine_incident_but_is_not_its_diagnosis():
    hot = DeviceCondition("throttle:hw_slowdown", "")
    led = ledger_with((0, result([gpu(0, hot)], per_target={"llm": [{"device": "nvml:0"}]})))
    entries, notes = device_story("busy_loop", led.for_target("llm", 1))
    assert entries == [] and len(notes) == 1 and "Hardware slowdown" in notes[0]


def test_a_leak_or_a_server_on_healthy_devices_gets_no_device_story():
    led = ledger_with((0, result([gpu(3)], [AccelEvent("nvml:3", "xid", 79, "")], {"llm": [{"device": "nvml:3"}]})))
    assert device_story("kv_cache_leak", led.for_target("llm", 1)) == ([], [])
    assert device_story("engine_dead", led.for_target("other", 1)) == ([], [])


def test_the_xid_that_names_the_cause_leads_ahead_of_the_lost_gpu_it_leaves_behind():
    lost = DeviceCondition("gpu_lost", "NVML: GPU is lost")
    led = ledger_with((0, result([gpu(0)], [AccelEvent("nvml:0", "xid", 79, "")])), (1, result([gpu(0, lost)])))
    f = accel_fault.evaluate(led.view("nvml:0", 2), CFG)
    assert f is not None and f.signals["code"] == "xid:79" and f.signals["other_codes"] == ["gpu_lost"]
    led.target_devices["llm"] = {"nvml:0"}
    entries, _ = device_story("busy_loop", led.for_target("llm", 2))
    assert [e["id"] for e in entries] == ["device-fault:xid:79", "device-fault:gpu_lost"]


# ------------------------------------------------------------------ the node-level escalation (Kubernetes)
def _incident(kind: Kind, target: str, severity: Severity, signals: dict):
    from vllm_guardian.model import Incident, Status, TargetRef

    return Incident(
        "id-" + target, kind, severity, "n1", TargetRef(target, 0, 0), Status.FIRING, "s " + target, 0.0, signals
    )


def test_a_device_fault_a_restart_cannot_help_sets_the_node_condition_a_throttle_does_not():
    from vllm_guardian.config.loader import parse_config
    from vllm_guardian.surface.kube_publisher import KubePublisher

    cfg = parse_config({"node": "n1", "api": {"http": None}, "kubernetes": {"node_condition": True}})
    me = SimpleNamespace(cfg=cfg)
    broken = _incident(Kind.ACCEL_FAULT, "nvml:3", Severity.CRITICAL, {"blocks_restart": True})
    hot = _incident(Kind.ACCEL_FAULT, "nvml:1", Severity.WARNING, {"blocks_restart": False})
    want = KubePublisher._node_want(me, SimpleNamespace(incidents=[broken, hot], targets=[]))  # type: ignore[arg-type]
    assert want.problem and "nvml:3" in want.message and "nvml:1" not in want.message
    calm = KubePublisher._node_want(me, SimpleNamespace(incidents=[hot], targets=[]))  # type: ignore[arg-type]
    assert not calm.problem
