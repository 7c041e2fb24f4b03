"""accel_memory_leak: a steady rise in the target's accelerator memory after warm-up, with
no new load, fires; warm-up growth, one allocation step, noise and load-driven growth do not."""

from __future__ import annotations

from typing import Callable

import pytest

from vllm_guardian.config.schema_detectors import DetectorsConfig, MemoryLeakConfig
from vllm_guardian.detectors import DETECTORS, accel_memory_leak
from vllm_guardian.detectors.view import TargetState, TargetView
from vllm_guardian.model import Kind, ProcessInfo, ProcKey, Role, Sample, Severity, Target
from vllm_guardian.series import metrics as m
from vllm_guardian.series.store import SeriesStore
from vllm_guardian.testing.curves import curve

READY = 1000.0  # the target became ready at this monotonic time
T = "llm"
API = ProcessInfo(ProcKey(100, 1), 1, Role.API_SERVER, ("vllm", "serve"))
WORKER = ProcessInfo(ProcKey(200, 2), 100, Role.WORKER, ("VLLM::Worker_TP0",))
TARGET = Target(T, API.key, (API, WORKER), port=8000)
CFG = DetectorsConfig()
TOTAL = 80e9
MB = 1e6

LEAK_8 = {"curve": "linear", "start": 20e9, "rate": 8 * MB}


def state(now: float, ready: bool = True, ready_since: float | None = READY, api_alive: bool = True) -> TargetState:
    return TargetState(
        target=TARGET,
        now=now,
        ready=ready,
        ever_ready=True,
        api_alive=api_alive,
        gone_since=None,
        engine_alive=True,
        canary_in_flight_since=None,
        probe_interval=1.0,
        ready_since=ready_since,
    )


class Sim:
    """Feeds one sample every ``every`` seconds (relative to READY: NVML 1 s, npu-smi 5 s) and
    evaluates the detector every second, as the loop does."""

    every = 1.0
    phase = 0.0  # the backend reads at ready + phase + k * every

    def __init__(
        self,
        memory,
        running: Callable[[float], float] = lambda r: 2.0,
        total: float | None = TOTAL,
        cfg: DetectorsConfig = CFG,
        **state_kw,
    ) -> None:
        self.memory = memory if callable(memory) else curve(memory).value  # a curve spec or f(seconds)
        self.running, self.total, self.cfg, self.state_kw = running, total, cfg, state_kw
        self.store = SeriesStore(horizon=270.0, horizons=SeriesStore.memory_horizons(cfg))
        self.rel = -1.0

    def feed(self, rel: float) -> None:
        if (rel - self.phase) % self.every:
            return  # the backend is not due: the loop ticks, nothing is read
        t = READY + rel
        v = self.memory(rel)
        self.store.add(Sample(T, "p200", m.ACCEL_MEM, v, t))
        self.store.add(Sample(T, "", m.ACCEL_MEM, v, t))
        if self.total is not None:
            self.store.add(Sample(T, "", m.ACCEL_TOTAL, self.total, t))
        self.store.add(Sample(T, "", m.REQ_RUNNING, self.running(rel), t))
        self.rel = rel

    def evaluate(self):
        return accel_memory_leak.evaluate(TargetView(state(READY + self.rel, **self.state_kw), self.store), self.cfg)

    def at(self, rel: float):
        """Feed every second up to ``rel`` and evaluate once there."""
        r = self.rel + 1.0
        while r <= rel + 1e-9:
            self.feed(r)
            r += 1.0
        return self.evaluate()

    def run(self, until: float) -> list[tuple[float, object]]:
        """Evaluate every tick from ready to ``until``; the (time, finding) of every firing."""
        out = []
        r = self.rel + 1.0
        while r <= until + 1e-9:
            self.feed(r)
            f = self.evaluate()
            if f is not None:
                out.append((r, f))
            r += 1.0
        return out


# ------------------------------------------------------------------ positives
def test_registered_in_the_detector_table():
    assert DETECTORS[Kind.ACCEL_MEMORY_LEAK] is accel_memory_leak.evaluate


