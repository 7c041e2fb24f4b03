"""Any probe that follows the protocol is run, folded, timed and counted the same way."""

from __future__ import annotations

import logging
import threading

from vllm_guardian.state.episodes import EpisodeLog
from vllm_guardian.model import Sample
from vllm_guardian.state.async_runner import AsyncRunner
from vllm_guardian.probes.base import Folded, Job, Seen
from vllm_guardian.probes.scheduler import ProbeScheduler
from vllm_guardian.probes.table import PROBE_TABLE, probe_names
from vllm_guardian.state.selfstats import SelfStats
from vllm_guardian.series import SeriesStore


class Scripted:
    """A probe whose jobs and folds the test scripts: one target, one job per call."""

    def __init__(self, name="gates", inline=False, run=lambda: 1.0, timeout=5.0):
        self.name, self.inline, self._run, self.timeout = name, inline, run, timeout
        self.started: list[float] = []
        self.seen: list[Seen] = []

    def jobs(self, now, seen):
        self.seen.append(seen)
        return [Job("llm", self._run, self.timeout, on_start=self.started.append)]

    def fold(self, result, now):
        if result == "bad":
            return Folded(failed={"llm:gates": "wrong answer"})
        return Folded([Sample("llm", "", "gates.score", float(result), now)], cleared=("llm:gates",))

    def close(self):
        pass


class World:
    def __init__(self, *probes):
        self.runner = AsyncRunner(2)
        self.stats = SelfStats.for_probes(p.name for p in probes)
        self.episodes = EpisodeLog(logging.getLogger("test-probes"))
        self.series = SeriesStore()
        self.s = ProbeScheduler(probes, self.runner, self.stats, self.episodes, self.series)

    def settle(self, now):
        self.runner.wait_idle(5)
        self.s.collect(now)


def test_the_table_names_every_probe_once_and_the_counters_start_with_discovery():
    assert probe_names() == ("procfs", "vllm_http", "canary", "server_state", "vllm_state", "accel", "gates")
    assert len(set(probe_names())) == len(PROBE_TABLE)
    assert list(SelfStats.for_probes(probe_names()).probes) == ["discovery", *probe_names()]


def test_an_off_loop_probe_is_submitted_then_folded_into_the_series_on_a_later_tick():
    p = Scripted(run=lambda: 0.75)
    w = World(p)
    w.s.schedule(1.0, Seen(suspected=frozenset({"llm"})))
    assert p.started == [1.0] and p.seen[0].suspected == {"llm"}
    w.settle(2.0)
    assert w.series.latest("llm", "", "gates.score") == (2.0, 0.75)
    assert w.stats.probes["gates"].runs == 1 and w.stats.probes["gates"].failures == 0
    w.runner.shutdown()


def test_a_job_still_in_flight_is_not_started_again_and_its_on_start_is_not_called():
    gate = threading.Event()
    p = Scripted(run=lambda: gate.wait(5) and 1.0)
    w = World(p)
    w.s.schedule(1.0, Seen())
    w.s.schedule(2.0, Seen())
    assert p.started == [1.0]
    gate.set()
    w.settle(3.0)
    w.runner.shutdown()


def test_a_fold_that_reports_a_failure_is_counted_and_logged_once_per_episode(caplog):
    p = Scripted(run=lambda: "bad")
    w = World(p)
    with caplog.at_level(logging.WARNING, logger="test-probes"):
        for now in (1.0, 2.0, 3.0):
            w.s.schedule(now, Seen())
            w.settle(now + 0.5)
    assert w.stats.probes["gates"].failures == 3
    assert sum("wrong answer" in r.getMessage() for r in caplog.records) == 1
    assert "llm:gates" in w.episodes.current("llm:")
    w.runner.shutdown()


def test_a_job_that_raises_is_counted_as_a_crash_of_its_probe_on_its_target():
    p = Scripted(run=lambda: 1 / 0)
    w = World(p)
    w.s.schedule(1.0, Seen())
    w.settle(2.0)
    assert w.stats.probes["gates"].failures == 1
    assert "ZeroDivisionError" in w.episodes.current()["llm:gates"]
    w.runner.shutdown()


class FoldRaises(Scripted):
    def fold(self, result, now):
        raise RecursionError("maximum recursion depth exceeded while decoding a JSON array")


def test_a_fold_that_raises_is_counted_as_a_failure_of_its_probe_and_the_tick_goes_on():
    p = FoldRaises()
    w = World(p)
    w.s.schedule(1.0, Seen())
    w.settle(2.0)  # does not raise into the loop
    assert w.stats.probes["gates"].failures == 1
    assert "fold crashed: RecursionError" in w.episodes.current()["llm:gates"]
    w.runner.shutdown()


def test_an_inline_probe_whose_fold_raises_does_not_raise_into_the_loop():
    p = FoldRaises(name="procfs", inline=True)
    w = World(p)
    w.s.run_inline(1.0, Seen())
    assert w.stats.probes["procfs"].failures == 1


def test_an_inline_probe_runs_on_the_loop_thread_and_a_slow_run_counts_an_overrun():
    ran_on: list[threading.Thread] = []

    def run() -> float:
        ran_on.append(threading.current_thread())
        return 1.0

    p = Scripted(name="fast", inline=True, run=run, timeout=0.0)
    w = World(p)
    w.s.run_inline(1.0, Seen())
    assert ran_on == [threading.current_thread()]
    assert w.stats.probes["fast"].runs == 1 and w.stats.probes["fast"].overruns == 1
    assert w.series.latest("llm", "", "gates.score") == (1.0, 1.0)
    w.runner.shutdown()


def test_an_off_loop_job_past_its_timeout_counts_one_overrun():
    gate = threading.Event()
    p = Scripted(run=lambda: gate.wait(5) and 1.0, timeout=1.0)
    w = World(p)
    w.s.schedule(10.0, Seen())
    w.s.collect(10.5)
    w.s.collect(11.5)
    w.s.collect(12.5)
    assert w.stats.probes["gates"].overruns == 1
    gate.set()
    w.settle(13.0)
    w.runner.shutdown()


def test_a_step_a_probe_took_for_an_incident_is_handed_on_to_be_recorded():
    from vllm_guardian.model import Action

    class Diagnosis(Scripted):
        def fold(self, result, now):
            return Folded(actions=[("01INC", Action("diagnosis", "ok", 1000.0, "engine thread in a Python loop"))])

    recorded = []
    p = Diagnosis()
    w = World(p)
    w.s.record = lambda incident_id, action: recorded.append((incident_id, action.name, action.detail))
    w.s.schedule(1.0, Seen())
    w.settle(2.0)
    assert recorded == [("01INC", "diagnosis", "engine thread in a Python loop")]
    w.runner.shutdown()
