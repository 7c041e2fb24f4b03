"""The accelerator probe: backends read at their own interval, host PIDs mapped onto the
targets' processes, samples only for what was read; make_backends honours auto|off."""

from __future__ import annotations

import logging

import pytest

from vllm_guardian.config.schema import AcceleratorsConfig, Config
from vllm_guardian.errors import BackendUnavailable, ProbeFailed
from vllm_guardian.host.accel import MIB, AccelBackend, AccelEvent, AccelSnapshot
from vllm_guardian.host.accel.kmsg import KmsgBackend
from vllm_guardian.host.accel.npu_smi import NpuSmiBackend
from vllm_guardian.host.process_control import OsProcessControl
from vllm_guardian.host.procfs import ProcFS
from vllm_guardian.host.runner import SubprocessRunner
from vllm_guardian.model import ProcessInfo, ProcKey, Role, Target
from vllm_guardian.probes.accel import AccelProbe, AccelReader, make_backends
from vllm_guardian.probes.base import ProbeParts, Readings
from vllm_guardian.seams import Seams
from vllm_guardian.series import SeriesStore
from vllm_guardian.series import metrics as m
from vllm_guardian.state.device_faults import DeviceFaults
from vllm_guardian.state.tracker import Tracker
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_npu_smi import write_fake_npu_smi
from vllm_guardian.testing.fake_http import FakeHttp
from vllm_guardian.testing.fake_nvml import FakeNvmlBackend
from vllm_guardian.testing.fake_runner import FakeRunner

MB = 1e6


def target(name: str, *pids: int) -> Target:
    procs = tuple(
        ProcessInfo(ProcKey(pid, pid * 10), pids[0] if i else 1, Role.API_SERVER if i == 0 else Role.WORKER, ("x",))
        for i, pid in enumerate(pids)
    )
    return Target(name, procs[0].key, procs)


LLM = target("llm", 100, 4242, 4243)
OTHER = target("other", 300, 301)
NVML = {
    "devices": [
        {
            "memory_total": 80e9,
            "utilization": 60,
            "processes": [
                {"pid": 4242, "memory": {"curve": "linear", "start": 30e9, "rate": 8 * MB}},
                {"pid": 9999, "memory": 1e9},
            ],
        },
        {"memory_total": 80e9, "utilization": 20, "processes": [{"pid": 4243, "memory": 30e9}]},
        {"memory_total": 80e9, "utilization": 90, "processes": [{"pid": 301, "memory": None}]},
    ]
}


def by_key(samples) -> dict[tuple[str, str, str], float]:
    return {(s.target, s.subject, s.metric): s.value for s in samples}


# ------------------------------------------------------------------ the fake npu-smi executable, end to end
def test_a_leaking_process_row_gives_rising_samples_through_the_real_runner(tmp_path):
    scenario = {
        "layout": "a3",
        "devices": [{"npu": 0, "chip": 0, "base_mb": 2000}, {"npu": 0, "chip": 1}],
        "processes": [{"npu": 0, "chip": 0, "pid": 4242, "memory_mb": {"curve": "linear", "start": 30000, "rate": 8}}],
    }
    fake = write_fake_npu_smi(tmp_path, scenario)
    probe = AccelReader([NpuSmiBackend(SubprocessRunner(), str(fake.path), timeout=30.0, usages_interval=None)])
    series = []
    for t in (0.0, 5.0, 10.0, 15.0):
        fake.set_time(t)
        res = probe.collect([LLM], 1000.0 + t)
        assert res.errors == {}
        series.append(by_key(res.samples))
    worker = [s[("llm", "p4242", m.ACCEL_MEM)] for s in series]
    assert worker == [(30000 + 8 * t) * MIB for t in (0, 5, 10, 15)]
    assert [s[("llm", "", m.ACCEL_MEM)] for s in series] == worker
    assert series[0][("llm", "", m.ACCEL_TOTAL)] == 65536 * MIB  # only the chip it uses
    assert series[0][("llm", "", m.ACCEL_UTIL)] == 0.0


