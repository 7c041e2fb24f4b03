"""Leak math shared by accel_memory_leak and host_memory_leak: is a memory series
rising steadily, after warm-up, faster than a threshold, without more load to explain it?

Reads one memory series (points) plus the target's ``vllm.num_requests_running``.
Decides with a robust slope (Theil–Sen, ``series.slope``) over the judged window:
the last ``window`` seconds after ready (unknown ``ready_since`` means not judged).
Warm-up is judged from the curve: growth that has gone on since ready without
levelling off is warm-up, for at most ``warmup`` seconds; once the curve has
levelled off (``SETTLE_S`` seconds with no rise worth a leak) the window starts
there, so sustained growth after it is judged at once. A leak needs all of:

- points covering ``MIN_COVERAGE`` of the window, the newest one fresh;
- the window's slope >= the threshold;
- each half of the window rising at >= ``HALF_FRACTION`` of the threshold: a
  single allocation step lies in one half (or on the boundary) and leaves the
  other flat; growth that levels off leaves the second half flat;
- no single jump between two samples making ``STEP_SHARE`` of the fitted rise: with a slow
  backend's few points per half, noise can tilt a flat half, and a noisy allocation step
  then passed for a leak (measured: an 8 GB step with 100 MB noise sampled every 5 s;
  a leak's largest jump stayed under 0.45 of its rise at that noise, a step's over 0.9);
- the newer half rising at >= ``KEEPS_PACE`` of the older half's slope: growth that
  decelerates (a warm-up approaching its plateau) is not a leak, linear growth keeps pace;
- no rise in running requests that explains it: running grew over the window
  (last-quarter median >= first-quarter median + max(1, 25%)), or its slope is
  > 0 and memory follows it (Spearman rho >= ``LOAD_RHO``).

Every backend samples at its own pace (procfs every tick, NVML 1 s, npu-smi 5-6 s): coverage
and freshness are judged at the series' own sampling interval (``sample_interval``: the median
gap between its points, never less than the loop's), and the levelling-off stretch on the curve
filled in at the loop's pace between neighbouring samples, from the read just before ready on
(``curve_since``). So a slow backend opens at the windows a 1 s one opens at, whatever the phase
of its reads against the growth's onset (judged at its own pace, a 5-6 s series needed 15-20 s
of flat curve depending on that phase, the host series 11-12 s: a leak starting 15 s after
ready opened in some runs and waited for the 300 s cap in others).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from vllm_guardian.config.schema_detectors import MemoryLeakConfig
from vllm_guardian.model import Subject
from vllm_guardian.series import metrics
from vllm_guardian.series.slope import spearman, theil_sen
from vllm_guardian.series.store import Point, SeriesStore
from vllm_guardian.series.window import clip, coverage, median, points_between, values
from vllm_guardian.detectors.hot_threads import role_label
from vllm_guardian.detectors.view import TargetState, TargetView

MIN_COVERAGE = 0.8
MIN_POINTS = 6
HALF_FRACTION = 0.5
KEEPS_PACE = 0.75  # a leak's newer half rises at least this share of its older half's slope
LOAD_RHO = 0.5
STEP_SHARE = 0.8  # one sample-to-sample jump this share of the fitted rise: a step, not a leak
SETTLE_S = 15.0  # a stretch this long with no growth worth a leak: the warm-up has levelled off
FILL_GAPS = 3.0  # gaps up to this many of the series' own intervals are filled in (a missed read)
PREFILTER_FRACTION = 0.5  # quarter-median rise below this share of the threshold: not worth a fit
HALF_POINTS = 24  # halves are fitted on at most this many bucket medians


@dataclass(frozen=True)
class Trend:
    slope: float  # units/s over the whole window (Theil–Sen)
    first_half: float  # Theil–Sen slope of the older half
    second_half: float  # ... of the newer half
    rising_share: float  # fit quality: share of pairwise slopes > 0
    rho: float | None  # fit quality: Spearman rank correlation of value with time
    n: int
    first: float  # value at the window start / end on the fitted line
    last: float
    jump_share: float = 0.0  # the largest sample-to-sample rise over the fitted rise

    @property
    def decelerating(self) -> bool:
        """The newer half rises clearly slower than the older one: warm-up levelling off."""
        return self.second_half < KEEPS_PACE * self.first_half

    def leaking(self, threshold: float) -> bool:
        return (
            self.slope >= threshold
            and min(self.first_half, self.second_half) >= HALF_FRACTION * threshold
            and not self.decelerating
            and self.jump_share < STEP_SHARE
        )


def trend(points: Sequence[Point]) -> Trend | None:
    """The trend of points (oldest first); None with fewer than ``MIN_POINTS`` or 3 per half."""
    if len(points) < MIN_POINTS:
        return None
    fit = theil_sen(points)
    mid = (points[0][0] + points[-1][0]) / 2
    older = [p for p in points if p[0] <= mid]
    newer = [p for p in points if p[0] >= mid]
    fa, fb = theil_sen(older, HALF_POINTS), theil_sen(newer, HALF_POINTS)
    if fit is None or fa is None or fb is None or len(older) < 3 or len(newer) < 3:
        return None
    rho = spearman([p[0] for p in points], values(points))
    first, last = fit.at(points[0][0]), fit.at(points[-1][0])
    jump = max(b[1] - a[1] for a, b in zip(points, points[1:], strict=False))
    share = jump / (last - first) if last > first else 0.0
    return Trend(fit.slope, fa.slope, fb.slope, fit.rising_share, rho, len(points), first, last, share)


def quarter_rise_rate(points: Sequence[Point]) -> float | None:
    """A cheap robust rate: (median of the newest quarter - median of the oldest quarter)
    over the time between the quarters' middles; None with fewer than 8 points."""
    n = len(points)
    if n < 8:
        return None
    q = n // 4
    old, new = points[:q], points[-q:]
    dt = statistics.median(p[0] for p in new) - statistics.median(p[0] for p in old)
    if dt <= 0:
        return None
    return (statistics.median(values(new)) - statistics.median(values(old))) / dt


