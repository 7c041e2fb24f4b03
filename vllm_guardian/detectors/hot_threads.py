"""Which threads of a target spin? Per-thread CPU, voluntary switches, syscall state.

Reads the per-thread series (subject ``p<pid>/t<tid>``) over the last window. A
thread is hot when its samples cover enough of the window, its median CPU
demand (on a CPU + waiting for one, from schedstat; the CPU ratio where
schedstat is unreadable) is high, it blocks (voluntary switches) almost never per CPU-second it burns,
and, when readable, its syscall file says ``running`` in most samples. Not
"zero voluntary switches": a spinning Python thread hands the GIL to any waking
sibling, and each hand-back is a voluntary switch (~40/s measured at 100% CPU).
"""

from __future__ import annotations

import re

from dataclasses import dataclass

from vllm_guardian.config.schema_detectors import BusyLoopConfig
from vllm_guardian.model import Role, Subject, Target
from vllm_guardian.series import metrics
from vllm_guardian.series.window import coverage, mean, median, points_between, values
from vllm_guardian.detectors.view import TargetView


@dataclass(frozen=True)
class HotThread:
    pid: int
    tid: int
    subject: str
    role: Role | None  # of its process in the current snapshot
    cpu_ratio: float  # median CPU ratio over the window (on a CPU)
    demand_ratio: float  # median of what decided hotness: CPU demand when known, else the CPU ratio
    voluntary_per_cpu_s: float
    running_fraction: float | None  # None when the syscall file was not readable
    first_t: float  # start of the hot span: first sample in the window at or above the ratio
    samples: int


def hot_threads(
    view: TargetView,
    cpu_ratio: float,
    window: float,
    min_coverage: float,
    max_vol_per_cpu_s: float,
    running_fraction: float,
) -> list[HotThread]:
    """Hot threads of the target's current processes, hottest first.

    A thread also needs at least 2 samples and a fresh one (within 3 probe
    intervals of now: a thread that exited is not spinning any more).
    """
    st, series = view.state, view.series
    name, now, interval = st.target.name, st.now, st.probe_interval
    roles = {p.pid: p.role for p in st.target.processes}
    t0 = now - window
    out: list[HotThread] = []
    for subject in series.subjects(name, metrics.THREAD_CPU):
        parsed = Subject.parse(subject)
        ids = None if parsed is None or parsed.pid is None or parsed.tid is None else (parsed.pid, parsed.tid)
        if ids is None or ids[0] not in roles:
            continue
        cpu = points_between(series, name, subject, metrics.THREAD_CPU, t0, now)
        if len(cpu) < 2 or now - cpu[-1][0] > 3 * interval + 1e-9:
            continue
        # Hotness is CPU *demand* (on a CPU + waiting on a runqueue) when schedstat is there: a
        # spinner on a saturated node gets less than a core but wants all of it.
        demand = points_between(series, name, subject, metrics.THREAD_DEMAND, t0, now)
        heat = demand if len(demand) >= 2 else cpu
        if coverage(heat, window, interval) < min_coverage:
            continue
        med = median(values(heat))
        if med is None or med < cpu_ratio:
            continue
        vol = values(points_between(series, name, subject, metrics.THREAD_VOL_RATE, t0, now))
        mean_cpu = mean(values(cpu)) or 0.0
        if not vol or mean_cpu <= 0:
            continue  # cannot tell a spin from a busy thread that blocks often
        vol_per_cpu_s = (mean(vol) or 0.0) / mean_cpu
        if vol_per_cpu_s > max_vol_per_cpu_s:
            continue
        running = mean(values(points_between(series, name, subject, metrics.THREAD_RUNNING, t0, now)))
        if running is not None and running < running_fraction:
            continue
        first_t = next(t for t, v in heat if v >= cpu_ratio)
        out.append(
            HotThread(
                pid=ids[0],
                tid=ids[1],
                subject=subject,
                role=roles[ids[0]],
                cpu_ratio=median(values(cpu)) or 0.0,
                demand_ratio=med,
                voluntary_per_cpu_s=vol_per_cpu_s,
                running_fraction=running,
                first_t=first_t,
                samples=len(cpu),
            )
        )
    out.sort(key=lambda h: (-h.demand_ratio, h.voluntary_per_cpu_s, h.subject))
    return out


def hot_threads_for(view: TargetView, cfg: BusyLoopConfig) -> list[HotThread]:
    """``hot_threads`` with the thresholds of the busy_loop config block."""
    return hot_threads(
        view,
        cpu_ratio=cfg.cpu_ratio,
        window=cfg.window,
        min_coverage=cfg.min_coverage,
        max_vol_per_cpu_s=cfg.max_voluntary_per_cpu_second,
        running_fraction=cfg.running_fraction,
    )


_ROLE_NAMES = {
    Role.API_SERVER: "APIServer",
    Role.ENGINE_CORE: "EngineCore",
    Role.WORKER: "Worker",
    Role.OTHER: "process",
}


_RANK = re.compile(r"_(DP|TP|PP|EP)(\d+)")


def process_title(target: Target, pid: int) -> str | None:
    """The process's title as vLLM sets it (``VLLM::EngineCore_DP1``), or None when unknown."""
    p = next((p for p in target.processes if p.pid == pid), None)
    return p.cmdline[0] if p is not None and p.cmdline else None


def rank_of(title: str | None) -> dict[str, int]:
    """The ranks a vLLM process title names: ``EngineCore_DP1`` -> {"dp_rank": 1}."""
    return {f"{kind.lower()}_rank": int(n) for kind, n in _RANK.findall(title or "")}


def role_label(role: Role | None) -> str:
    """Human name of a role for summaries (``EngineCore``, ``APIServer``...)."""
    return _ROLE_NAMES.get(role, "process") if role is not None else "process"
