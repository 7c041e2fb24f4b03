"""Runs the probes of the table the same way for every probe: the loop's side of ``Probe``.

``run_inline`` runs the inline probes' jobs on the loop thread; ``schedule`` submits the other
probes' jobs to the ``AsyncRunner`` (one in flight per ``(probe.name, job.subject)``) with their
fold attached; ``collect`` hands every finished job back to what it was submitted with (a
probe's fold, evidence, a remediation step) and counts overruns. Every run is timed and
counted under the probe's name; a probe that raises is counted and logged once per episode,
never taken down with the loop. Samples go to the series store; a target whose samples it
first drops (its series cap) is logged once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial

from vllm_guardian.state.episodes import EpisodeLog
from vllm_guardian.model import Action
from vllm_guardian.state.selfstats import SelfStats
from vllm_guardian.series import SeriesStore
from vllm_guardian.state.async_runner import AsyncRunner, Done
from vllm_guardian.probes.base import Folded, Job, Probe, Seen


def episode_key(probe: Probe, job: Job) -> str:
    """Where a crash of this job is logged: ``<target>:<probe>``, or the probe's name."""
    return f"{job.subject}:{probe.name}" if job.subject else probe.name


class ProbeScheduler:
    def __init__(
        self,
        probes: Sequence[Probe],
        runner: AsyncRunner,
        stats: SelfStats,
        episodes: EpisodeLog,
        series: SeriesStore,
        record: Callable[[str, Action], None] | None = None,
    ) -> None:
        self.probes = list(probes)
        self.runner = runner
        self.stats = stats
        self.episodes = episodes
        self.series = series
        self.record = record  # records a probe's step on an incident (Folded.actions)

    def replace_probes(self, probes: Sequence[Probe]) -> None:
        """A config reload: the probes rebuilt from the new config (their counters stay)."""
        self.probes = list(probes)

    def run_inline(self, now: float, seen: Seen) -> None:
        for probe in self.probes:
            if probe.inline:
                for job in probe.jobs(now, seen):
                    self._run_now(probe, job, now)

    def schedule(self, now: float, seen: Seen) -> None:
        for probe in self.probes:
            if probe.inline:
                continue
            for job in probe.jobs(now, seen):
                key = (probe.name, job.subject)
                started = not self.runner.busy(key) and self.runner.submit(
                    key, job.run, deadline=now + job.timeout, on_done=partial(self._done, probe, job)
                )
                if started and job.on_start is not None:
                    job.on_start(now)

    def collect(self, now: float) -> None:
        for done in self.runner.collect():
            if done.on_done is not None:
                done.on_done(done, now)
        for key in self.runner.overruns(now):
            st = self.stats.probes.get(key[0]) if isinstance(key, tuple) else None
            if st is not None:
                st.overruns += 1

    def close(self) -> None:
        for probe in self.probes:
            probe.close()

    def _run_now(self, probe: Probe, job: Job, now: float) -> None:
        st = self.stats.probes[probe.name]
        t0 = time.perf_counter()
        try:
            result = job.run()
        except Exception as e:  # noqa: BLE001 - a broken probe must not kill the loop: counted, logged
            st.failures += 1
            self.episodes.fail(episode_key(probe, job), f"{type(e).__name__}: {e}", now)
            return
        finally:
            st.record(time.perf_counter() - t0)
            if st.last_duration_s > job.timeout:
                st.overruns += 1
        self._fold(probe, job, result, now)

    def _done(self, probe: Probe, job: Job, done: Done, now: float) -> None:
        st = self.stats.probes[probe.name]
        st.record(done.duration)
        if done.error is not None:  # a bug in a probe job: count it, keep going
            st.failures += 1
            self.episodes.fail(episode_key(probe, job), f"probe crashed: {done.error!r}", now)
            return
        self._fold(probe, job, done.result, now)

    def _fold(self, probe: Probe, job: Job, result: object, now: float) -> None:
        """A fold that raises (a bug, or input it did not expect) fails its probe, not the tick."""
        try:
            folded = probe.fold(result, now)
        except Exception as e:  # noqa: BLE001 - detection and actions still run this tick: counted, logged
            self.stats.probes[probe.name].failures += 1
            self.episodes.fail(episode_key(probe, job), f"fold crashed: {type(e).__name__}: {e}", now)
            return
        self._apply(probe, folded, now)

    def _apply(self, probe: Probe, folded: Folded, now: float) -> None:
        for target in self.series.extend(folded.samples):  # once per target: counted in status after
            self.episodes.log.warning(
                "%s: the series store holds %d series of this target's processes, threads and engines; "
                "samples that would open more are dropped (counted in status: metrics_dropped.series)",
                target,
                self.series.max_series,
            )
        for key, message in folded.failed.items():
            self.stats.probes[probe.name].failures += 1
            self.episodes.fail(key, message, now)
        for key, message in folded.degraded.items():
            self.episodes.fail(key, message, now)
        for key in folded.cleared:
            self.episodes.ok(key)
        if self.record is not None:
            for incident_id, action in folded.actions:
                self.record(incident_id, action)
