"""Scripted value curves for the fake accelerators: steady, warm-up then flat, linear leak,
step, noisy. A curve maps seconds since the scenario started to a value.

A spec is a number (steady) or a mapping ``{"curve": kind, ...params, "noise": amp, "seed": n}``:

- ``steady``: ``value``
- ``warmup``: ``start`` rising linearly to ``value`` over ``duration`` s, then flat
- ``linear``: ``start + rate * t`` (a leak: ``rate`` units per second), from ``after`` s on
  (flat at ``start`` before)
- ``step``: ``before`` until ``at`` s, then ``after``
- ``noisy``: ``value`` plus noise (same as ``steady`` with ``noise``)
- ``approach``: ``start`` rising to ``value`` ever slower (``1 - exp(-t / tau)``): warm-up that
  decelerates and levels off

``noise`` adds a deterministic pseudo-random offset in ``[-noise, +noise]`` that
depends only on ``seed`` and the time rounded to the millisecond, so the same
scenario replays the same numbers in every process (fake executable included).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Mapping

KINDS = ("steady", "warmup", "linear", "step", "noisy", "approach")


@dataclass(frozen=True)
class Curve:
    kind: str = "steady"
    params: Mapping[str, float] = field(default_factory=dict)
    noise: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown curve {self.kind!r} (one of {', '.join(KINDS)})")

    def _p(self, key: str, default: float = 0.0) -> float:
        return float(self.params.get(key, default))

    def base(self, t: float) -> float:
        k = self.kind
        if k in ("steady", "noisy"):
            return self._p("value")
        if k == "warmup":
            start, end, dur = self._p("start"), self._p("value"), self._p("duration", 60.0)
            return end if t >= dur or dur <= 0 else start + (end - start) * max(t, 0.0) / dur
        if k == "approach":
            start, end, tau = self._p("start"), self._p("value"), self._p("tau", 60.0)
            return end if tau <= 0 else start + (end - start) * (1.0 - math.exp(-max(t, 0.0) / tau))
        if k == "linear":
            after = self._p("after")
            return self._p("start") + self._p("rate") * max(0.0, t - after)
        return self._p("after") if t >= self._p("at") else self._p("before")  # step

    def value(self, t: float) -> float:
        if not self.noise:
            return self.base(t)
        rnd = random.Random(f"{self.seed}:{round(t, 3)}")
        return self.base(t) + rnd.uniform(-self.noise, self.noise)


def curve(spec: Any) -> Curve:
    """A ``Curve`` from a number or a mapping (see the module docstring)."""
    if isinstance(spec, Curve):
        return spec
    if isinstance(spec, (int, float)):
        return Curve("steady", {"value": float(spec)})
    if not isinstance(spec, Mapping):
        raise ValueError(f"a curve is a number or a mapping, got {spec!r}")
    rest = {k: float(v) for k, v in spec.items() if k not in ("curve", "noise", "seed")}
    return Curve(str(spec.get("curve", "steady")), rest, float(spec.get("noise", 0.0)), int(spec.get("seed", 0)))
