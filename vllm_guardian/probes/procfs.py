"""The procfs probe: per-process and per-thread CPU, context switches, state and syscall.

Reads through ``vllm_guardian.host.procfs.ProcFS`` (the seam: a proc root and an opener).
Two stages: every ``probes.procfs.interval``, each process's ``stat`` (CPU ticks, RSS,
state — and its starttime, so a reused pid is seen as gone); per-thread files
(``task/<tid>/stat``, ``status``, ``syscall``, ``schedstat``; ``wchan`` when suspected) only
for processes that are hot, whose main thread wants a core (its ``schedstat``: time on a CPU +
time waiting for one, at least ``hot_cpu_ratio``; a spinner starved of CPU on a saturated node
reads cool by its CPU share: a data-parallel rank spinning beside a busy sibling got 7-59 % of a
core on the 2-core test machine), or of a target that is suspected — and in a hot process only for
threads whose ``schedstat`` says they can be hot (the rest cost one small read: a busy engine
has one or two hot threads among ~75). A hot thread of an API-server process also has its
``task/<tid>/io`` read (its syscall count: an event loop serving makes syscalls, a spin makes
none), and an API-server process's main thread gives its time on a CPU every tick (from the
``schedstat`` read anyway: an event loop that serves runs, a blocked one does not); nothing of
the kind is read for other processes. Rates need two
readings: the first reading of a process or thread yields no rate (absent,
never 0). Context-switch counts come from each thread's own ``status``
(``/proc/<pid>/status`` is the main thread only).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

from vllm_guardian.config.schema import ProcfsProbeConfig
from vllm_guardian.errors import AccessDenied, ProbeFailed, TargetGone
from vllm_guardian.host.procfs_parse import SchedStat
from vllm_guardian.state.vllm_states import serves_grpc
from vllm_guardian.model import ProcKey, Role, Sample, Target, Subject
from vllm_guardian.series import metrics as m
from vllm_guardian.state.readings import ProcessState, ThreadState
from vllm_guardian.probes.base import Folded, Job, ProbeParts, Readings, Schedule, Seen


@dataclass
class ProcfsResult:
    samples: list[Sample] = field(default_factory=list)
    processes: dict[ProcKey, ProcessState] = field(default_factory=dict)
    gone: set[ProcKey] = field(default_factory=set)
    denied: list[str] = field(default_factory=list)  # what could not be read, once per kind of file


class ProcfsReader:
    """Reads the processes of the targets; keeps the previous counters to turn them into rates."""

    def __init__(self, procfs, cfg: ProcfsProbeConfig, page_size: int | None = None) -> None:
        self.procfs = procfs
        self.cfg = cfg
        self.page_size = page_size or os.sysconf("SC_PAGE_SIZE")
        self._proc_prev: dict[ProcKey, tuple[float, int]] = {}
        self._thread_prev: dict[tuple[ProcKey, int], tuple[float, int, int | None, int | None, int | None]] = {}
        self._followed: set[ProcKey] = set()
        self._leader_prev: dict[ProcKey, tuple[float, int, int]] = {}  # main thread: (t, run ns, wait ns)
        self._screen_prev: dict[tuple[ProcKey, int], tuple[float, int, int]] = {}  # (t, run ns, wait ns)
        self._screened: dict[tuple[ProcKey, int], SchedStat | None] = {}  # this collect's screen reads

    def collect(self, targets: Iterable[Target], suspected: set[str], now: float) -> ProcfsResult:
        res = ProcfsResult()
        seen_procs: set[ProcKey] = set()
        seen_threads: set[tuple[ProcKey, int]] = set()
        for target in targets:
            deep = target.name in suspected
            for proc in target.processes:
                state = self._read_process(target, proc, deep, now, res, seen_threads)
                if state is not None:
                    seen_procs.add(proc.key)
                    res.processes[proc.key] = state
        # forget counters of processes/threads no longer watched (bounded memory)
        for k in [k for k in self._proc_prev if k not in seen_procs]:
            del self._proc_prev[k]
        self._followed &= seen_procs
        for k in [k for k in self._leader_prev if k not in seen_procs]:
            del self._leader_prev[k]
        for tk in [tk for tk in self._thread_prev if tk not in seen_threads]:
            del self._thread_prev[tk]
        for tk in [tk for tk in self._screen_prev if tk not in seen_threads]:
            del self._screen_prev[tk]
        self._screened.clear()
        return res

    # ------------------------------------------------------------------ helpers
    def _read_process(self, target, proc, deep, now, res, seen_threads) -> ProcessState | None:
        key = proc.key
        try:
            st = self.procfs.stat(key.pid)
        except TargetGone:
            res.gone.add(key)
            return None
        except AccessDenied as e:
            res.denied.append(f"stat: {e}")
            return None
        if st.starttime != key.starttime or st.state in ("Z", "X"):
            res.gone.add(key)  # pid reused by another process, or exited (zombie)
            return None
        subject = Subject(key.pid).key
        ticks = st.utime + st.stime
        cpu = self._rate(self._proc_prev.get(key), now, ticks)
        self._proc_prev[key] = (now, ticks)
        rss = st.rss_pages * self.page_size
        res.samples.append(Sample(target.name, subject, m.PROC_RSS, float(rss), now))
        res.samples.append(Sample(target.name, subject, m.PROC_THREADS, float(st.num_threads), now))
        if cpu is not None:
            res.samples.append(Sample(target.name, subject, m.PROC_CPU, cpu, now))
        leader = self._leader_schedstat(key) if proc.role == Role.API_SERVER else None
        if leader is not None:  # does its event loop run at all? (read anyway to see if it wants a core)
            res.samples.append(Sample(target.name, subject, m.PROC_MAIN_RUN_S, leader.run_ns / 1e9, now))
        threads: tuple[ThreadState, ...] = ()
        hot = cpu is not None and cpu >= self.cfg.hot_cpu_ratio
        # hysteresis: keep following a process we followed until it cools to half the threshold
        warm = key in self._followed and cpu is not None and cpu >= self.cfg.hot_cpu_ratio / 2
        if deep or hot or warm or self._wants_a_core(key, now, leader):
            grpc = serves_grpc(target)  # no /metrics: a hot thread's syscalls are its progress (busy_loop)
            if grpc:
                self._read_process_syscalls(target, key, now, res)
            threads = self._read_threads(
                target, key, deep, now, res, seen_threads, proc.role == Role.API_SERVER or grpc
            )
            self._followed.add(key)
        else:
            self._followed.discard(key)
        return ProcessState(key, st.state, cpu, rss, st.num_threads, threads)

    def _read_threads(self, target, key, deep, now, res, seen_threads, api=False) -> tuple[ThreadState, ...]:
        try:
            tids = self.procfs.tids(key.pid)
        except (TargetGone, AccessDenied):
            return ()
        out = []
        for tid in tids:
            if not deep and self._cool(target, key, tid, now, res, seen_threads):
                continue
            try:
                tst = self.procfs.thread_stat(key.pid, tid)
            except (TargetGone, AccessDenied):
                continue  # the thread exited between listdir and read
            vol = nonvol = None
            try:
                status = self.procfs.thread_status(key.pid, tid)
                vol, nonvol = status.voluntary_ctxt_switches, status.nonvoluntary_ctxt_switches
            except TargetGone:
                continue
            except AccessDenied as e:
                res.denied.append(f"task status: {e}")
            syscall: str | None = None
            running_flag: float | None = None
            try:
                sc = self.procfs.thread_syscall(key.pid, tid)
                if sc.running:
                    syscall, running_flag = "running", 1.0
                else:
                    syscall = "blocked" if sc.blocked_outside_syscall else str(sc.nr)
                    running_flag = 0.0
            except TargetGone:
                continue
            except AccessDenied as e:
                res.denied.append(f"syscall (needs CAP_SYS_PTRACE): {e}")
            sched = self._screened.pop((key, tid), None)  # read a moment ago by the screen
            if sched is None:
                try:
                    sched = self.procfs.thread_schedstat(key.pid, tid)
                except (TargetGone, AccessDenied, ProbeFailed):
                    sched = None  # optional: kernels without schedstat; the thread's exit shows elsewhere
            wchan = None
            if deep:
                try:
                    wchan = self.procfs.thread_wchan(key.pid, tid)
                except (TargetGone, AccessDenied):
                    wchan = None
            tkey = (key, tid)
            seen_threads.add(tkey)
            ticks = tst.utime + tst.stime
            demand_ns = None if sched is None else sched.run_ns + sched.wait_ns
            prev = self._thread_prev.get(tkey)
            cpu = self._rate(prev[:2] if prev else None, now, ticks)
            vol_rate = nonvol_rate = demand = None
            if prev is not None and now > prev[0]:
                dt = now - prev[0]
                if vol is not None and prev[2] is not None:
                    vol_rate = max(0, vol - prev[2]) / dt
                if nonvol is not None and prev[3] is not None:
                    nonvol_rate = max(0, nonvol - prev[3]) / dt
                if demand_ns is not None and prev[4] is not None:
                    demand = max(0, demand_ns - prev[4]) / 1e9 / dt
            self._thread_prev[tkey] = (now, ticks, vol, nonvol, demand_ns)
            subject = Subject(key.pid, tid).key
            if cpu is not None:
                res.samples.append(Sample(target.name, subject, m.THREAD_CPU, cpu, now))
            if vol_rate is not None:
                res.samples.append(Sample(target.name, subject, m.THREAD_VOL_RATE, vol_rate, now))
            if nonvol_rate is not None:
                res.samples.append(Sample(target.name, subject, m.THREAD_NONVOL_RATE, nonvol_rate, now))
            if running_flag is not None:
                res.samples.append(Sample(target.name, subject, m.THREAD_RUNNING, running_flag, now))
            if demand is not None:
                res.samples.append(Sample(target.name, subject, m.THREAD_DEMAND, demand, now))
            if api and max(cpu or 0.0, demand or 0.0) >= self.cfg.hot_cpu_ratio:
                self._read_syscalls(target, key, tid, now, res)
            out.append(ThreadState(tid, tst.comm, tst.state, cpu, vol_rate, nonvol_rate, demand, syscall, wchan))
        return tuple(out)

    def _read_syscalls(self, target, key: ProcKey, tid: int, now: float, res) -> None:
        """A hot API-server thread's syscall count (``task/<tid>/io``); absent when unreadable."""
        try:
            io = self.procfs.thread_io(key.pid, tid)
        except (TargetGone, ProbeFailed):
            return
        except AccessDenied as e:
            res.denied.append(f"task io (needs the same uid or CAP_SYS_PTRACE): {e}")
            return
        res.samples.append(Sample(target.name, Subject(key.pid, tid).key, m.THREAD_SYSCALLS, float(io.syscalls), now))

    def _read_process_syscalls(self, target, key: ProcKey, now: float, res) -> None:
        """A hot process's syscall count (``<pid>/io``, all its threads); absent when unreadable."""
        try:
            io = self.procfs.process_io(key.pid)
        except (TargetGone, ProbeFailed):
            return
        except AccessDenied as e:
            res.denied.append(f"io (needs the same uid or CAP_SYS_PTRACE): {e}")
            return
        res.samples.append(Sample(target.name, Subject(key.pid).key, m.PROC_SYSCALLS, float(io.syscalls), now))

    def _leader_schedstat(self, key: ProcKey) -> SchedStat | None:
        """The main thread's ``schedstat``; None when unreadable (gone, denied, no schedstat)."""
        try:
            return self.procfs.thread_schedstat(key.pid, key.pid)
        except (TargetGone, AccessDenied, ProbeFailed):
            return None

    def _wants_a_core(self, key: ProcKey, now: float, sched: SchedStat | None = None) -> bool:
        """Does the process's main thread want a core (on a CPU + waiting for one, since the last
        reading, at least ``hot_cpu_ratio``)? One small read (none when ``sched`` was read this
        tick already); False when unknown."""
        if sched is None:
            sched = self._leader_schedstat(key)
        if sched is None:
            return False
        prev = self._leader_prev.get(key)
        self._leader_prev[key] = (now, sched.run_ns, sched.wait_ns)
        if prev is None or now <= prev[0]:
            return False
        wanted = max(0, sched.run_ns - prev[1]) + max(0, sched.wait_ns - prev[2])
        return wanted / 1e9 / (now - prev[0]) >= self.cfg.hot_cpu_ratio

    def _cool(self, target, key: ProcKey, tid: int, now: float, res, seen_threads) -> bool:
        """The screen: is this thread of a hot process too idle to be worth its four files?

        Reads only its ``schedstat`` (time on a CPU + time waiting for one: what it wants, even
        starved); below half of ``hot_cpu_ratio`` since the last screen, it is cool: its CPU share
        (time on a CPU, from the same file) is its only sample, and its other rate baselines are
        dropped, so that when it heats up its first full reading yields no rate rather than an
        average over the idle gap. Unknown (first sight, no schedstat on this kernel) is never cool.
        """
        tkey = (key, tid)
        try:
            sched = self.procfs.thread_schedstat(key.pid, tid)
        except (TargetGone, AccessDenied, ProbeFailed):
            return False
        prev = self._screen_prev.get(tkey)
        self._screen_prev[tkey] = (now, sched.run_ns, sched.wait_ns)
        seen_threads.add(tkey)
        if prev is None or now <= prev[0]:
            self._screened[tkey] = sched
            return False
        dt = now - prev[0]
        ran = max(0, sched.run_ns - prev[1]) / 1e9 / dt
        if ran + max(0, sched.wait_ns - prev[2]) / 1e9 / dt >= self.cfg.hot_cpu_ratio / 2:
            self._screened[tkey] = sched
            return False
        self._thread_prev.pop(tkey, None)
        res.samples.append(Sample(target.name, Subject(key.pid, tid).key, m.THREAD_CPU, ran, now))
        return True

    def _rate(self, prev: tuple[float, int] | None, now: float, ticks: int) -> float | None:
        if prev is None or now <= prev[0]:
            return None
        return max(0, ticks - prev[1]) / self.procfs.clk_tck / (now - prev[0])