# ------------------------------------------------------------------ mapping onto targets (fake NVML)
def test_memory_per_process_and_summed_per_target_util_and_total_over_its_devices():
    clock = FakeClock()
    probe = AccelReader([FakeNvmlBackend(NVML, clock=clock)])
    res = probe.collect([LLM, OTHER], clock.monotonic())
    got = by_key(res.samples)
    assert {k: v for k, v in got.items() if k[0] == "llm"} == {
        ("llm", "p4242", m.ACCEL_MEM): 30e9,
        ("llm", "p4243", m.ACCEL_MEM): 30e9,
        ("llm", "", m.ACCEL_MEM): 60e9,
        ("llm", "", m.ACCEL_UTIL): 0.6,
        ("llm", "", m.ACCEL_TOTAL): 160e9,
    }
    # memory unknown for its only process: no memory sample, but util and total of its device
    assert {k: v for k, v in got.items() if k[0] == "other"} == {
        ("other", "", m.ACCEL_UTIL): 0.9,
        ("other", "", m.ACCEL_TOTAL): 80e9,
    }
    assert all(s.t == clock.monotonic() for s in res.samples)


def test_a_target_with_no_process_on_any_device_gets_no_sample():
    clock = FakeClock()
    res = AccelReader([FakeNvmlBackend(NVML, clock=clock)]).collect([target("cpu-only", 500, 501)], clock.monotonic())
    assert res.samples == [] and "cpu-only" not in res.per_target


def test_devices_snapshot_and_status_rows():
    clock = FakeClock()
    res = AccelReader([FakeNvmlBackend(NVML, clock=clock)]).collect([LLM], clock.monotonic())
    assert sorted(res.devices) == ["nvml:0", "nvml:1", "nvml:2"]
    d0 = res.devices["nvml:0"]
    assert (d0["backend"], d0["memory_total_bytes"], d0["utilization_ratio"], d0["pids"], d0["read_at"]) == (
        "nvml",
        80_000_000_000,
        0.6,
        [4242, 9999],
        clock.monotonic(),
    )
    assert res.per_target["llm"] == [
        {
            "device": "nvml:0",
            "backend": "nvml",
            "memory_used_bytes": 31_000_000_000,
            "memory_total_bytes": 80_000_000_000,
            "utilization_ratio": 0.6,
            "health": "OK",
            "target_memory_bytes": 30_000_000_000,
        },
        {
            "device": "nvml:1",
            "backend": "nvml",
            "memory_used_bytes": 30_000_000_000,
            "memory_total_bytes": 80_000_000_000,
            "utilization_ratio": 0.2,
            "health": "OK",
            "target_memory_bytes": 30_000_000_000,
        },
    ]
    assert res.process_memory == {4242: 30_000_000_000, 9999: 1_000_000_000, 4243: 30_000_000_000}


def test_xid_events_come_back_with_the_read():
    clock = FakeClock()
    probe = AccelReader([FakeNvmlBackend(dict(NVML, xid=[{"at": 2, "device": 1, "code": 79}]), clock=clock)])
    probe.collect([LLM], clock.monotonic())
    clock.advance(3)
    assert probe.collect([LLM], clock.monotonic()).events == [AccelEvent("nvml:1", "xid", 79, "XID 79")]


# ------------------------------------------------------------------ intervals and failures
class Scripted:
    """A backend answering from a list, counting reads."""

    def __init__(self, name: str, interval: float, answers: list) -> None:
        self.name, self.interval, self.answers, self.reads = name, interval, list(answers), 0

    def read(self, now: float) -> AccelSnapshot:
        self.reads += 1
        a = self.answers[min(self.reads, len(self.answers)) - 1]
        if isinstance(a, Exception):
            raise a
        return a

    def close(self) -> None:
        self.answers = []


EMPTY = AccelSnapshot("npu_smi", (), ())


def test_each_backend_is_read_at_most_once_per_its_interval():
    npu = Scripted("npu_smi", 5.0, [EMPTY])
    gpu = Scripted("nvml", 1.0, [AccelSnapshot("nvml", (), ())])
    probe = AccelReader([npu, gpu])
    reads = [probe.collect([LLM], 1000.0 + t).read for t in range(12)]
    assert (npu.reads, gpu.reads) == (3, 12)
    assert [t for t, r in enumerate(reads) if "npu_smi" in r] == [0, 5, 10]


def test_a_failing_backend_reports_an_error_and_drops_its_stale_devices():
    clock = FakeClock()
    nvml = FakeNvmlBackend(NVML, clock=clock)
    broken = Scripted("npu_smi", 1.0, [ProbeFailed("unrecognised npu-smi output: empty output")])
    probe = AccelReader([nvml, broken])
    res = probe.collect([LLM], clock.monotonic())
    assert res.errors == {"npu_smi": "ProbeFailed: unrecognised npu-smi output: empty output"}
    assert res.read == ("nvml",) and res.samples  # the other backend still reports


