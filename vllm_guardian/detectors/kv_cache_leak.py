"""kv_cache_leak: KV-cache blocks stay allocated while the server is idle.

Reads ``vllm.kv_cache_usage_perc`` (0..1) and the request gauges
(``num_requests_running``, ``num_requests_waiting``), subject ``""``.

- An *idle sample* is a gauge sample time at which both gauges read 0. An
  *idle period* is a run of consecutive idle samples of at least
  ``MIN_IDLE_SAMPLES``; the *current* one ends at the newest gauge sample, which
  must be fresh.
- The *idle baseline* is the lowest KV usage seen in an earlier idle period of
  this target (since ``ready_since`` when known, within the series horizon), or
  0 when none is visible: a vLLM engine with no request holds no blocks, so a
  first idle period is judged against 0. The current period is left out, else it
  would be its own baseline.

Fires (1) ``stuck_above_baseline``: idle for at least ``window`` seconds and
every KV sample of the last ``window`` seconds >= baseline + ``margin``; or
(2) ``idle_floor_climbing``: the floors (lowest usage) of the last
``CLIMB_PERIODS`` idle periods, the current one included, each higher than the
one before (by > ``CLIMB_STEP``), rising by at least ``margin / 2`` in total, once
the current period is ``CLIMB_MIN_IDLE_S`` old.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.model import Finding, Kind, Severity
from vllm_guardian.series import metrics
from vllm_guardian.series.store import Point
from vllm_guardian.series.window import all_points, clip, coverage
from vllm_guardian.detectors.view import TargetView

KIND = Kind.KV_CACHE_LEAK
MIN_IDLE_SAMPLES = 2
CLIMB_PERIODS = 3
CLIMB_STEP = 0.005
CLIMB_MIN_IDLE_S = 10.0  # the current idle period must be this old before its floor counts
MIN_COVERAGE = 0.8


@dataclass(frozen=True)
class IdlePeriod:
    start: float  # first idle sample time
    end: float  # last idle sample time
    floor: float | None  # lowest KV usage sampled in [start, end]; None when none was


def idle_periods(running: list[Point], waiting: list[Point], kv: list[Point]) -> list[IdlePeriod]:
    """Runs of consecutive gauge samples with running == waiting == 0, oldest first."""
    times = sorted({t for t, _ in running} | {t for t, _ in waiting})
    runs: list[list[float]] = []
    cur: list[float] = []
    i = j = 0
    r = w = None
    for t in times:  # each gauge's latest value at or before t (both lists sorted by time)
        while i < len(running) and running[i][0] <= t:
            r, i = running[i][1], i + 1
        while j < len(waiting) and waiting[j][0] <= t:
            w, j = waiting[j][1], j + 1
        if r == 0 and w == 0:
            cur.append(t)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    out = []
    for run in runs:
        if len(run) < MIN_IDLE_SAMPLES:
            continue
        usage = [v for _, v in clip(kv, run[0], run[-1])]
        out.append(IdlePeriod(run[0], run[-1], min(usage) if usage else None))
    return out


def climbing_floors(periods: list[IdlePeriod], margin: float) -> list[float] | None:
    """The floors of the last ``CLIMB_PERIODS`` idle periods (the last one being the current)
    when each is above the one before by > ``CLIMB_STEP`` and they rise by >= ``margin / 2``."""
    known = [p.floor for p in periods if p.floor is not None]
    if len(known) < CLIMB_PERIODS or periods[-1].floor is None:
        return None
    floors = known[-CLIMB_PERIODS:]
    rising = all(b > a + CLIMB_STEP for a, b in itertools.pairwise(floors))
    return floors if rising and floors[-1] - floors[0] >= margin / 2 else None


def evaluate(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    st, c = view.state, cfg.kv_cache_leak
    if not st.ready or not st.api_alive:
        return None
    name, now = st.target.name, st.now
    since = st.ready_since if st.ready_since is not None else float("-inf")
    running = [p for p in all_points(view.series, name, "", metrics.REQ_RUNNING) if p[0] >= since]
    waiting = [p for p in all_points(view.series, name, "", metrics.REQ_WAITING) if p[0] >= since]
    kv = [p for p in all_points(view.series, name, "", metrics.KV_USAGE) if p[0] >= since]
    if not running or not waiting or not kv:
        return None
    fresh = 3 * st.probe_interval + 1e-9
    last_gauge = max(running[-1][0], waiting[-1][0])
    if now - last_gauge > fresh or now - kv[-1][0] > fresh:
        return None
    periods = idle_periods(running, waiting, kv)
    if not periods or periods[-1].end != last_gauge:
        return None  # not idle now
    current, earlier = periods[-1], periods[:-1]
    earlier_floors = [p.floor for p in earlier if p.floor is not None]
    baseline = min(earlier_floors) if earlier_floors else 0.0
    usage = kv[-1][1]
    idle_for = now - current.start
    base = {
        "usage": round(usage, 4),
        "baseline": round(baseline, 4),
        "idle_for_s": round(idle_for, 3),
        "margin": c.margin,
        "window": c.window,
        "earlier_idle_periods": len(earlier),
    }

    recent = clip(kv, now - c.window, now)
    if (
        idle_for >= c.window
        and recent
        and coverage(recent, c.window, st.probe_interval) >= MIN_COVERAGE
        and min(v for _, v in recent) >= baseline + c.margin
    ):
        low = min(v for _, v in recent)
        sig = dict(base, reason="stuck_above_baseline", lowest_in_window=round(low, 4))
        summary = (
            f"KV cache {usage:.0%} used with no request for {idle_for:.0f}s "
            f"(idle baseline {baseline:.0%}, margin {c.margin:.0%})"
        )
        return _finding(name, summary, sig)

    climb = climbing_floors(periods, c.margin) if idle_for >= CLIMB_MIN_IDLE_S else None
    if climb is not None:
        sig = dict(base, reason="idle_floor_climbing", idle_floors=[round(f, 4) for f in climb])
        summary = f"KV cache idle floor climbs across {len(climb)} idle periods: " + " -> ".join(
            f"{f:.0%}" for f in climb
        )
        return _finding(name, summary, sig)
    return None


def _finding(target: str, summary: str, signals: dict[str, Any]) -> Finding:
    return Finding(
        kind=KIND, target=target, severity=Severity.WARNING, summary=summary, signals=signals, confirmed=True
    )
