"""accel_memory_leak opens on every backend at its real sampling pace (NVML 1 s, npu-smi 5 s),
at the same windows as host_memory_leak on the same curve sampled every tick.

The real backends over their fakes (``FakeNvmlBackend``; the fake ``npu-smi`` executable through
the real subprocess runner), the real ``AccelReader`` (each backend read at most once per its
interval), the real series store and detectors; the loop ticks every second on a fake clock.
"""

from __future__ import annotations

import pytest

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.detectors import accel_memory_leak, host_memory_leak
from vllm_guardian.detectors.view import TargetState, TargetView
from vllm_guardian.host.accel import MIB
from vllm_guardian.host.accel.npu_smi import NpuSmiBackend
from vllm_guardian.host.runner import SubprocessRunner
from vllm_guardian.model import ProcessInfo, ProcKey, Role, Sample, Target
from vllm_guardian.probes.accel import AccelReader
from vllm_guardian.series import metrics as m
from vllm_guardian.series.store import SeriesStore
from vllm_guardian.testing.clock import FakeClock
from vllm_guardian.testing.fake_npu_smi import write_fake_npu_smi
from vllm_guardian.testing.fake_nvml import FakeNvmlBackend

CFG = DetectorsConfig()
READY = 1000.0
ONSET = 20.0  # the leak starts this long after the target became ready (the case)
RATE_MIB = 8  # MiB/s
BASE_MIB = 30000
WORKER_PID = 4242
API = ProcessInfo(ProcKey(100, 1000), 1, Role.API_SERVER, ("vllm", "serve"))
WORKER = ProcessInfo(ProcKey(WORKER_PID, 42420), 100, Role.WORKER, ("VLLM::Worker_TP0",))
TARGET = Target("llm", API.key, (API, WORKER), port=8000)
LEAK_MIB = {"curve": "linear", "start": BASE_MIB, "rate": RATE_MIB, "after": ONSET}


def state(now: float) -> TargetState:
    return TargetState(TARGET, now, True, True, True, None, True, None, probe_interval=1.0, ready_since=READY)


def first_opening(store: SeriesStore, clock: FakeClock, sample, detector, until: float) -> float | None:
    """Tick every second from ready: sample (the backend decides whether it is due), evaluate."""
    while clock.monotonic() - READY <= until:
        now = clock.monotonic()
        store.extend(sample(now))
        if detector(TargetView(state(now), store), CFG) is not None:
            return now - READY - ONSET
        clock.advance(1.0)
    return None


def host_reference() -> float | None:
    """host_memory_leak on the same curve, RSS read every tick (the procfs probe's pace)."""
    clock, store = FakeClock(READY), SeriesStore(horizons=SeriesStore.memory_horizons(CFG))

    def rss(now: float) -> list[Sample]:
        mib = BASE_MIB + RATE_MIB * max(0.0, now - READY - ONSET)
        return [
            Sample("llm", "p100", m.PROC_RSS, 1e9, now),
            Sample("llm", f"p{WORKER_PID}", m.PROC_RSS, mib * MIB, now),
        ]

    return first_opening(store, clock, rss, host_memory_leak.evaluate, 300)


def nvml_reader(tmp_path, clock: FakeClock) -> tuple[AccelReader, object]:
    scenario = {
        "t0": READY,
        "devices": [
            {
                "memory_total": 80e9,
                "processes": [
                    {"pid": WORKER_PID, "memory": {**LEAK_MIB, "start": BASE_MIB * MIB, "rate": RATE_MIB * MIB}}
                ],
            }
        ],
    }
    return AccelReader([FakeNvmlBackend(scenario, clock=clock, xid=False)]), None


def npu_smi_reader(tmp_path, clock: FakeClock) -> tuple[AccelReader, object]:
    scenario = {
        "layout": "a2",
        "devices": [{"npu": 0, "chip": 0}],
        "processes": [{"npu": 0, "chip": 0, "pid": WORKER_PID, "memory_mb": LEAK_MIB}],
    }
    fake = write_fake_npu_smi(tmp_path, scenario)
    backend = NpuSmiBackend(SubprocessRunner(), str(fake.path), timeout=30.0, usages_interval=None)
    return AccelReader([backend]), fake


@pytest.mark.parametrize("make_reader, interval", [(nvml_reader, 1.0), (npu_smi_reader, 5.0)], ids=["nvml", "npu-smi"])
def test_an_accelerator_leak_opens_at_the_host_leak_windows_whatever_the_backend_pace(tmp_path, make_reader, interval):
    clock = FakeClock(READY)
    reader, fake = make_reader(tmp_path, clock)
    assert reader.backends[0].interval == interval  # its real sampling pace
    store = SeriesStore(horizons=SeriesStore.memory_horizons(CFG))

    def sample(now: float) -> list[Sample]:
        if fake is not None:
            fake.set_time(now - READY)  # the fake executable's own clock
        res = reader.collect([TARGET], now)
        assert res.errors == {}
        return list(res.samples)

    accel = first_opening(store, clock, sample, accel_memory_leak.evaluate, 300)
    host = host_reference()
    assert host is not None and accel is not None, (host, accel)
    print(
        f"\n{reader.backends[0].name} every {interval:g}s: onset -> accel_memory_leak {accel:.0f}s (host {host:.0f}s)"
    )
    assert abs(accel - host) <= interval + 1.0  # the same windows, give or take one sample