def test_after_a_failure_the_last_snapshot_is_not_reported_as_current():
    ok = AccelSnapshot("npu_smi", (), ())
    b = Scripted("npu_smi", 1.0, [ok, ProbeFailed("npu-smi info timed out after 5s"), ok])
    probe = AccelReader([b])
    probe.collect([LLM], 0.0)
    res = probe.collect([LLM], 1.0)
    assert (res.errors, res.devices, res.samples) == (
        {"npu_smi": "ProbeFailed: npu-smi info timed out after 5s"},
        {},
        [],
    )
    assert probe.collect([LLM], 2.0).errors == {}


def test_close_closes_every_backend():
    b = Scripted("npu_smi", 1.0, [EMPTY])
    AccelReader([b]).close()
    assert b.answers == []


# ------------------------------------------------------------------ make_backends: auto | off
def unavailable(why: str):
    def factory():
        raise BackendUnavailable(why)

    return factory


def test_off_skips_without_trying(caplog):
    tried: list[str] = []

    def factory(name: str):
        def build() -> AccelBackend:
            tried.append(name)
            raise BackendUnavailable(f"{name} must not be tried")

        return build

    cfg = AcceleratorsConfig(nvml="off", npu_smi="off")
    got = make_backends(
        cfg, FakeRunner(), logging.getLogger("t"), nvml_factory=factory("nvml"), npu_smi_factory=factory("npu")
    )
    assert (got, tried, caplog.records) == ([], [], [])


def test_auto_absent_logs_one_line_each_and_skips(caplog):
    caplog.set_level(logging.INFO)
    got = make_backends(
        AcceleratorsConfig(),
        FakeRunner(),
        logging.getLogger("t"),
        nvml_factory=unavailable("NVML: no NVIDIA driver on this host (NVML Shared Library Not Found)"),
        npu_smi_factory=unavailable("npu-smi: 'npu-smi' not found (accelerators.npu_smi_path)"),
        kmsg_factory=unavailable("no NVIDIA driver loaded under /: no Xid lines to read"),
    )
    assert got == []
    assert [r.getMessage() for r in caplog.records] == [
        "accelerators.nvml: NVML: no NVIDIA driver on this host (NVML Shared Library Not Found); probe disabled",
        "accelerators.kmsg: no NVIDIA driver loaded under /: no Xid lines to read; probe disabled",
        "accelerators.npu_smi: npu-smi: 'npu-smi' not found (accelerators.npu_smi_path); probe disabled",
    ]


def test_the_kernel_log_is_read_only_where_an_nvidia_driver_is_loaded(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "kmsg").write_text("")
    cfg = AcceleratorsConfig(nvml="off", npu_smi="off", kmsg_root=str(tmp_path))
    assert make_backends(cfg, FakeRunner(), logging.getLogger("t")) == []
    assert "no NVIDIA driver loaded" in caplog.records[0].getMessage()
    (tmp_path / "proc" / "driver" / "nvidia").mkdir(parents=True)
    got = make_backends(cfg, FakeRunner(), logging.getLogger("t"))
    assert [b.name for b in got] == ["kmsg"]
    got[0].close()


def test_auto_present_builds_the_backend(tmp_path):
    clock = FakeClock()
    fake = write_fake_npu_smi(tmp_path, {"devices": [{"npu": 0}]})
    cfg = AcceleratorsConfig(npu_smi_path=str(fake.path), npu_smi_timeout=7.0)
    got = make_backends(
        cfg, SubprocessRunner(), logging.getLogger("t"), nvml_factory=lambda: FakeNvmlBackend(NVML, clock=clock)
    )
    assert [b.name for b in got] == ["nvml", "npu_smi"]  # no NVIDIA driver here: no kernel-log backend
    npu = got[1]
    assert isinstance(npu, NpuSmiBackend) and (npu.path, npu.timeout) == (str(fake.path), 7.0)


def test_real_npu_smi_path_missing_is_one_line(caplog, tmp_path):
    caplog.set_level(logging.INFO)
    cfg = AcceleratorsConfig(nvml="off", kmsg="off", npu_smi_path=str(tmp_path / "npu-smi"))
    assert make_backends(cfg, SubprocessRunner(), logging.getLogger("t")) == []
    assert len(caplog.records) == 1 and "not found (accelerators.npu_smi_path)" in caplog.records[0].getMessage()