def worth_fitting(points: Sequence[Point], threshold: float) -> bool:
    """False when the series clearly rises slower than the threshold (saves the O(n²) fit)."""
    rate = quarter_rise_rate(points)
    return rate is None or rate >= PREFILTER_FRACTION * threshold


def sample_interval(points: Sequence[Point], floor: float) -> float:
    """The series' own sampling interval: the median gap between its points, at least ``floor``
    (the loop's); ``floor`` with fewer than 3 points."""
    if len(points) < 3:
        return floor
    gaps = [b[0] - a[0] for a, b in zip(points, points[1:], strict=False)]
    return max(floor, statistics.median(gaps))


def filled(points: Sequence[Point], step: float, max_gap: float) -> list[Point]:
    """The points with each gap of at most ``max_gap`` seconds between neighbours filled in every
    ``step`` seconds on the straight line between them (oldest first). A slower series then reads
    like one sampled every ``step``; a longer gap stays open (no evidence of how the curve went)."""
    if step <= 0 or len(points) < 2:
        return list(points)
    out: list[Point] = []
    for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False):
        out.append((t0, v0))
        gap = t1 - t0
        if gap <= max_gap:
            t = t0 + step
            while t < t1 - 1e-9:
                out.append((t, v0 + (v1 - v0) * (t - t0) / gap))
                t += step
    out.append(points[-1])
    return out


def curve_since(
    fetch: Callable[[float, float], list[Point]], history: Sequence[Point], since: float, step: float
) -> list[Point]:
    """The curve from ``since`` (ready) on as if read every ``step`` seconds: ``history`` (the points
    since then) ``filled`` in, and the stretch before its first point taken from the line through
    the last read before ``since`` (a slow backend's first read after ready comes up to one of its
    intervals late; the curve at ready is no less known to it than to a 1 s series)."""
    gap = FILL_GAPS * sample_interval(history, step)
    before = [p for p in fetch(since - gap, since) if p[0] < since][-1:]
    return [p for p in filled(before + list(history), step, gap) if p[0] >= since]