class ProcfsProbe:
    """The inline probe: reads the live targets every ``interval``, deeper for suspected ones;
    publishes the process table to ``Readings`` and tells the tracker which processes exited."""

    name = "procfs"
    inline = True

    def __init__(self, parts: ProbeParts) -> None:
        self.cfg = parts.cfg.probes.procfs
        self.reader = ProcfsReader(parts.seams.proc, self.cfg)
        self.tracker = parts.tracker
        self.readings: Readings = parts.readings
        self.log = parts.log
        self._schedule = Schedule(self.cfg.interval)

    def jobs(self, now: float, seen: Seen) -> list[Job]:
        if not self._schedule.due("", now):
            return []
        self._schedule.ran("", now)
        targets, suspected = self.tracker.live_targets(), set(seen.suspected)
        return [Job("", lambda: self.reader.collect(targets, suspected, now), self.cfg.deadline)]

    def fold(self, result: ProcfsResult, now: float) -> Folded:
        self.readings.processes = dict(result.processes)
        for name in self.tracker.mark_gone(result.gone, now):
            self.log.warning("target %s: API server process exited", name)
        if result.denied:
            what = f"{result.denied[0]} (and {len(result.denied) - 1} more)"
            return Folded(result.samples, degraded={"procfs:access": what}, cleared=("procfs",))
        return Folded(result.samples, cleared=("procfs", "procfs:access"))

    def close(self) -> None:
        pass
