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

On a data-parallel server (vLLM's ``engine="k"`` label, ``ranks``) each engine is also judged on
its own counters and gauges: one rank frozen with work pending while the other serves is a
stall of that rank (``engine``, ``dp_rank`` and its ``EngineCore_DP<k>`` process named), though
the server as a whole makes progress. A canary timeout counts against a rank when it was sent to
that rank (``X-data-parallel-rank``: the canary probe asks each rank in turn), or, routed by the
server, when that rank had work pending during its flight (it may have reached it); and only
once the rank's threads have been read (a spinner starved of CPU on a busy node reads cool as a
process, so its threads are read only once the target is suspected: until then the timeout is a
suspect, not a stall — it may be busy_loop's case). A rank's own finding
wins over the whole server's; a hot thread stands a rank down only when it is in that rank's
process tree or in a process every rank shares (the API server, the coordinator): the other
rank's busy decode is not its excuse. When the whole server is found frozen (every client stuck
behind the hung rank, say) before the rank's own verdict is in, the finding names the one rank in
trouble (a suspect of its own), else no engine: never the first engine by default.

An API-server process of vLLM's (titled ``VLLM::APIServer``, ``VLLM::APIServer_<i>`` with
``--api-server-count N``) beside a separate engine process whose main thread (the asyncio event
loop, served by uvicorn, which wakes it ~10 times a second even idle) has not run at all for
``FROZEN_LOOP_SHARE`` of the window (10 s at the defaults: its time on a CPU, sampled every tick,
stood still) is confirmed (``event_loop_frozen``), naming that process, whatever the engine does:
it accepts nothing and answers nothing it holds, while the other API servers may go on serving
the shared port (so canaries are answered and the engine progresses). Blocked on a lock, a
socket, a disk, or stopped: each is a stall of that process. A spin is not (it runs: busy_loop's
case).

