"""accel_memory_leak: the target's accelerator memory rises steadily with no new load.

Reads the target's accelerator memory (``accel.memory_bytes``, subject ``""``: the
sum over its processes), the devices' total (``accel.memory_total_bytes``), the
per-process series (``p<pid>``) to name the process growing fastest, and the
running-requests gauge. Decides with ``memory_trend``: a robust slope over the
window after warm-up >= ``slope_bytes_per_s``, rising in both halves of the
window (not one allocation step, not growth that levels off) and not explained
by more running requests. The finding carries the slope, the fit quality and
the projected time until the devices are full (null when the total is unknown).
"""

from __future__ import annotations

from typing import Any

from vllm_guardian.config.schema_detectors import DetectorsConfig
from vllm_guardian.model import Finding, Kind, Severity
from vllm_guardian.series import metrics
from vllm_guardian.series.window import points_between
from vllm_guardian.detectors import memory_trend as mt
from vllm_guardian.detectors.view import TargetView

KIND = Kind.ACCEL_MEMORY_LEAK
CRITICAL_WITHIN_S = 600.0  # projected exhaustion sooner than this makes the finding critical


def evaluate(view: TargetView, cfg: DetectorsConfig) -> Finding | None:
    st, c = view.state, cfg.accel_memory_leak
    name = st.target.name
    judged = mt.judged_points(lambda t0, t1: points_between(view.series, name, "", metrics.ACCEL_MEM, t0, t1), st, c)
    if judged is None:
        return None
    win, pts = judged
    if not mt.usable(pts, st, c) or not mt.worth_fitting(pts, c.slope_bytes_per_s):
        return None
    tr = mt.trend(pts)
    if tr is None or not tr.leaking(c.slope_bytes_per_s):
        return None
    load = mt.load_explains(view.series, name, win[0], win[1], pts)
    if load.explained:
        return None
    totals = points_between(view.series, name, "", metrics.ACCEL_TOTAL, *win)
    total = totals[-1][1] if totals else None
    current = pts[-1][1]
    sig: dict[str, Any] = mt.signals(tr, load, c, st, win, current, total)
    sig.update(mt.fastest_process(view, metrics.ACCEL_MEM, win))
    projected = sig["projected_exhaustion_s"]
    severity = Severity.CRITICAL if projected is not None and projected < CRITICAL_WITHIN_S else Severity.WARNING
    when = f", full in ~{projected / 60:.0f} min" if projected is not None else ""
    summary = (
        f"accelerator memory grows {tr.slope / 1e6:.1f} MB/s "
        f"(threshold {c.slope_bytes_per_s / 1e6:.1f} MB/s) with no new load; "
        f"now {mt.human_bytes(current)}{when}"
    )
    return Finding(
        kind=KIND,
        target=name,
        severity=severity,
        summary=summary,
        signals=sig,
        confirmed=True,
        subject=sig.get("subject") or "",
    )