def test_steady_8_mb_per_s_after_warmup_fires_with_slope_fit_and_exhaustion():
    f = Sim(LEAK_8).at(500)
    assert (f.kind, f.target, f.confirmed, f.severity) == (Kind.ACCEL_MEMORY_LEAK, T, True, Severity.WARNING)
    s = f.signals
    assert s["slope_bytes_per_s"] == pytest.approx(8 * MB)
    assert s["fit_rising_share"] == 1.0 and s["fit_spearman_rho"] == 1.0
    assert s["current_bytes"] == pytest.approx(20e9 + 500 * 8 * MB)
    assert s["total_bytes"] == TOTAL
    assert s["projected_exhaustion_s"] == pytest.approx((TOTAL - s["current_bytes"]) / (8 * MB), rel=1e-6)
    assert (s["threshold_bytes_per_s"], s["window"], s["warmup"]) == (5e6, 90.0, 300.0)
    assert "8.0 MB/s" in f.summary


def test_names_the_process_whose_memory_grows():
    f = Sim(LEAK_8).at(500)
    assert (f.subject, f.signals["pid"], f.signals["role"]) == ("p200", 200, "worker")


def test_growth_from_the_first_second_after_ready_waits_for_the_longest_warmup():
    # never levelled off: indistinguishable from warm-up until 300 s, then 80 % of the 90 s window
    fired = Sim(LEAK_8).run(600)
    first = fired[0][0]
    assert 365 <= first <= 375
    assert len(fired) == 600 - first + 1  # and then on every tick


# onset (s after ready) → latest first finding (s after onset) at 8 MB/s; simulated time, not wall time
DETECTION = {
    "20 s after ready, once the curve has levelled off": (20, 180),
    "60 s after ready": (60, 90),
    "at steady state": (1000, 90),
}


@pytest.mark.parametrize("name", sorted(DETECTION))
def test_a_leak_after_the_curve_levelled_off_is_reported_within(name):
    onset, within = DETECTION[name]
    fired = Sim(dict(LEAK_8, after=onset)).run(onset + within)
    assert fired and fired[0][0] - onset <= within
    assert fired[0][0] - onset >= 30  # and not before the growth is sustained


def test_a_leak_starting_during_warmup_growth_is_reported_once_the_warmup_has_levelled_off():
    # warm-up rises 200 MB/s for 60 s and levels off; a leak starts 40 s later
    warmup = curve({"curve": "warmup", "start": 2e9, "value": 14e9, "duration": 60})

    def memory(r: float) -> float:
        return warmup.value(r) + 8 * MB * max(0.0, r - 100)

    fired = Sim(memory).run(280)
    assert fired and fired[0][0] - 100 <= 180


def test_noisy_leak_still_fires():
    fired = Sim(dict(LEAK_8, noise=50 * MB, seed=4, after=600)).run(900)
    assert fired and fired[0][0] <= 720


