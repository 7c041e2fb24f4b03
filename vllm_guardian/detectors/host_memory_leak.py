"""host_memory_leak: the RSS of the target's processes rises steadily with no new load.

Reads ``proc.rss_bytes`` of every process in the current tree (subjects ``p<pid>``),
sums them per sample time (only times at which every process with samples in
the window has a value, so a process that appears mid-window does not read as
a jump) and judges the sum with ``memory_trend`` (the same rules as
accel_memory_leak). The finding names the process whose RSS grows fastest.
"""

from __future__ import annotations

from typing import Any

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.model import Finding, Kind, Severity, Subject
from vllm_guardian.series import metrics
from vllm_guardian.series.store import Point
from vllm_guardian.series.window import points_between
from vllm_guardian.detectors import memory_trend as mt
from vllm_guardian.detectors.view import TargetView

KIND = Kind.HOST_MEMORY_LEAK


def summed_rss(view: TargetView, t0: float, t1: float) -> list[Point]:
    """Total RSS of the current processes at each sample time in ``[t0, t1]``."""
    per = []
    for p in view.state.target.processes:
        pts = points_between(view.series, view.name, Subject(p.pid).key, metrics.PROC_RSS, t0, t1)
        if pts:
            per.append(pts)
    if not per:
        return []
    if _same_times(per):  # the usual case: every process read by the same procfs passes
        return [(column[0][0], float(sum(v for _, v in column))) for column in zip(*per, strict=True)]
    return _merged(per)


def _same_times(per: list[list[Point]]) -> bool:
    """Every series sampled at the same times (then the sum at each is the sum of each column)."""
    first = per[0]
    return all(len(pts) == len(first) and all(p[0] == q[0] for p, q in zip(pts, first, strict=True)) for pts in per[1:])


def _merged(per: list[list[Point]]) -> list[Point]:
    """The sum at each time any process was sampled, each at its latest value at or before it;
    only times at which every process has one."""
    out: list[Point] = []
    idx = [0] * len(per)
    last: list[float | None] = [None] * len(per)
    for t in sorted({t for pts in per for t, _ in pts}):
        for k, pts in enumerate(per):  # each process's latest value at or before t
            while idx[k] < len(pts) and pts[idx[k]][0] <= t:
                last[k] = pts[idx[k]][1]
                idx[k] += 1
        known = [v for v in last if v is not None]
        if len(known) == len(per):
            out.append((t, float(sum(known))))
    return out


def evaluate(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    st, c = view.state, cfg.host_memory_leak
    judged = mt.judged_points(lambda t0, t1: summed_rss(view, t0, t1), st, c)
    if judged is None:
        return None
    win, pts = judged
    if not mt.usable(pts, st, c) or not mt.worth_fitting(pts, c.slope_bytes_per_s):
        return None
    tr = mt.trend(pts)
    if tr is None or not tr.leaking(c.slope_bytes_per_s):
        return None
    load = mt.load_explains(view.series, st.target.name, win[0], win[1], pts)
    if load.explained:
        return None
    current = pts[-1][1]
    sig: dict[str, Any] = mt.signals(tr, load, c, st, win, current, None)
    top = mt.fastest_process(view, metrics.PROC_RSS, win)
    sig.update(top)
    who = f"; {top['process']} pid {top['pid']} grows fastest" if top else ""
    summary = (
        f"host memory (RSS) of the target grows {tr.slope / 1e6:.1f} MB/s "
        f"(threshold {c.slope_bytes_per_s / 1e6:.1f} MB/s) with no new load; "
        f"now {mt.human_bytes(current)}{who}"
    )
    return Finding(
        kind=KIND,
        target=st.target.name,
        severity=Severity.WARNING,
        summary=summary,
        signals=sig,
        confirmed=True,
        subject=top.get("subject", ""),
    )
