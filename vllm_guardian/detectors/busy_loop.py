"""busy_loop: a thread of the target spins while the engine makes no progress.

Reads the hot threads (``hot_threads``), the progress counters, the request
gauges and the canary results. Decides, for the hottest thread:

1. counters advanced since it became hot (over the last ``min_coverage`` of the window at most)
   -> nothing (busy decode under load, CPU-heavy tokenisation that still makes progress);
2. work pending throughout and counters frozen over that span -> confirmed (``counters_frozen``);
3. a canary started after it became hot: answered -> nothing (a benign busy-poll
   that still serves); timed out without progress during its flight -> confirmed
   (``canary_timeout``); a timeout whose flight saw the thread hot for its last
   ``SUSPECT_WINDOW`` seconds counts as well (it started just before the thread was read);
4. otherwise a suspect (unconfirmed): the daemon sends a canary to decide.

An API-server process that is not the engine (vLLM's ``VLLM::APIServer_<i>`` beside an
``EngineCore``; with ``--api-server-count N`` the others keep serving the shared port, so the
engine progresses and canaries are answered): its hot main thread (the asyncio event loop) is
judged on its own syscall count instead. Serving, an event loop blocks in epoll (not hot) or makes
socket syscalls constantly (saturated); a pure-Python spin makes none. Count frozen over the same
span as the counters above (covered by samples; unreadable -> not proven) -> confirmed
(``syscalls_frozen``), whatever the engine does. Engine threads never: a healthy engine can spin
without syscalls (polling a GPU).

On a data-parallel server the hot thread's engine (``EngineCore_DP<k>``) is judged on its own
counters and gauges (vLLM's ``engine="k"`` label) when the page has them: one rank that spins
while the other serves shows no progress of its own. A canary sent to that rank (the canary
probe names the suspect's rank in ``X-data-parallel-rank``) decides as above; one sent to another
rank decides nothing, and one the server routed itself confirms only by timing out (answered, it
may have reached the other rank).

A thread hot for less than ``min_coverage`` of the window is only ever a
suspect: the confirming canary starts early, but no conclusion is drawn yet.
"Early" is judged on the last ``SUSPECT_WINDOW`` seconds: over the whole window the
cold samples from before the onset hold the median under the ratio for half of it,
which delayed the canary (and so the incident) by ~5 s after a spin began.

Never while drained by the operator or paused or asleep on purpose (nor in the resume grace after
either: ``TargetState.on_purpose``), unless the pause does not explain what is seen: a thread
burning a core all through ``lifecycle.max_pause_spin`` of it, or requests pending all through
``lifecycle.max_pause_pending`` (``detectors/hold.py``; the finding says so: ``hold``,
``hold_contradicted``). Never during startup grace (model load, graph capture) nor once the API
server is gone.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vllm_guardian.config.schema_detectors import BusyLoopConfig, DetectorsConfig
from vllm_guardian.model import Finding, Kind, Role, Severity
from vllm_guardian.detectors.hot_threads import HotThread, hot_threads_for, process_title, rank_of, role_label
from vllm_guardian.detectors.progress import (
    Canary,
    canaries,
    pending_samples,
    pending_throughout,
    progress_between,
    syscalls_frozen,
)
from vllm_guardian.detectors.grpc_spin import frozen_spinner
from vllm_guardian.detectors.hold import despite_hold, stands_down
from vllm_guardian.detectors.vllm_round import in_round
from vllm_guardian.detectors.view import TargetView
from vllm_guardian.series import metrics as m

KIND = Kind.BUSY_LOOP
SUSPECT_WINDOW = 3.0  # seconds: a thread hot over these is worth a confirming canary (no conclusion)


def evaluate(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    st = view.state
    if not st.ready or not st.api_alive or stands_down(view, cfg):
        return None
    return in_round(view, despite_hold(view, cfg, _evaluate(view, cfg)))


def _evaluate(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    st, bl = view.state, cfg.busy_loop
    hot = hot_threads_for(view, bl)
    covered = bool(hot)
    stuck = _api_server_spin(view, hot, bl)
    if stuck is not None:
        return stuck
    spinner = frozen_spinner(view, hot, bl)
    if spinner is not None:  # a --grpc server: no /metrics, no canary; its syscalls stood still
        h, since = spinner
        sig = dict(_signals(h, bl, None, False, None, st.now), engine=None, grpc=True)
        sig["syscalls_frozen_s"] = round(st.now - since, 3)
        what = f"no syscall in it or its process for {st.now - since:.1f}s; a --grpc server, judged from /proc"
        return _finding(view, h, sig, "syscalls_frozen", what, confirmed=True)
    if not covered:
        # Hot, but not yet for min_coverage of the window: not enough to conclude, enough to
        # start confirming, so the canary's timeout overlaps the wait for coverage.
        hot = hot_threads_for(view, replace(bl, min_coverage=0.0, window=min(bl.window, SUSPECT_WINDOW)))
        if not hot:
            return None
    h = hot[0]
    name, now = st.target.name, st.now
    engine = own_engine(view, h.pid)  # a data-parallel rank: judged on its own counters
    # judged over the last min_coverage of the window (at most since the thread was seen hot): the
    # server reports an engine's last steps a moment after they ran (2-3 s on the loaded test host,
    # a data-parallel rank), which must not hold the verdict off until the window has slid past it
    since = max(h.first_t, now - bl.min_coverage * bl.window)
    progress = progress_between(view.series, name, since, now, engine)
    if progress is True:
        return None
    if not covered:
        sig = dict(_signals(h, bl, progress, False, None, now), engine=engine or None)
        return _finding(view, h, sig, "suspect", f"hot for {now - h.first_t:.1f}s, confirming", confirmed=False)
    pending = pending_throughout(view.series, name, since, now, engine)
    pend_pts = pending_samples(view.series, name, since, now, engine)
    pending_now = pend_pts[-1][1] if pend_pts else None
    base = dict(_signals(h, bl, progress, pending, pending_now, now), engine=engine or None)

    if pending and progress is False:
        what = f"counters frozen with {pending_now:g} requests pending for {now - h.first_t:.1f}s"
        return _finding(view, h, base, "counters_frozen", what, confirmed=True)

    rank = rank_of(process_title(view.state.target, h.pid)).get("dp_rank") if engine else None
    mine = [c for c in canaries(view.series, name, h.first_t, now) if c.rank is None or c.rank == rank]
    # started after the thread was seen hot; or a timeout whose last SUSPECT_WINDOW the thread was
    # seen hot (a spinner starved of CPU is followed only once seen runnable twice: the canary that
    # reached it just before that is this spin's too, and the confirming one would queue behind it)
    recent = [c for c in mine if c.started >= h.first_t or (c.timed_out and c.ended - h.first_t >= SUSPECT_WINDOW)]
    if recent:
        c = recent[-1]
        if c.ok and (not engine or c.rank == rank):
            return None  # (answered where the server chose: maybe by another rank, nothing of this one)
        if c.timed_out and progress_between(view.series, name, c.started, c.ended, engine) is not True:
            sig = dict(base, **_canary_signals(c))
            what = f"canary timed out after {c.ended - c.started:.1f}s"
            return _finding(view, h, sig, "canary_timeout", what, confirmed=True)

    sig = dict(base)
    if recent:
        sig.update(_canary_signals(recent[-1]))
    if st.canary_in_flight_since is not None:
        sig["canary_in_flight_s"] = round(now - st.canary_in_flight_since, 3)
    why = "progress unknown" if progress is None else "no work visibly pending"
    return _finding(view, h, sig, "suspect", f"{why}, confirming with a canary", confirmed=False)


def _api_server_spin(view: TargetView, hot: list[HotThread], bl: BusyLoopConfig) -> Finding | None:
    """A covered hot event loop (main thread) of an API-server process that is not the engine,
    whose syscall count stood still since it turned hot (over the last ``min_coverage`` of the
    window at most): confirmed, naming the process by its title."""
    st = view.state
    if not any(p.role is Role.ENGINE_CORE for p in st.target.processes):
        return None  # no separate engine: the API server may be the engine itself
    for h in hot:
        if h.role is not Role.API_SERVER or h.tid != h.pid:
            continue
        since = max(h.first_t, st.now - bl.min_coverage * bl.window)
        if not syscalls_frozen(view.series, st.target.name, h.subject, since, st.now, st.probe_interval):
            continue
        title = process_title(st.target, h.pid)
        sig = dict(_signals(h, bl, None, False, None, st.now), engine=None, reason="syscalls_frozen")
        sig.update(process_title=title, syscalls_frozen_s=round(st.now - since, 3))
        who = (title or "").removeprefix("VLLM::") or role_label(h.role)
        summary = (
            f"{who} (pid {h.pid}) event loop thread {h.tid} spins at {h.demand_ratio:.0%} CPU "
            f"with no syscall for {st.now - since:.1f}s (serves nothing; the engine is not judged by it)"
        )
        return Finding(
            kind=KIND,
            target=st.target.name,
            severity=Severity.CRITICAL,
            summary=summary,
            signals=sig,
            confirmed=True,
            subject=h.subject,
        )
    return None


def own_engine(view: TargetView, pid: int) -> str:
    """The subject of the engine a process is (``EngineCore_DP1`` -> ``engine:1``) when the
    server reports that engine's own counters; "" (the whole server) otherwise."""
    rank = rank_of(process_title(view.state.target, pid)).get("dp_rank")
    if rank is None:
        return ""
    subject = m.engine_subject(rank)
    return subject if view.series.latest(view.state.target.name, subject, m.ITERATIONS) is not None else ""