def test_staircase_leak_of_small_steps_fires():
    fired = Sim(lambda r: 20e9 + 160 * MB * (r // 20), total=None).run(500)  # 160 MB every 20 s
    assert fired and fired[0][0] <= 400


def test_projected_exhaustion_is_null_without_a_total():
    f = Sim(LEAK_8, total=None).at(500)
    assert (f.signals["total_bytes"], f.signals["projected_exhaustion_s"]) == (None, None)
    assert "full in" not in f.summary


def test_critical_when_the_devices_fill_within_ten_minutes():
    f = Sim(LEAK_8, total=20e9 + 500 * 8 * MB + 2e9).at(500)
    assert f.severity is Severity.CRITICAL and f.signals["projected_exhaustion_s"] == pytest.approx(250, rel=0.01)


def test_leak_under_steady_fluctuating_load_still_fires():
    f = Sim(LEAK_8, running=lambda r: (3, 1, 4, 1, 5, 2, 6, 2)[int(r) % 8]).at(500)
    assert f is not None


def test_threshold_comes_from_config():
    cfg = DetectorsConfig(accel_memory_leak=MemoryLeakConfig(slope_bytes_per_s=10 * MB))
    assert Sim(LEAK_8, cfg=cfg).at(500) is None


# ------------------------------------------------------------------ required negatives
NEGATIVES = {
    "warm-up growth that levels off": {"curve": "warmup", "start": 2e9, "value": 60e9, "duration": 290},
    "warm-up growth levelling off just after warm-up": {
        "curve": "warmup",
        "start": 2e9,
        "value": 62e9,
        "duration": 330,
    },
    "single 2 GB allocation step": {"curve": "step", "before": 20e9, "after": 22e9, "at": 700},
    "single 8 GB step with noise": {"curve": "step", "before": 20e9, "after": 28e9, "at": 900, "noise": 100 * MB},
    "noisy flat": {"curve": "noisy", "value": 20e9, "noise": 200 * MB, "seed": 3},
    "flat": 20e9,
    "slow growth below threshold": {"curve": "linear", "start": 20e9, "rate": 3 * MB},
    "warm-up that decelerates (tau 30 s)": {"curve": "approach", "start": 2e9, "value": 60e9, "tau": 30},
    "warm-up that decelerates (tau 60 s)": {"curve": "approach", "start": 2e9, "value": 60e9, "tau": 60},
    "warm-up that decelerates (tau 120 s)": {"curve": "approach", "start": 2e9, "value": 30e9, "tau": 120},
    "noisy warm-up that decelerates": {
        "curve": "approach",
        "start": 2e9,
        "value": 40e9,
        "tau": 45,
        "noise": 200 * MB,
        "seed": 5,
    },
}


@pytest.mark.parametrize("every", [1.0, 5.0], ids=["nvml-1s", "npu-smi-5s"])
@pytest.mark.parametrize("name", sorted(NEGATIVES))
def test_no_false_positive_on_any_tick(name, every):
    sim = Sim(NEGATIVES[name])
    sim.every = every
    assert sim.run(1500) == []


@pytest.mark.parametrize("name", sorted(DETECTION))
def test_a_backend_sampling_every_5_s_opens_at_the_same_windows_as_one_sampling_every_second(name):
    onset, within = DETECTION[name]
    opened = []
    for every in (1.0, 5.0):
        sim = Sim(dict(LEAK_8, after=onset))
        sim.every = every
        fired = sim.run(onset + within)
        assert fired, f"no finding sampling every {every:g}s"
        opened.append(fired[0][0])
    assert abs(opened[1] - opened[0]) <= 5.0  # one sample of the slower backend


SLOW_READS = [(every, phase) for every in (5, 6) for phase in range(every)]


@pytest.mark.parametrize("every, phase", SLOW_READS, ids=[f"every-{e}s-phase-{p}s" for e, p in SLOW_READS])
def test_a_slow_backend_opens_where_a_1_s_one_does_whatever_the_phase_of_its_reads(every, phase):
    # a leak 15 s after ready, the curve flat until then: the levelled-off stretch is the same curve
    # whenever the slow backend happens to read it (it waited for the 300 s cap in 2 runs of 3)
    opened = []
    for pace, at in ((1.0, 0.0), (float(every), float(phase))):
        sim = Sim(dict(LEAK_8, after=15))
        sim.every, sim.phase = pace, at
        sim.rel = -pace - 1.0  # reading since before ready, as a backend does
        fired = sim.run(15 + 180)
        assert fired, f"no finding reading every {pace:g}s at ready + {at:g}s + k * {pace:g}s"
        opened.append(fired[0][0])
    assert abs(opened[1] - opened[0]) <= every


@pytest.mark.parametrize("step_at", [460, 500, 520, 540, 560, 580])
def test_a_step_anywhere_in_the_window_is_not_a_leak(step_at):
    sim = Sim({"curve": "step", "before": 20e9, "after": 30e9, "at": step_at})
    assert sim.at(600) is None


def test_growth_that_tracks_load_is_not_a_leak():
    def running(r):
        return 2 + max(0.0, r - 600) / 10

    def memory(r):
        return 20e9 + 50 * MB * (running(r) - 2)

    assert Sim(memory, running=running).run(1200) == []


# ------------------------------------------------------------------ when it does not judge
def test_not_during_warmup_even_when_rising_fast():
    assert Sim({"curve": "linear", "start": 2e9, "rate": 100 * MB}).at(299) is None


@pytest.mark.parametrize(
    "kw",
    [{"ready": False}, {"ready_since": None}, {"api_alive": False}],
    ids=["not ready", "ready_since unknown", "api server gone"],
)
def test_not_judged_without_a_ready_target(kw):
    assert Sim(LEAK_8, **kw).at(500) is None


def test_stale_samples_are_not_judged():
    sim = Sim(LEAK_8)
    sim.at(500)
    sim.rel = 530  # no sample for 30 s: the backend stopped reporting
    assert sim.evaluate() is None


def test_too_little_of_the_window_covered():
    sim = Sim(LEAK_8)
    for r in range(440, 501):  # only the last 60 s
        sim.feed(r)
    assert sim.evaluate() is None


def test_a_leak_found_inside_the_longest_warmup_stays_found_past_it():
    fired = Sim(dict(LEAK_8, after=20)).run(500)
    first = fired[0][0]
    assert [r for r, _ in fired] == [float(r) for r in range(int(first), 501)]  # no gap at 300 s