def judged_window(state: TargetState, cfg: MemoryLeakConfig) -> tuple[float, float] | None:
    """``(t0, now)``: the last ``window`` seconds, none before ready; None when not judged (not
    ready, ``ready_since`` unknown). What of it is warm-up: see ``judged_points``."""
    if not state.ready or not state.api_alive or state.ready_since is None:
        return None
    t0 = max(state.now - cfg.window, state.ready_since)
    return (t0, state.now) if t0 < state.now else None


def settled_at(points: Sequence[Point], threshold: float, stretch: float = SETTLE_S) -> float | None:
    """When the curve first levelled off: the start of the first ``stretch`` seconds whose rise
    (median of the newest third - median of the oldest third, per second) is below
    ``HALF_FRACTION`` of the threshold; None while it has risen all along (still warming up).
    Falling counts as level: memory given back is not warm-up growth."""
    n = len(points)
    j = 0
    for i in range(n):
        t_i = points[i][0]
        while j < n and points[j][0] < t_i + stretch:
            j += 1
        if j >= n and points[-1][0] < t_i + stretch - 1e-9:
            return None  # the rest is shorter than one stretch
        chunk = points[i : j + 1] if j < n else points[i:]
        k = len(chunk) // 3  # thirds: 5 points a side at 1 s, 1 at a slow backend's pace
        if k < 1:
            continue
        old, new = chunk[:k], chunk[-k:]
        dt = (new[0][0] + new[-1][0]) / 2 - (old[0][0] + old[-1][0]) / 2
        if dt <= 0:
            continue
        rate = (statistics.median(values(new)) - statistics.median(values(old))) / dt
        if rate < HALF_FRACTION * threshold:
            return t_i
    return None


def judged_points(
    fetch: Callable[[float, float], list[Point]], state: TargetState, cfg: MemoryLeakConfig
) -> tuple[tuple[float, float], list[Point]] | None:
    """The window to judge and its points, the warm-up judged from the curve.

    Growth that has gone on since ready without levelling off is warm-up, for at most
    ``warmup`` seconds; once the curve has levelled off (``settled_at``) the window starts
    there, so sustained growth after it is judged at once. ``fetch(t0, t1)`` returns the
    memory points in ``[t0, t1]``, oldest first (kept since ready: ``SeriesStore.memory_horizons``).
    """
    win = judged_window(state, cfg)
    if win is None:
        return None
    assert state.ready_since is not None
    cap = state.ready_since + cfg.warmup
    pts = fetch(*win)
    if win[0] >= cap:
        return win, pts  # the warm-up is long over, however it ended
    if not usable(pts, state, cfg) or not worth_fitting(pts, cfg.slope_bytes_per_s):
        # nothing in the window rises like a leak: no need to read the curve since ready (the judged
        # part must cover most of the window anyway, see ``usable``)
        return win, pts
    history = fetch(state.ready_since, state.now)
    settled = settled_at(curve_since(fetch, history, state.ready_since, state.probe_interval), cfg.slope_bytes_per_s)
    end = cap if settled is None else min(settled, cap)
    t0 = max(win[0], end)
    if t0 >= state.now:
        return None
    return (t0, state.now), [p for p in history if p[0] >= t0]


def usable(points: Sequence[Point], state: TargetState, cfg: MemoryLeakConfig) -> bool:
    """Enough points for the window, and the newest one fresh (both at the series' own pace)."""
    if len(points) < MIN_POINTS:
        return False
    every = sample_interval(points, state.probe_interval)
    stale_after = max(3 * every, 0.1 * cfg.window)
    if state.now - points[-1][0] > stale_after + 1e-9:
        return False
    return coverage(points, cfg.window, every) >= MIN_COVERAGE


@dataclass(frozen=True)
class Load:
    explained: bool
    running_first: float | None  # median of the first / last quarter of the window
    running_last: float | None
    running_slope: float | None  # requests per second
    rho: float | None  # Spearman of memory vs running requests


