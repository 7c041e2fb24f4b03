"""The procfs readings as typed status sections: one row per process of a target, with its
busiest thread (``process_section``). The command line is redacted (never an ``--api-key``)."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_guardian.redact import redact_argv
from vllm_guardian.model import ProcessInfo
from vllm_guardian.state.readings import ProcessState, ThreadState


@dataclass(frozen=True)
class HottestThread:
    tid: int
    comm: str
    cpu_ratio: float | None
    voluntary_per_s: float | None
    involuntary_per_s: float | None
    cpu_demand: float | None
    syscall: str | None
    wchan: str | None


@dataclass(frozen=True)
class ProcessStatus:
    pid: int
    starttime: int
    role: str
    cmdline: str  # redacted, at most 200 characters
    state: str | None  # None: not read yet
    cpu_ratio: float | None
    rss_bytes: int | None
    threads: int | None
    hottest_thread: HottestThread | None


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def _hottest(t: ThreadState | None) -> HottestThread | None:
    if t is None:
        return None
    return HottestThread(
        t.tid,
        t.comm,
        _r(t.cpu_ratio),
        _r(t.voluntary_per_s, 1),
        _r(t.involuntary_per_s, 1),
        _r(t.cpu_demand),
        t.syscall,
        t.wchan,
    )


def process_section(p: ProcessInfo, ps: ProcessState | None) -> ProcessStatus:
    """The process's row; ``ps``: its latest reading (None before the first)."""
    return ProcessStatus(
        p.pid,
        p.key.starttime,
        p.role.value,
        " ".join(redact_argv(p.cmdline))[:200],
        None if ps is None else ps.state,
        None if ps is None else _r(ps.cpu_ratio),
        None if ps is None else ps.rss_bytes,
        None if ps is None else ps.num_threads,
        None if ps is None else _hottest(ps.hottest),
    )