@pytest.mark.parametrize("bad", [ProbeFailed("boom"), BackendUnavailable("gone")])
def test_a_guardian_error_from_any_backend_never_escapes_collect(bad):
    probe = AccelReader([Scripted("nvml", 1.0, [bad])])
    assert list(probe.collect([LLM], 0.0).errors) == ["nvml"]


def test_an_unexpected_exception_from_a_backend_is_reported_not_raised():
    probe = AccelReader([Scripted("nvml", 1.0, [KeyError("bug")])])
    assert probe.collect([LLM], 0.0).errors == {"nvml": "unexpected KeyError: 'bug'"}


def test_a_tick_slightly_early_still_reads_a_backend_due_every_second():
    gpu = Scripted("nvml", 1.0, [AccelSnapshot("nvml", (), ())])
    probe = AccelReader([gpu])
    for t in (0.0, 0.95, 1.93, 2.5):
        probe.collect([LLM], t)
    assert gpu.reads == 3  # 0.0, 0.95, 1.93; 2.5 is too soon after 1.93


def test_what_a_backend_cannot_see_is_passed_on():
    clock = FakeClock()
    probe = AccelReader([FakeNvmlBackend(dict(NVML, xid_permission=False), clock=clock)])
    notes = probe.collect([LLM], clock.monotonic()).notes["nvml"]
    assert notes[0] == "XID events disabled on nvml:0: Insufficient Permissions"


# ------------------------------------------------------------------ the kernel log through the reader into the ledger
def kernel_log_with(tmp_path, record: str) -> KmsgBackend:
    """The kmsg backend over a root whose one GPU (by the driver's list) is 0000:3b:00."""
    (tmp_path / "dev").mkdir()
    (tmp_path / "proc" / "driver" / "nvidia" / "gpus" / "0000:3b:00.0").mkdir(parents=True)
    (tmp_path / "proc" / "uptime").write_text("100.0 1.0\n")
    (tmp_path / "dev" / "kmsg").write_text(record + "\n")
    return KmsgBackend(str(tmp_path))


XID_79 = "4,7,99000000,-;NVRM: Xid (PCI:{bus}): 79, pid=4242, name=python3, GPU has fallen off the bus."


@pytest.mark.parametrize(
    "bus, blocks, refused",
    [
        ("0000:3b:00", True, 0),  # the node's GPU: the server on it cannot be helped by a restart
        ("0000:aa:00", False, 1),  # no GPU of this node: counted, blocks nothing, no device appears
    ],
)
def test_a_kernel_xid_blocks_a_restart_only_on_a_gpu_of_this_node(tmp_path, bus, blocks, refused):
    reader = AccelReader([kernel_log_with(tmp_path, XID_79.format(bus=bus))])
    res = reader.collect([LLM], 0.0)
    ledger = DeviceFaults()
    ledger.fold(res, 0.0, 1.7e9, pid_owner=lambda pid: "llm" if pid == 4242 else None)
    assert bool(ledger.blocking("llm", 1.0)) is blocks
    assert ledger.devices() == (["pci:0000:3b:00"] if blocks else [])
    assert res.refused == {"kmsg": {"not_kernel": 0, "not_driver_line": 0, "unknown_device": refused}}
    reader.close()


def probe_parts(backends) -> ProbeParts:
    clock, proc = FakeClock(), ProcFS("/proc")
    seams = Seams(clock, proc, FakeHttp(), FakeRunner(), OsProcessControl(proc), accel_backends=backends)
    readings = Readings(device_faults=DeviceFaults())
    return ProbeParts(Config(node="n1"), seams, Tracker(600.0), SeriesStore(), readings, logging.getLogger("t"))


def test_refused_input_is_counted_since_start_and_logged_once_per_backend_and_reason(tmp_path, caplog):
    backend = kernel_log_with(tmp_path, "12,1,99000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=x, forged")
    probe = AccelProbe(probe_parts([backend]))
    with caplog.at_level(logging.WARNING):
        for t in (0.0, 1.0, 2.0):
            with open(tmp_path / "dev" / "kmsg", "a") as f:
                f.write(f"12,{t + 2:.0f},99000001,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=x, forged again\n")
            probe.fold(probe.reader.collect([LLM], t), t)
    assert probe.readings.accel is not None
    assert probe.readings.accel.refused["kmsg"]["not_kernel"] == 4
    refusals = [r for r in caplog.records if "input refused" in r.getMessage()]
    assert len(refusals) == 1 and "not_kernel" in refusals[0].getMessage()
    assert probe.readings.device_faults is not None and probe.readings.device_faults.devices() == []