def _signals(
    h: HotThread, bl: BusyLoopConfig, progress: bool | None, pending: bool, pending_now: float | None, now: float
) -> dict[str, Any]:
    return {
        "pid": h.pid,
        "tid": h.tid,
        "role": h.role.value if h.role is not None else None,
        "cpu_ratio": round(h.cpu_ratio, 4),
        "cpu_demand": round(h.demand_ratio, 4),
        "voluntary_per_cpu_s": round(h.voluntary_per_cpu_s, 3),
        "syscall_running_fraction": None if h.running_fraction is None else round(h.running_fraction, 4),
        "hot_for_s": round(now - h.first_t, 3),
        "window": bl.window,
        "progress": progress,
        "pending": pending,
        "pending_requests": pending_now,
        "threshold_cpu_ratio": bl.cpu_ratio,
        "threshold_max_voluntary_per_cpu_second": bl.max_voluntary_per_cpu_second,
        "threshold_running_fraction": bl.running_fraction,
        "threshold_min_coverage": bl.min_coverage,
    }


def _canary_signals(c: Canary) -> dict[str, Any]:
    return {
        "canary_ok": c.ok,
        "canary_timed_out": c.timed_out,
        "canary_latency_s": c.latency if c.latency is not None else round(c.ended - c.started, 3),
    }


def _finding(
    view: TargetView, h: HotThread, signals: dict[str, Any], reason: str, what: str, confirmed: bool
) -> Finding:
    signals["reason"] = reason
    title = process_title(view.state.target, h.pid)
    signals.update(process_title=title, **rank_of(title))  # which engine of a DP / TP server
    sep = "; " if not confirmed else " with no engine progress ("
    tail = ")" if confirmed else ""
    who = title.removeprefix("VLLM::") if title and rank_of(title) else role_label(h.role)
    summary = f"{who} thread {h.tid} spins at {h.demand_ratio:.0%} CPU{sep}{what}{tail}"
    return Finding(
        kind=KIND,
        target=view.state.target.name,
        severity=Severity.CRITICAL,
        summary=summary,
        signals=signals,
        confirmed=confirmed,
        subject=h.subject,
    )