Never while drained by the operator or paused or asleep on purpose (nor in the resume grace
after either: ``TargetState.on_purpose``), unless the pause does not explain what is seen
(``detectors/hold.py``: a thread burning a core, or requests pending, all through its limit; the
finding says so), never during startup grace nor once the API server is gone (engine_dead's case),
nor while a process of the target is hot but its threads are not read yet (the
first tick of a spin: whether it is busy_loop's case is not known).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.model import Finding, Kind, Role, Severity, Subject
from vllm_guardian.series import metrics as m
from vllm_guardian.series.window import span
from vllm_guardian.detectors.busy_loop import SUSPECT_WINDOW
from vllm_guardian.detectors.hot_threads import hot_threads_for
from vllm_guardian.detectors.progress import (
    canaries,
    counter_frozen,
    pending_samples,
    pending_throughout,
    progress_between,
)
from vllm_guardian.detectors.ranks import Rank, ranks, shared_pids
from vllm_guardian.detectors.hold import despite_hold, stands_down
from vllm_guardian.detectors.vllm_round import in_round
from vllm_guardian.detectors.view import TargetView

KIND = Kind.ENGINE_STALL
MIN_WINDOW_SPAN = 0.9  # share of the window the pending samples must span
SUSPECT_AFTER = 3.0  # seconds of pending work with frozen counters before asking for a canary
FROZEN_LOOP_SHARE = 0.5  # share of the window an API server's event loop may not run before it is a stall
API_SERVER_TITLE = "VLLM::APIServer"  # vLLM's title of a process that serves uvicorn (``_<i>`` when N > 1)


def evaluate(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    st = view.state
    if not st.ready or not st.api_alive or stands_down(view, cfg):
        return None
    return in_round(view, despite_hold(view, cfg, _evaluate(view, cfg)))


def _evaluate(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    st = view.state
    busy = _busy_pids(view, cfg)
    engines = ranks(view)
    shared = shared_pids(st.target, engines)
    judged = [(r, _judge(view, cfg, r.subject, dict(_who(r), engine=r.subject))) for r in engines]
    found: list[Finding | None] = [f for r, f in judged if not busy & (r.tree | shared)]
    if not busy:
        # the server as a whole: on a data-parallel server, named after the one rank in trouble
        troubled = [r for r, f in judged if f is not None]
        who = _who(troubled[0]) if len(troubled) == 1 else {} if engines else _whole_server(view)
        found.append(_judge(view, cfg, "", who))
    found.append(_frozen_event_loop(view, cfg))
    findings = [f for f in found if f is not None]
    return next((f for f in findings if f.confirmed), findings[0] if findings else None)


def _whole_server(view: TargetView) -> dict[str, Any]:
    engines = view.state.target.by_role(Role.ENGINE_CORE)
    return {"pid": engines[0].pid, "role": Role.ENGINE_CORE.value} if engines else {}


def _who(r: Rank) -> dict[str, Any]:
    who: dict[str, Any] = {"dp_rank": r.rank}
    if r.process is not None:
        who.update(pid=r.process.pid, role=Role.ENGINE_CORE.value, process_title=r.process.cmdline[0])
    return who


def _judge(view: TargetView, cfg: DetectorsConfig, engine: str, who: dict[str, Any]) -> Finding | None:
    """One engine (``engine``: its subject) or the whole server (``""``) judged on its own series."""
    st, es, series = view.state, cfg.engine_stall, view.series
    name, now = st.target.name, st.now
    t0 = now - es.window
    pend = pending_samples(series, name, t0, now, engine)
    spans = span(pend, st.probe_interval) >= MIN_WINDOW_SPAN * es.window
    pending = bool(pend) and all(v > 0 for _, v in pend)
    progress = progress_between(series, name, t0, now, engine)
    base: dict[str, Any] = {
        "window": es.window,
        "pending": pending,
        "pending_requests": pend[-1][1] if pend else None,
        "progress": progress,
        "threshold_window_span": MIN_WINDOW_SPAN,
        **who,
    }

    def finding(reason: str, what: str, confirmed: bool, **extra: Any) -> Finding:
        return _finding(view, dict(base, reason=reason, **extra), what, confirmed)

    if pending and spans and progress is False:
        return finding(
            "counters_frozen", f"counters frozen with {pend[-1][1]:g} requests pending for {es.window:g}s", True
        )

    rank = who.get("dp_rank") if engine else None
    done = [c for c in canaries(series, name, t0, now) if not engine or c.rank in (None, rank)]
    if done:
        c = done[-1]
        flight = progress_between(series, name, c.started, c.ended, engine)
        # ...and the engine has not moved since: a recovered engine (a spin that ended, a lock
        # released) works through its backlog at once, which must clear the old timeout
        since = progress_between(series, name, c.started, now, engine)
        # a rank is blamed only if the canary was sent to it, or may have reached it (work in the flight)
        reached = (
            not engine
            or c.rank == rank
            or any(v > 0 for _, v in pending_samples(series, name, c.started, c.ended, engine))
        )
        if c.timed_out and flight is not True and since is not True and reached:
            what = f"canary timed out after {c.ended - c.started:.1f}s"
            if engine and not _threads_read(view, who.get("pid")):
                return finding("suspect", f"{what}, reading its threads", False, canary_latency_s=c.latency)
            return finding("canary_timeout", what, True, canary_latency_s=c.latency, canary_progress=flight)

    recent = now - SUSPECT_AFTER
    if (
        pending_throughout(series, name, recent, now, engine)
        and progress_between(series, name, recent, now, engine) is False
    ):
        return finding(
            "suspect", f"counters frozen with requests pending for {SUSPECT_AFTER:g}s, confirming with a canary", False
        )
    return None


def _frozen_event_loop(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    """The first vLLM API-server process (beside a separate engine) whose main thread has not run
    over the last ``FROZEN_LOOP_SHARE`` of the window: confirmed, naming it."""
    st = view.state
    if not st.target.by_role(Role.ENGINE_CORE):
        return None  # no separate engine: the API server may be the engine itself
    frozen_s = FROZEN_LOOP_SHARE * cfg.engine_stall.window
    for p in st.target.by_role(Role.API_SERVER):
        title = p.cmdline[0] if p.cmdline else ""
        if not title.startswith(API_SERVER_TITLE):
            continue
        subject = Subject(p.pid).key
        if not counter_frozen(
            view.series, st.target.name, subject, m.PROC_MAIN_RUN_S, st.now - frozen_s, st.now, st.probe_interval
        ):
            continue
        signals = {
            "window": cfg.engine_stall.window,
            "reason": "event_loop_frozen",
            "pid": p.pid,
            "role": Role.API_SERVER.value,
            "process_title": title,
            "event_loop_frozen_s": frozen_s,
        }
        what = f"its event loop (pid {p.pid}) has not run for {frozen_s:g}s (it accepts and answers nothing)"
        return _finding(view, signals, what, True, lead=f"{title.removeprefix('VLLM::')} serves nothing")
    return None


def _busy_pids(view: TargetView, cfg: DetectorsConfig) -> frozenset[int]:
    """Processes with a hot thread (busy_loop's case), over its window or only its suspect
    window (a spin that started less than a window ago, or that a guardian started beside it
    has watched only that long: its first canary times out before the window fills), and
    processes hot whose threads are not read yet (``_hot_unread``)."""
    bl = cfg.busy_loop
    lately = replace(bl, min_coverage=0.0, window=min(bl.window, SUSPECT_WINDOW))
    hot = {h.pid for h in (*hot_threads_for(view, bl), *hot_threads_for(view, lately))}
    return frozenset(hot | _hot_unread(view, bl.cpu_ratio))


def _threads_read(view: TargetView, pid: int | None) -> bool:
    """Have the threads of process ``pid`` been read lately (two samples of a thread within the
    last 3 probe intervals: what a hot-thread verdict needs)? True when the process is unknown."""
    if pid is None:
        return True
    st = view.state
    name, recent = st.target.name, st.now - 3 * st.probe_interval - 1e-9
    for t in view.series.subjects(name, m.THREAD_CPU, Subject(pid).threads_prefix):
        if len(view.series.window(name, t, m.THREAD_CPU, recent)) >= 2:
            return True
    return False


def _hot_unread(view: TargetView, cpu_ratio: float) -> set[int]:
    """Processes that just turned hot, whose threads are not read yet or whose hottest thread
    reads hot on its latest sample: whether a thread spins (busy_loop's case) is not ruled
    out yet, so a stall cannot be concluded."""
    st = view.state
    recent = st.now - 2 * st.probe_interval
    name = st.target.name
    out: set[int] = set()
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
            out.add(p.pid)
    return out


def _finding(view: TargetView, signals: dict[str, Any], what: str, confirmed: bool, lead: str = "") -> Finding:
    pid, title = signals.get("pid"), signals.get("process_title")
    who = f"{title.removeprefix('VLLM::')} makes" if title else "engine makes"
    return Finding(
        kind=KIND,
        target=view.state.target.name,
        severity=Severity.CRITICAL,
        summary=f"{lead or who + ' no progress and no thread is hot'}: {what}",
        signals=signals,
        confirmed=confirmed,
        subject=Subject(pid).key if pid is not None else "",
    )
