"""engine_stall: no progress and no hot thread (a deadlock, a blocked collective, a stuck device).

Reads the progress counters, the request gauges, the canary results and the hot
threads (thresholds from the busy_loop block: a hot thread is busy_loop's case).
Decides:

- confirmed when work was pending in every sample of the window (samples
  spanning >= 90% of it) and no counter moved (``counters_frozen``), or when the
  most recent canary (ended within the window) timed out and no counter moved
  during its flight nor since (``canary_timeout``);
- a suspect (unconfirmed, so the daemon sends a canary) when work was pending
  and counters frozen over the last few seconds only.

Never while paused or asleep on purpose (nor in the resume grace after it), never during
startup grace nor once the API server is gone (engine_dead's case),
nor while a process of the target is hot but its threads are not read yet (the
first tick of a spin: whether it is busy_loop's case is not known).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vllm_guardian.config.schema import DetectorsConfig
from vllm_guardian.model import Finding, Kind, Role, Severity, Subject
from vllm_guardian.series import metrics as m
from vllm_guardian.series.window import span
from vllm_guardian.detectors.busy_loop import SUSPECT_WINDOW
from vllm_guardian.detectors.hot_threads import hot_threads_for
from vllm_guardian.detectors.progress import canaries, pending_samples, pending_throughout, progress_between
from vllm_guardian.detectors.view import TargetView

KIND = Kind.ENGINE_STALL
MIN_WINDOW_SPAN = 0.9  # share of the window the pending samples must span
SUSPECT_AFTER = 3.0  # seconds of pending work with frozen counters before asking for a canary


def evaluate(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    st, es = view.state, cfg.engine_stall
    if not st.ready or not st.api_alive or st.on_purpose:
        return None
    if (
        hot_threads_for(view, cfg.busy_loop)
        or _hot_lately(view, cfg)
        or _hot_process_unread(view, cfg.busy_loop.cpu_ratio)
    ):
        return None
    name, now, series = st.target.name, st.now, view.series
    t0 = now - es.window
    pend = pending_samples(series, name, t0, now)
    spans = span(pend, st.probe_interval) >= MIN_WINDOW_SPAN * es.window
    pending = bool(pend) and all(v > 0 for _, v in pend)
    progress = progress_between(series, name, t0, now)
    base: dict[str, Any] = {
        "window": es.window,
        "pending": pending,
        "pending_requests": pend[-1][1] if pend else None,
        "progress": progress,
        "threshold_window_span": MIN_WINDOW_SPAN,
    }
    engines = st.target.by_role(Role.ENGINE_CORE)
    if engines:
        base.update(pid=engines[0].pid, role=Role.ENGINE_CORE.value)
    subject = Subject(engines[0].pid).key if engines else ""

    if pending and spans and progress is False:
        what = f"counters frozen with {pend[-1][1]:g} requests pending for {es.window:g}s"
        return _finding(name, subject, dict(base, reason="counters_frozen"), what, True)

    done = canaries(series, name, t0, now)
    if done:
        c = done[-1]
        flight = progress_between(series, name, c.started, c.ended)
        # ...and the engine has not moved since: a recovered engine (a spin that ended, a lock
        # released) works through its backlog at once, which must clear the old timeout
        since = progress_between(series, name, c.started, now)
        if c.timed_out and flight is not True and since is not True:
            sig = dict(base, reason="canary_timeout", canary_latency_s=c.latency, canary_progress=flight)
            what = f"canary timed out after {c.ended - c.started:.1f}s"
            return _finding(name, subject, sig, what, True)

    recent = now - SUSPECT_AFTER
    if pending_throughout(series, name, recent, now) and progress_between(series, name, recent, now) is False:
        what = f"counters frozen with requests pending for {SUSPECT_AFTER:g}s, confirming with a canary"
        return _finding(name, subject, dict(base, reason="suspect"), what, False)
    return None


def _hot_lately(view: TargetView, cfg: DetectorsConfig) -> bool:
    """A thread hot over busy_loop's suspect window, though not yet for its whole window: a spin
    that started less than a window ago, or that a guardian started beside it has watched only
    that long (its first canary times out before the window fills): busy_loop's case."""
    bl = cfg.busy_loop
    return bool(hot_threads_for(view, replace(bl, min_coverage=0.0, window=min(bl.window, SUSPECT_WINDOW))))


def _hot_process_unread(view: TargetView, cpu_ratio: float) -> bool:
    """A process that just turned hot, whose threads are not read yet or whose hottest thread
    reads hot on its latest sample: whether a thread spins (busy_loop's case) is not ruled
    out yet, so a stall cannot be concluded."""
    st = view.state
    recent = st.now - 2 * st.probe_interval
    name = st.target.name
    for p in st.target.processes:
        last = view.series.latest(name, Subject(p.pid).key, m.PROC_CPU)
        if last is None or last[0] < recent or last[1] < cpu_ratio:
            continue
        threads = [
            view.series.latest(name, t, m.THREAD_CPU)
            for t in view.series.subjects(name, m.THREAD_CPU, Subject(p.pid).threads_prefix)
        ]
        latest = [pt for pt in threads if pt is not None and pt[0] >= recent]
        if not latest or max(v for _, v in latest) >= cpu_ratio:
            return True
    return False


def _finding(target: str, subject: str, signals: dict[str, Any], what: str, confirmed: bool) -> Finding:
    return Finding(
        kind=KIND,
        target=target,
        severity=Severity.CRITICAL,
        summary=f"engine makes no progress and no thread is hot: {what}",
        signals=signals,
        confirmed=confirmed,
        subject=subject,
    )
