"""Orphaned vLLM processes: ``VLLM::EngineCore`` / ``VLLM::Worker`` whose API server is gone (pure).

After a kill or an engine death, vLLM's engine and worker processes (their titles start ``VLLM::``)
can outlive the API server and keep holding accelerator memory, so the restart that needs that memory
fails. ``find_orphans`` names them from one pass over the process table:

- the process's title starts with ``VLLM::`` (its ``comm`` or argv[0]);
- no live API server is among its ancestors (its parent chain reaches init/a subreaper without one);
- it holds accelerator memory or at least ``min_rss`` bytes;
- and the guardian can say why it is vLLM's: it was a member of a tree the guardian supervised
  (``supervised``: pids remembered from earlier snapshots, with their start times, so a reused pid is
  not taken for it), or it carries vLLM's title with no live parent server. Only the first kind is
  ``provable``; remediation stops only provable orphans, and any other is reported only.

A process another user's title merely imitates (``VLLM::`` set by anyone) is at most reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TITLE = "VLLM::"
SUPERVISED = "supervised"  # the pid (with its start time) was in a tree the guardian supervised
TITLE_ONLY = "title"  # only its title says vLLM


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: int  # start time in clock ticks since boot (/proc/<pid>/stat field 22): a pid's identity
    title: str  # comm or argv[0]
    rss: int  # bytes
    accel_bytes: int = 0  # accelerator memory it holds (0: none or unknown)
    api_server: bool = False  # discovery says it is a vLLM API server


@dataclass(frozen=True)
class Orphan:
    pid: int
    title: str
    rss: int
    accel_bytes: int
    why: str  # SUPERVISED or TITLE_ONLY
    provable: bool  # may be stopped in remediate mode


def _has_live_server(pid: int, procs: Mapping[int, Proc]) -> bool:
    seen: set[int] = set()
    p = procs.get(pid)
    while p is not None and p.pid not in seen:
        seen.add(p.pid)
        parent = procs.get(p.ppid)
        if parent is None:
            return False
        if parent.api_server:
            return True
        p = parent
    return False


def find_orphans(procs: Sequence[Proc], *, supervised: Mapping[int, int], min_rss: int) -> tuple[Orphan, ...]:
    """The orphans among ``procs``; ``supervised``: pid -> start time of every process once in a supervised tree."""
    table = {p.pid: p for p in procs}
    out: list[Orphan] = []
    for p in procs:
        if not p.title.startswith(TITLE) or p.api_server:
            continue
        if p.accel_bytes <= 0 and p.rss < min_rss:
            continue
        if _has_live_server(p.pid, table):
            continue
        proven = supervised.get(p.pid) == p.start
        out.append(
            Orphan(
                pid=p.pid,
                title=p.title[:64],
                rss=p.rss,
                accel_bytes=p.accel_bytes,
                why=SUPERVISED if proven else TITLE_ONLY,
                provable=proven,
            )
        )
    return tuple(sorted(out, key=lambda o: o.pid))


@dataclass(frozen=True)
class OrphanRow:
    """One orphan as ``guardian status`` shows it (``orphans``)."""

    pid: int
    title: str
    rss: int
    why: str  # SUPERVISED or TITLE_ONLY
    provable: bool
    stopped: bool = False


@dataclass(frozen=True)
class OrphansStatus:
    found: tuple[OrphanRow, ...] = ()
    stopped_total: int = 0
    stopping: bool = False  # groups.stop_orphans and not dry-run: provable ones are stopped
