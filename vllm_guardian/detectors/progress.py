"""Is the engine making progress? Counters, pending work and canary results.

Reads the target-level series (subject ``""``): the progress counters
(``metrics.PROGRESS_COUNTERS``), the request gauges and the canary results; and one thread's
syscall count (``metrics.THREAD_SYSCALLS``: an API server's event loop that serves makes them) and
a process's main-thread CPU time (``metrics.PROC_MAIN_RUN_S``: an event loop that serves runs).
Decides nothing by itself; busy_loop and engine_stall combine these answers.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

from vllm_guardian.series import metrics
from vllm_guardian.series.store import Point, SeriesStore
from vllm_guardian.series.window import all_points, clip, first_in, last_at_or_before, value_at


def counter_moved(points: Sequence[Point], t0: float, t1: float) -> bool | None:
    """Did one counter change between ``t0`` and ``t1``?

    Baseline: its last value at or before ``t0`` (else its first value in the
    interval); end: its last value at or before ``t1``. None when those are not two
    distinct samples (unknown). Any change counts, a decrease included: a counter
    that went down means the server restarted, which is not a hang.
    """
    if t1 < t0:
        return None
    base = last_at_or_before(points, t0) or first_in(points, t0, t1)
    end = last_at_or_before(points, t1)
    if base is None or end is None or end[0] <= base[0]:
        return None
    seg = clip(points, base[0], end[0])
    return any(b[1] != a[1] for a, b in itertools.pairwise(seg))


def progress_between(series: SeriesStore, target: str, t0: float, t1: float, subject: str = "") -> bool | None:
    """True if any progress counter moved in ``[t0, t1]``; False if some counter was
    sampled across the interval and none moved; None if no counter covers it. ``subject``:
    one engine's own counters (``metrics.engine_subject``) instead of the whole server's."""
    sampled = False
    for metric in metrics.PROGRESS_COUNTERS:
        moved = counter_moved(all_points(series, target, subject, metric), t0, t1)
        if moved:
            return True
        if moved is False:
            sampled = True
    return False if sampled else None


def syscalls_frozen(series: SeriesStore, target: str, subject: str, t0: float, t1: float, interval: float) -> bool:
    """Did the thread ``subject`` make no syscall in ``[t0, t1]``? (``counter_frozen`` of its
    ``THREAD_SYSCALLS``.)"""
    return counter_frozen(series, target, subject, metrics.THREAD_SYSCALLS, t0, t1, interval)


def counter_frozen(
    series: SeriesStore, target: str, subject: str, metric: str, t0: float, t1: float, interval: float
) -> bool:
    """Did the counter ``metric`` of ``subject`` stand still over ``[t0, t1]``? True only when it
    was sampled from ``t0`` (within one probe ``interval``) to ``t1`` (within three, as a hot
    thread's freshness) and never changed; unknown (no samples, too short a span) is False: not
    proven."""
    pts = all_points(series, target, subject, metric)
    base = last_at_or_before(pts, t0) or first_in(pts, t0, t1)
    end = last_at_or_before(pts, t1)
    if base is None or end is None or end[0] <= base[0]:
        return False
    if base[0] > t0 + interval + 1e-9 or end[0] < t1 - 3 * interval - 1e-9:
        return False
    return all(v == base[1] for _, v in clip(pts, base[0], end[0]))


def pending_samples(series: SeriesStore, target: str, t0: float, t1: float, subject: str = "") -> list[Point]:
    """``running + waiting`` at every gauge sample time in ``[t0, t1]``.

    At each time, each gauge contributes its latest value at or before it (the two
    come from one scrape, so normally both are stamped at the same time).
    """
    running, waiting = (
        [p for p in series.window(target, subject, m, t0) if p[0] <= t1]
        for m in (metrics.REQ_RUNNING, metrics.REQ_WAITING)
    )
    if _read_together(running, waiting):  # the usual case: both gauges come from every scrape
        return [(r[0], sum((r[1], w[1]))) for r, w in zip(running, waiting, strict=True)]
    gauges = [all_points(series, target, subject, m) for m in (metrics.REQ_RUNNING, metrics.REQ_WAITING)]
    times = sorted({p[0] for pts in gauges for p in clip(pts, t0, t1)})
    out: list[Point] = []
    for t in times:
        vals = [v for v in (value_at(pts, t) for pts in gauges) if v is not None]
        out.append((t, sum(vals)))
    return out


def _read_together(a: Sequence[Point], b: Sequence[Point]) -> bool:
    """Both gauges sampled at the same times, each time once: the value of each at a time is its own."""
    return (
        len(a) == len(b)
        and all(p[0] == q[0] for p, q in zip(a, b, strict=True))
        and all(a[i][0] < a[i + 1][0] for i in range(len(a) - 1))
    )


def pending_throughout(series: SeriesStore, target: str, t0: float, t1: float, subject: str = "") -> bool:
    """``running + waiting > 0`` in every sample in ``[t0, t1]`` (and at least one sample)."""
    pts = pending_samples(series, target, t0, t1, subject)
    return bool(pts) and all(v > 0 for _, v in pts)


@dataclass(frozen=True)
class Canary:
    """One finished canary completion."""

    started: float  # monotonic
    ended: float  # monotonic (the samples' time)
    ok: bool  # answered
    timed_out: bool  # a hang, not a fast failure
    latency: float | None
    rank: int | None = None  # the data-parallel rank it was sent to; None: the server chose


def canaries(series: SeriesStore, target: str, since: float, until: float) -> list[Canary]:
    """Canaries that ended in ``[since, until]``, oldest first.

    The canary probe stamps all the samples of one result at its end; the start is
    ``CANARY_STARTED``'s value, else ``end - latency``; a result with neither is skipped.
    """

    def at(metric: str) -> dict[float, float]:
        return {t: v for t, v in clip(all_points(series, target, "", metric), since, until)}

    ok, timed_out = at(metrics.CANARY_OK), at(metrics.CANARY_TIMEOUT)
    latency, started, rank = at(metrics.CANARY_LATENCY), at(metrics.CANARY_STARTED), at(metrics.CANARY_RANK)
    out: list[Canary] = []
    for t in sorted(set(ok) | set(timed_out)):
        lat = latency.get(t)
        start = started.get(t, t - lat if lat is not None else None)
        if start is None:
            continue
        out.append(
            Canary(
                started=start,
                ended=t,
                ok=ok.get(t) == 1.0,
                timed_out=timed_out.get(t) == 1.0,
                latency=lat,
                rank=int(rank[t]) if t in rank else None,
            )
        )
    return out
