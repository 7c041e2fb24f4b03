"""Line charts as inline SVG text (pure, no libraries, no scripts).

``line_chart(title, lines, …)`` draws one or more series of ``(t, value)`` points
on a shared time axis (seconds relative to ``t_end``: "-60 s … 0 s"), with the
y range, a legend, an optional horizontal threshold and an optional fitted
line (``Fit`` from ``vllm_guardian.series.slope``) drawn dashed with its slope in the
legend. Every text goes through ``html.escape``; numbers are formatted by
``fmt_value`` in the series' unit (bytes, ratio as %, per second, plain).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Sequence

from vllm_guardian.series.slope import Fit

WIDTH, HEIGHT = 530, 220
LEFT, RIGHT, TOP, BOTTOM = 70, 16, 28, 40
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


@dataclass(frozen=True)
class Line:
    label: str
    points: Sequence[tuple[float, float]]
    fit: Fit | None = None


def fmt_value(v: float, unit: str = "") -> str:
    if unit == "bytes":
        for suffix, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
            if abs(v) >= size:
                return f"{v / size:.1f} {suffix}"
        return f"{v:.0f} B"
    if unit == "ratio":
        return f"{v * 100:.0f} %"
    if unit == "/s":
        return f"{v:.3g}/s"
    return f"{v:.4g}"


def _nice_range(lo: float, hi: float, unit: str = "") -> tuple[float, float]:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return 0.0, 1.0
    if unit == "ratio":  # CPU, utilisation, KV usage: always the whole 0..100 % (and more when over)
        return min(0.0, lo), max(1.0, hi)
    if hi == lo:
        pad = abs(hi) * 0.1 or 1.0
        return (0.0 if lo >= 0 and lo - pad < 0 else lo - pad), hi + pad
    pad = (hi - lo) * 0.05
    return (0.0 if lo >= 0 and lo - pad < 0 else lo - pad), hi + pad


def line_chart(
    title: str,
    lines: Sequence[Line],
    *,
    unit: str = "",
    t_end: float | None = None,
    threshold: float | None = None,
    threshold_label: str = "",
    chart_id: str = "",
) -> str:
    pts = [p for ln in lines for p in ln.points if math.isfinite(p[0]) and math.isfinite(p[1])]
    esc = html.escape
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" id="{esc(chart_id)}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}">'
        f'<title>{esc(title)}</title><rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>'
        f'<text x="{LEFT}" y="18" font-size="13" font-weight="bold" fill="#222">{esc(title)}</text>'
    )
    if not pts:
        return head + f'<text x="{LEFT}" y="{HEIGHT // 2}" fill="#888">no samples</text></svg>'
    t1 = t_end if t_end is not None else max(t for t, _ in pts)
    t0 = min(t for t, _ in pts)
    if t1 <= t0:
        t0 = t1 - 1.0
    vals = [v for _, v in pts] + ([threshold] if threshold is not None else [])
    lo, hi = _nice_range(min(vals), max(vals), unit)
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (t - t0) / (t1 - t0) * pw

    def y(v: float) -> float:
        return TOP + ph - (v - lo) / (hi - lo) * ph

    out = [head, f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ccc"/>']
    for frac in (0.0, 0.5, 1.0):
        v = lo + (hi - lo) * frac
        yy = y(v)
        out.append(
            f'<line x1="{LEFT}" y1="{yy:.1f}" x2="{LEFT + pw}" y2="{yy:.1f}" stroke="#e4e4e4"/>'
            f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" font-size="11" text-anchor="end" fill="#555">'
            f"{esc(fmt_value(v, unit))}</text>"
        )
    digits = 1 if t1 - t0 < 10 else 0
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        t = t0 + (t1 - t0) * frac
        out.append(
            f'<text x="{x(t):.1f}" y="{TOP + ph + 16}" font-size="11" text-anchor="middle" fill="#555">'
            f"{t - t1:+.{digits}f} s</text>"
        )
    if threshold is not None:
        out.append(
            f'<line class="threshold" x1="{LEFT}" y1="{y(threshold):.1f}" x2="{LEFT + pw}" '
            f'y2="{y(threshold):.1f}" stroke="#999" stroke-dasharray="2,3"/>'
            f'<text x="{LEFT + pw - 4}" y="{y(threshold) - 4:.1f}" font-size="10" text-anchor="end" '
            f'fill="#777">{esc(threshold_label or fmt_value(threshold, unit))}</text>'
        )
    legend_y = HEIGHT - 8
    lx = float(LEFT)
    for i, ln in enumerate(lines):
        colour = PALETTE[i % len(PALETTE)]
        good = [(t, v) for t, v in ln.points if math.isfinite(t) and math.isfinite(v)]
        if len(good) == 1:
            out.append(f'<circle cx="{x(good[0][0]):.1f}" cy="{y(good[0][1]):.1f}" r="3" fill="{colour}"/>')
        elif good:
            path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in good)
            out.append(f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="1.6" points="{path}"/>')
        label = ln.label
        if ln.fit is not None and good:
            a, b = good[0][0], good[-1][0]
            out.append(
                f'<line class="fit" x1="{x(a):.1f}" y1="{y(ln.fit.at(a)):.1f}" x2="{x(b):.1f}" '
                f'y2="{y(ln.fit.at(b)):.1f}" stroke="{colour}" stroke-dasharray="6,4" stroke-width="1.2"/>'
            )
            label += (
                f" (fit {fmt_value(ln.fit.slope * 3600, unit)}/h)"
                if unit == "bytes"
                else f" (fit {ln.fit.slope:.3g}/s)"
            )
        out.append(
            f'<rect x="{lx}" y="{legend_y - 8}" width="10" height="3" fill="{colour}"/>'
            f'<text x="{lx + 14}" y="{legend_y - 4}" font-size="11" fill="#333">{esc(label)}</text>'
        )
        lx += 24 + 6.5 * len(label)
    out.append("</svg>")
    return "".join(out)