def aligned(a: Sequence[Point], b: Sequence[Point]) -> list[tuple[float, float]]:
    """``(a's latest value at or before t, b's value)`` for each point of ``b`` (both sorted by time)."""
    out: list[tuple[float, float]] = []
    i, last = 0, None
    for t, v in b:
        while i < len(a) and a[i][0] <= t:
            last = a[i][1]
            i += 1
        if last is not None:
            out.append((last, v))
    return out


def load_explains(series: SeriesStore, target: str, t0: float, t1: float, mem: Sequence[Point]) -> Load:
    """Does a rise in running requests explain the memory growth over ``[t0, t1]``?"""
    running = points_between(series, target, "", metrics.REQ_RUNNING, t0, t1)
    if len(running) < 3:
        return Load(False, None, None, None, None)
    q = (t1 - t0) / 4
    first, last = median(values(clip(running, t0, t0 + q))), median(values(clip(running, t1 - q, t1)))
    grew = first is not None and last is not None and last - first >= max(1.0, 0.25 * first)
    fit = theil_sen(running)
    pairs = aligned(mem, running)
    rho = spearman([p[0] for p in pairs], [p[1] for p in pairs]) if len(pairs) >= 3 else None
    correlated = fit is not None and fit.slope > 0 and rho is not None and rho >= LOAD_RHO
    return Load(grew or correlated, first, last, None if fit is None else fit.slope, rho)


def exhaustion_s(current: float, total: float | None, slope: float) -> float | None:
    """Seconds until ``current`` reaches ``total`` at ``slope``; None when unknown or not rising."""
    if total is None or slope <= 0:
        return None
    return max(0.0, (total - current) / slope)


def signals(
    tr: Trend,
    load: Load,
    cfg: MemoryLeakConfig,
    state: TargetState,
    window: tuple[float, float],
    current: float,
    total: float | None,
) -> dict[str, Any]:
    """The numbers a memory-leak finding carries (bytes, seconds)."""
    ready_for = None if state.ready_since is None else round(state.now - state.ready_since, 3)
    projected = exhaustion_s(current, total, tr.slope)
    return {
        "slope_bytes_per_s": round(tr.slope, 1),
        "threshold_bytes_per_s": cfg.slope_bytes_per_s,
        "first_half_slope_bytes_per_s": round(tr.first_half, 1),
        "second_half_slope_bytes_per_s": round(tr.second_half, 1),
        "fit_rising_share": round(tr.rising_share, 4),
        "fit_spearman_rho": None if tr.rho is None else round(tr.rho, 4),
        "points": tr.n,
        "largest_jump_share": round(tr.jump_share, 4),
        "window": cfg.window,
        "judged_from": round(window[0], 3),
        "grown_bytes": round(tr.last - tr.first, 1),
        "current_bytes": current,
        "total_bytes": total,
        "projected_exhaustion_s": None if projected is None else round(projected, 1),
        "warmup": cfg.warmup,
        "ready_for_s": ready_for,
        "requests_running_first": load.running_first,
        "requests_running_last": load.running_last,
        "requests_running_slope": None if load.running_slope is None else round(load.running_slope, 6),
        "memory_vs_running_rho": None if load.rho is None else round(load.rho, 4),
    }


def fastest_process(view: TargetView, metric: str, win: tuple[float, float]) -> dict[str, Any]:
    """The current process whose ``metric`` series (subject ``p<pid>``) rises fastest over ``win``:
    ``pid``, ``role``, ``process`` (label), ``process_slope_bytes_per_s``, ``subject``; {} when none."""
    best: tuple[float, Any] | None = None
    for p in view.state.target.processes:
        tr = trend(points_between(view.series, view.name, Subject(p.pid).key, metric, *win))
        if tr is not None and (best is None or tr.slope > best[0]):
            best = (tr.slope, p)
    if best is None:
        return {}
    slope, p = best
    return {
        "pid": p.pid,
        "role": p.role.value,
        "process": role_label(p.role),
        "process_slope_bytes_per_s": round(slope, 1),
        "subject": Subject(p.pid).key,
    }


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
